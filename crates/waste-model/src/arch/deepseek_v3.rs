//! DeepSeek-V3 and Kimi K2 (one architecture): multi-head latent attention
//! with optional q LoRA and YaRN, dense first layers, then MoE layers with a
//! shared expert and a sigmoid router (selection bias, group-limited top-k,
//! renormalised unbiased weights times `routed_scaling_factor`). The softmax
//! scores and greedy or group-max selection of DeepSeek-V2 are read too: a
//! `deepseek2` GGUF of either generation arrives through this config.
//! See transformers' `modeling_deepseek_v3.py` and the quirks list in
//! shared/fixtures/README.md.

use serde::Deserialize;
use serde_json::Value;

use crate::arch::{Trunk, TrunkDefaults, check_top_k, mla};
use crate::config::{
    self, AttentionConfig, GroupScore, MlaConfig, ModelConfig, MoeConfig, RouterConfig, Scoring,
    SharedExpertConfig,
};
use crate::ops::rope::RopeParams;
use crate::{Error, Result};

/// config.json keys of a DeepSeek-V3 / Kimi-K2 checkpoint beyond the
/// [`Trunk`]; defaults are transformers' `DeepseekV3Config` defaults.
#[derive(Debug, Deserialize)]
struct DeepseekV3Config {
    intermediate_size: usize,
    moe_intermediate_size: usize,
    #[serde(default)]
    n_shared_experts: Option<usize>,
    n_routed_experts: Option<usize>,
    #[serde(default = "default_scaling")]
    routed_scaling_factor: f32,
    #[serde(default = "default_n_group")]
    n_group: usize,
    #[serde(default = "default_topk_group")]
    topk_group: usize,
    num_experts_per_tok: Option<usize>,
    #[serde(default = "default_first_dense")]
    first_k_dense_replace: usize,
    #[serde(default = "super::one")]
    moe_layer_freq: usize,
    #[serde(default = "super::yes")]
    norm_topk_prob: bool,
    #[serde(default = "super::yes")]
    rope_interleave: bool,
    #[serde(default)]
    attention_bias: bool,
    scoring_func: Option<String>,
    topk_method: Option<String>,
}

fn default_scaling() -> f32 {
    2.5
}
fn default_n_group() -> usize {
    8
}
fn default_topk_group() -> usize {
    4
}
fn default_first_dense() -> usize {
    3
}

const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-6,
    max_position_embeddings: 4096,
};

pub(crate) fn parse(model_type: &str, json: &Value) -> Result<ModelConfig> {
    let t = Trunk::parse(json)?;
    let c: DeepseekV3Config = config::parse(json)?;
    let scoring = match c.scoring_func.as_deref() {
        None | Some("sigmoid") => Scoring::Sigmoid,
        Some("softmax") => Scoring::Softmax,
        Some(f) => {
            return Err(Error::config(
                "scoring_func",
                format!("{f:?} is not supported (sigmoid or softmax)"),
            ));
        }
    };
    // Greedy selection is group-limited selection with one group.
    let (group_score, n_group, topk_group) = match c.topk_method.as_deref() {
        None | Some("noaux_tc") => (GroupScore::TopTwoSum, c.n_group, c.topk_group),
        Some("group_limited_greedy") => (GroupScore::Max, c.n_group, c.topk_group),
        Some("greedy") => (GroupScore::Max, 1, 1),
        Some(m) => {
            return Err(Error::config(
                "topk_method",
                format!("{m:?} is not supported (noaux_tc, group_limited_greedy or greedy)"),
            ));
        }
    };
    if c.attention_bias {
        return Err(Error::config(
            "attention_bias",
            "true is not supported for MLA",
        ));
    }
    let n_experts = c.n_routed_experts.unwrap_or(0);
    let top_k = c.num_experts_per_tok.unwrap_or(8);
    if n_experts > 0 {
        if n_group == 0 || !n_experts.is_multiple_of(n_group) || topk_group > n_group {
            return Err(Error::config(
                "n_group",
                format!(
                    "n_routed_experts {n_experts} cannot form {n_group} groups with topk_group {topk_group}"
                ),
            ));
        }
        check_top_k("num_experts_per_tok", top_k, "n_routed_experts", n_experts)?;
    }
    let base = mla(json)?;
    let rope_params = RopeParams::from_config(json, 10_000.0)?;
    let rope = rope_params.build(base.qk_rope_head_dim, c.rope_interleave)?;
    let qk_head_dim = base.qk_nope_head_dim + base.qk_rope_head_dim;
    let softmax_scale =
        ((qk_head_dim as f64).powf(-0.5) * rope_params.deepseek_softmax_mscale_sq()) as f32;
    let freq = c.moe_layer_freq.max(1);
    let ffn = t.ffn(c.intermediate_size, |i| {
        n_experts > 0 && i >= c.first_k_dense_replace && i % freq == 0
    });
    let moe = (n_experts > 0).then(|| MoeConfig {
        latent: None,
        num_experts: n_experts,
        top_k,
        moe_intermediate_size: c.moe_intermediate_size,
        shared: c
            .n_shared_experts
            .filter(|&n| n > 0)
            .map(|n| SharedExpertConfig::ungated(n * c.moe_intermediate_size)),
        router: RouterConfig::Grouped {
            scoring,
            group_score,
            n_group,
            topk_group,
            norm_topk_prob: c.norm_topk_prob,
            routed_scaling_factor: c.routed_scaling_factor,
        },
        names: waste_family::deepseek_v3::FAMILY.moe.into(),
    });
    let attention = AttentionConfig::Mla(MlaConfig {
        rope: Some(rope),
        softmax_scale,
        ..base
    });
    let activation = config::activation(json)?;
    Ok(t.model(model_type, DEFAULTS, attention, ffn, moe, activation, json))
}
