//! Mixtral: GQA attention with an optional sliding window and a softmax top-2
//! router over SwiGLU experts named `block_sparse_moe.experts.{e}.w1/w3/w2`.
//! See transformers' `modeling_mixtral.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::Result;
use crate::arch::{check_heads, check_top_k, head_dim};
use crate::config::{
    self, AttentionConfig, FfnKind, GqaConfig, LayerAttention, ModelConfig, MoeConfig,
    ResidualKind, RouterConfig, TensorNames,
};
use crate::ops::rope::RopeParams;

/// config.json keys of a Mixtral checkpoint.
#[derive(Debug, Deserialize)]
struct MixtralConfig {
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
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    sliding_window: Option<usize>,
    num_local_experts: usize,
    num_experts_per_tok: usize,
}

fn default_eps() -> f32 {
    1e-5
}

fn default_max_pos() -> usize {
    4096 * 32
}

pub(crate) fn parse(_model_type: &str, json: &Value) -> Result<ModelConfig> {
    let c: MixtralConfig = config::parse(json)?;
    let kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
    check_heads(c.num_attention_heads, kv_heads)?;
    check_top_k(
        "num_experts_per_tok",
        c.num_experts_per_tok,
        "num_local_experts",
        c.num_local_experts,
    )?;
    let hd = head_dim(c.head_dim, c.hidden_size, c.num_attention_heads)?;
    let rope = RopeParams::from_config(json, 1e6)?.build(hd, false)?;
    Ok(ModelConfig {
        model_type: "mixtral".into(),
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
            qk_norm: false,
            qkv_bias: false,
            o_bias: false,
            window_layers: None,
            sliding_window: c.sliding_window.filter(|&w| w > 0),
            rope,
            softmax_scale: (hd as f32).powf(-0.5),
        }),
        linear_attention: None,
        layer_attention: vec![LayerAttention::Full; c.num_hidden_layers],
        residual: ResidualKind::Sum,
        ffn: vec![FfnKind::Moe; c.num_hidden_layers],
        moe: Some(MoeConfig {
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
