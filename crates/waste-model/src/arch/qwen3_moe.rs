//! Qwen3-MoE: GQA with per-head q/k RMSNorm before rotary, softmax top-k
//! routing with optional renormalisation, MoE on layers chosen by
//! `decoder_sparse_step` / `mlp_only_layers`. See transformers'
//! `modeling_qwen3_moe.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::arch::{check_heads, check_top_k, head_dim};
use crate::config::{
    self, AttentionConfig, FfnKind, GqaConfig, LayerAttention, ModelConfig, MoeConfig,
    ResidualKind, RouterConfig, TensorNames,
};
use crate::ops::rope::RopeParams;
use crate::{Error, Result};

/// config.json keys of a Qwen3-MoE checkpoint. Releases write `num_experts`,
/// transformers 5 writes `num_local_experts`.
#[derive(Debug, Deserialize)]
struct Qwen3MoeConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f32,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default)]
    use_sliding_window: bool,
    sliding_window: Option<usize>,
    num_experts: Option<usize>,
    num_local_experts: Option<usize>,
    num_experts_per_tok: usize,
    moe_intermediate_size: usize,
    #[serde(default)]
    norm_topk_prob: bool,
    #[serde(default = "one")]
    decoder_sparse_step: usize,
    #[serde(default)]
    mlp_only_layers: Vec<usize>,
}

fn default_eps() -> f32 {
    1e-6
}

fn default_max_pos() -> usize {
    32_768
}

fn one() -> usize {
    1
}

pub(crate) fn parse(_model_type: &str, json: &Value) -> Result<ModelConfig> {
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
    let kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
    check_heads(c.num_attention_heads, kv_heads)?;
    let hd = head_dim(c.head_dim, c.hidden_size, c.num_attention_heads)?;
    let rope = RopeParams::from_config(json, 10_000.0)?.build(hd, false)?;
    let step = c.decoder_sparse_step.max(1);
    let ffn = (0..c.num_hidden_layers)
        .map(|i| {
            if num_experts > 0 && !c.mlp_only_layers.contains(&i) && (i + 1) % step == 0 {
                FfnKind::Moe
            } else {
                FfnKind::Dense {
                    intermediate_size: c.intermediate_size,
                }
            }
        })
        .collect();
    Ok(ModelConfig {
        model_type: "qwen3_moe".into(),
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        rms_norm_eps: c.rms_norm_eps,
        tie_word_embeddings: c.tie_word_embeddings,
        max_position_embeddings: c.max_position_embeddings,
        attention: AttentionConfig::Gqa(GqaConfig {
            num_heads: c.num_attention_heads,
            num_kv_heads: kv_heads,
            head_dim: hd,
            qk_norm: true,
            qkv_bias: c.attention_bias,
            o_bias: c.attention_bias,
            // Like Qwen2, the window only applies when use_sliding_window is set.
            window_layers: None,
            sliding_window: if c.use_sliding_window {
                c.sliding_window.filter(|&w| w > 0)
            } else {
                None
            },
            rope,
            softmax_scale: (hd as f32).powf(-0.5),
        }),
        linear_attention: None,
        layer_attention: vec![LayerAttention::Full; c.num_hidden_layers],
        residual: ResidualKind::Sum,
        ffn,
        moe: Some(MoeConfig {
            num_experts,
            top_k: c.num_experts_per_tok,
            moe_intermediate_size: c.moe_intermediate_size,
            shared: None,
            latent: None,
            router: RouterConfig::Softmax {
                norm_topk_prob: c.norm_topk_prob,
            },
            names: waste_family::qwen3_moe::FAMILY.moe.into(),
        }),
        activation: config::activation(json)?,
        eos_token_ids: config::eos_ids(json),
        bos_token_id: config::bos_id(json),
        names: TensorNames {
            model_prefix: "model.".into(),
            lm_head: "lm_head.weight".into(),
        },
    })
}
