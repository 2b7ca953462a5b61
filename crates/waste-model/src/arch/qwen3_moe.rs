//! Qwen3-MoE: GQA with per-head q/k RMSNorm before rotary, softmax top-k
//! routing with optional renormalisation, MoE on layers chosen by
//! `decoder_sparse_step` / `mlp_only_layers`. See transformers'
//! `modeling_qwen3_moe.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::arch::{Trunk, TrunkDefaults, check_top_k, gqa};
use crate::config::{self, AttentionConfig, GqaConfig, ModelConfig, MoeConfig, RouterConfig};
use crate::{Error, Result};

/// config.json keys of a Qwen3-MoE checkpoint beyond the [`Trunk`] and the
/// heads. Releases write `num_experts`, transformers 5 writes
/// `num_local_experts`.
#[derive(Debug, Deserialize)]
struct Qwen3MoeConfig {
    intermediate_size: usize,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    sliding_window: Option<usize>,
    num_experts: Option<usize>,
    num_local_experts: Option<usize>,
    num_experts_per_tok: usize,
    moe_intermediate_size: usize,
    #[serde(default)]
    norm_topk_prob: bool,
    #[serde(default = "super::one")]
    decoder_sparse_step: usize,
    #[serde(default)]
    mlp_only_layers: Vec<usize>,
}

const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-6,
    max_position_embeddings: 32_768,
};

pub(crate) fn parse(_model_type: &str, json: &Value) -> Result<ModelConfig> {
    let t = Trunk::parse(json)?;
    let c: Qwen3MoeConfig = config::parse(json)?;
    let num_experts = c.num_experts.or(c.num_local_experts).ok_or_else(|| {
        Error::config(
            "num_experts",
            "missing (qwen3_moe needs num_experts or num_local_experts)",
        )
    })?;
    let experts_key = if c.num_experts.is_some() {
        "num_experts"
    } else {
        "num_local_experts"
    };
    check_top_k(
        "num_experts_per_tok",
        c.num_experts_per_tok,
        experts_key,
        num_experts,
    )?;
    let attention = GqaConfig {
        qk_norm: true,
        qkv_bias: c.attention_bias,
        o_bias: c.attention_bias,
        // Like Qwen2, the window only applies when use_sliding_window is set.
        sliding_window: c.sliding_window.filter(|&w| c.use_sliding_window && w > 0),
        ..gqa(json, t.hidden_size, 10_000.0)?
    };
    let step = c.decoder_sparse_step.max(1);
    let ffn = t.ffn(c.intermediate_size, |i| {
        num_experts > 0 && !c.mlp_only_layers.contains(&i) && (i + 1) % step == 0
    });
    let moe = MoeConfig {
        num_experts,
        top_k: c.num_experts_per_tok,
        moe_intermediate_size: c.moe_intermediate_size,
        shared: None,
        latent: None,
        router: RouterConfig::Softmax {
            norm_topk_prob: c.norm_topk_prob,
        },
        names: waste_family::qwen3_moe::FAMILY.moe.into(),
    };
    Ok(t.model(
        "qwen3_moe",
        DEFAULTS,
        AttentionConfig::Gqa(attention),
        ffn,
        Some(moe),
        config::activation(json)?,
        json,
    ))
}
