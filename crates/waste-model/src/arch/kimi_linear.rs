//! The Kimi hybrids: Kimi-Linear (`kimi_linear`) and Kimi K3 (`kimi_k3`, whose
//! text model is a `kimi_linear` config under `text_config` with tensors under
//! `language_model.`). Layers mix Kimi Delta Attention and MLA (NoPE, with an
//! optional sigmoid output gate); MoE with shared experts and a sigmoid
//! router; K3 adds attention residuals, LatentMoE and SiTU-GLU.
//! See transformers' `modeling_kimi_linear.py` and
//! shared/fixtures/kimi_k3_tiny/ARCH.md.

use serde::Deserialize;
use serde_json::Value;
use waste_kernels::Activation;

use crate::arch::{Trunk, TrunkDefaults, check_top_k, mla};
use crate::config::{
    self, AttentionConfig, AttnResConfig, GroupScore, KdaConfig, KdaGate, LatentConfig,
    LayerAttention, MlaConfig, ModelConfig, MoeConfig, ResidualKind, RouterConfig, Scoring,
    SharedExpertConfig, TensorNames,
};
use crate::ops::rope::RopeParams;
use crate::{Error, Result};

/// `linear_attn_config` of a Kimi config. Layer lists are 1-based.
#[derive(Debug, Deserialize)]
struct LinearAttnConfig {
    #[serde(default)]
    kda_layers: Vec<usize>,
    num_heads: usize,
    head_dim: usize,
    #[serde(default = "four")]
    short_conv_kernel_size: usize,
    gate_lower_bound: Option<f32>,
    #[serde(default)]
    use_full_rank_gate: bool,
}

/// config.json keys of a Kimi-Linear text model (K3: its `text_config`)
/// beyond the [`Trunk`].
#[derive(Debug, Deserialize)]
struct KimiLinearConfig {
    intermediate_size: usize,
    moe_intermediate_size: usize,
    #[serde(default)]
    mla_use_nope: bool,
    #[serde(default)]
    mla_use_output_gate: bool,
    linear_attn_config: Option<LinearAttnConfig>,
    #[serde(default)]
    num_experts: usize,
    #[serde(default = "super::one")]
    num_experts_per_token: usize,
    #[serde(default)]
    num_shared_experts: usize,
    #[serde(default = "super::yes")]
    moe_renormalize: bool,
    #[serde(default = "one_f")]
    routed_scaling_factor: f32,
    moe_router_activation_func: Option<String>,
    #[serde(default = "super::one")]
    num_expert_group: usize,
    #[serde(default = "super::one")]
    topk_group: usize,
    #[serde(default)]
    first_k_dense_replace: usize,
    #[serde(default = "super::one")]
    moe_layer_freq: usize,
    model_max_length: Option<usize>,
    activation_situ_beta: Option<f32>,
    activation_situ_linear_beta: Option<f32>,
    attn_res_block_size: Option<usize>,
    routed_expert_hidden_size: Option<usize>,
    #[serde(default)]
    latent_moe_use_norm: bool,
}

fn one_f() -> f32 {
    1.0
}
fn four() -> usize {
    4
}

/// `max_position_embeddings` falls back to `model_max_length`, then this.
const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-6,
    max_position_embeddings: 131_072,
};

