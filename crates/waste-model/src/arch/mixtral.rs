//! Mixtral: GQA attention with an optional sliding window and a softmax top-2
//! router over SwiGLU experts named `block_sparse_moe.experts.{e}.w1/w3/w2`.
//! See transformers' `modeling_mixtral.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::Result;
use crate::arch::{Trunk, TrunkDefaults, check_top_k, gqa};
use crate::config::{self, AttentionConfig, GqaConfig, ModelConfig, MoeConfig, RouterConfig};

/// config.json keys of a Mixtral checkpoint beyond the [`Trunk`] and the heads.
#[derive(Debug, Deserialize)]
struct MixtralConfig {
    intermediate_size: usize,
    sliding_window: Option<usize>,
    num_local_experts: usize,
    num_experts_per_tok: usize,
}

const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-5,
    max_position_embeddings: 4096 * 32,
};

pub(crate) fn parse(_model_type: &str, json: &Value) -> Result<ModelConfig> {
    let t = Trunk::parse(json)?;
    let c: MixtralConfig = config::parse(json)?;
    let base = gqa(json, t.hidden_size, 1e6)?;
    check_top_k(
        "num_experts_per_tok",
        c.num_experts_per_tok,
        "num_local_experts",
        c.num_local_experts,
    )?;
    let attention = GqaConfig {
        sliding_window: c.sliding_window.filter(|&w| w > 0),
        ..base
    };
    let moe = MoeConfig {
        num_experts: c.num_local_experts,
        top_k: c.num_experts_per_tok,
        moe_intermediate_size: c.intermediate_size,
        shared: None,
        latent: None,
        // Mixtral always renormalises the top-k probabilities.
        router: RouterConfig::Softmax {
            norm_topk_prob: true,
        },
        names: waste_family::mixtral::FAMILY.moe.into(),
    };
    Ok(t.model(
        "mixtral",
        DEFAULTS,
        AttentionConfig::Gqa(attention),
        t.ffn(c.intermediate_size, |_| true),
        Some(moe),
        config::activation(json)?,
        json,
    ))
}