/// Parses `kimi_linear`, or `kimi_k3` (the wrapper whose `text_config` is a kimi_linear config).
pub(crate) fn parse(model_type: &str, json: &Value) -> Result<ModelConfig> {
    let (text, names) = if model_type == "kimi_k3" {
        let text = json
            .get("text_config")
            .filter(|t| t.is_object())
            .ok_or_else(|| Error::config("text_config", "missing (kimi_k3 needs it)"))?;
        let names = TensorNames {
            model_prefix: "language_model.model.".into(),
            lm_head: "language_model.lm_head.weight".into(),
        };
        (text, names)
    } else {
        (
            json,
            TensorNames {
                model_prefix: "model.".into(),
                lm_head: "lm_head.weight".into(),
            },
        )
    };
    let t = Trunk::parse(text)?;
    let c: KimiLinearConfig = config::parse(text)?;
    let layers = t.num_hidden_layers;

    let (linear_attention, layer_attention) = match &c.linear_attn_config {
        Some(l) => {
            if l.short_conv_kernel_size == 0 {
                return Err(Error::config(
                    "linear_attn_config.short_conv_kernel_size",
                    "must be positive",
                ));
            }
            let kda = KdaConfig {
                num_heads: l.num_heads,
                head_dim: l.head_dim,
                conv_kernel: l.short_conv_kernel_size,
                gate: l
                    .gate_lower_bound
                    .map_or(KdaGate::Softplus, KdaGate::LowerBound),
                full_rank_output_gate: l.use_full_rank_gate,
                norm_eps: t.rms_norm_eps(DEFAULTS),
            };
            let kinds = (0..layers)
                .map(|i| {
                    if l.kda_layers.contains(&(i + 1)) {
                        LayerAttention::Linear
                    } else {
                        LayerAttention::Full
                    }
                })
                .collect();
            (Some(kda), kinds)
        }
        None => (None, vec![LayerAttention::Full; layers]),
    };

    let base = mla(text)?;
    let rope = if c.mla_use_nope {
        None
    } else {
        Some(RopeParams::from_config(text, 10_000.0)?.build(base.qk_rope_head_dim, false)?)
    };
    let attention = AttentionConfig::Mla(MlaConfig {
        rope,
        output_gate: c.mla_use_output_gate,
        ..base
    });

    if let Some(f) = c
        .moe_router_activation_func
        .as_deref()
        .filter(|f| *f != "sigmoid")
    {
        return Err(Error::config(
            "moe_router_activation_func",
            format!("{f:?} is not supported (sigmoid)"),
        ));
    }
    let n_experts = c.num_experts;
    if n_experts > 0 {
        if c.num_expert_group == 0 || !n_experts.is_multiple_of(c.num_expert_group) {
            return Err(Error::config(
                "num_expert_group",
                format!(
                    "num_experts {n_experts} cannot form {} groups",
                    c.num_expert_group
                ),
            ));
        }
        check_top_k(
            "num_experts_per_token",
            c.num_experts_per_token,
            "num_experts",
            n_experts,
        )?;
    }
    let freq = c.moe_layer_freq.max(1);
    let ffn = t.ffn(c.intermediate_size, |i| {
        n_experts > 0 && i >= c.first_k_dense_replace && i % freq == 0
    });
    let moe = (n_experts > 0).then(|| MoeConfig {
        num_experts: n_experts,
        top_k: c.num_experts_per_token,
        moe_intermediate_size: c.moe_intermediate_size,
        shared: (c.num_shared_experts > 0)
            .then(|| SharedExpertConfig::ungated(c.num_shared_experts * c.moe_intermediate_size)),
        latent: c.routed_expert_hidden_size.map(|size| LatentConfig {
            size,
            norm: c.latent_moe_use_norm,
        }),
        router: RouterConfig::Grouped {
            scoring: Scoring::Sigmoid,
            group_score: GroupScore::TopTwoSum,
            n_group: c.num_expert_group,
            topk_group: c.topk_group,
            // Kimi renormalises only when more than one expert is chosen.
            norm_topk_prob: c.moe_renormalize && c.num_experts_per_token > 1,
            routed_scaling_factor: c.routed_scaling_factor,
        },
        names: waste_family::kimi_linear::FAMILY.moe.into(),
    });

    let activation = match text
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or("silu")
    {
        "situ" => Activation::Situ {
            beta: c.activation_situ_beta.unwrap_or(1.0),
            linear_beta: c.activation_situ_linear_beta,
        },
        _ => config::activation(text)?,
    };
    let max_position_embeddings = match t.max_position_embeddings() {
        Some(n) => n,
        None => c
            .model_max_length
            .unwrap_or(DEFAULTS.max_position_embeddings),
    };
    let eos_token_ids = match config::eos_ids(text) {
        ids if ids.is_empty() => config::eos_ids(json),
        ids => ids,
    };
    Ok(ModelConfig {
        max_position_embeddings,
        linear_attention,
        layer_attention,
        residual: match c.attn_res_block_size.filter(|&b| b > 0) {
            Some(block_size) => ResidualKind::AttnRes(AttnResConfig { block_size }),
            None => ResidualKind::Sum,
        },
        eos_token_ids,
        bos_token_id: config::bos_id(text).or_else(|| config::bos_id(json)),
        names,
        ..t.model(model_type, DEFAULTS, attention, ffn, moe, activation, text)
    })
}
