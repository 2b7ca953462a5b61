//! Dense Llama-family decoders (`llama`, `mistral`): GQA, SwiGLU MLP, RMSNorm.
//! SmolLM2, the demo model, is one. See transformers' `modeling_llama.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::Result;
use crate::arch::{check_heads, head_dim};
use crate::config::{
    self, AttentionConfig, FfnKind, GqaConfig, LayerAttention, ModelConfig, ResidualKind,
    TensorNames,
};
use crate::ops::rope::RopeParams;

/// config.json keys of a Llama checkpoint.
#[derive(Debug, Deserialize)]
struct LlamaConfig {
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
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    sliding_window: Option<usize>,
}

fn default_eps() -> f32 {
    1e-6
}

fn default_max_pos() -> usize {
    2048
}

pub(crate) fn parse(model_type: &str, json: &Value) -> Result<ModelConfig> {
    let c: LlamaConfig = config::parse(json)?;
    if c.mlp_bias {
        return Err(crate::Error::config("mlp_bias", "true is not supported"));
    }
    let kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
    check_heads(c.num_attention_heads, kv_heads)?;
    let hd = head_dim(c.head_dim, c.hidden_size, c.num_attention_heads)?;
    let rope = RopeParams::from_config(json, 10_000.0)?.build(hd, false)?;
    Ok(ModelConfig {
        model_type: model_type.to_string(),
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
            qkv_bias: c.attention_bias,
            o_bias: c.attention_bias,
            window_layers: None,
            sliding_window: c.sliding_window,
            rope,
            softmax_scale: (hd as f32).powf(-0.5),
        }),
        linear_attention: None,
        layer_attention: vec![LayerAttention::Full; c.num_hidden_layers],
        residual: ResidualKind::Sum,
        ffn: vec![
            FfnKind::Dense {
                intermediate_size: c.intermediate_size
            };
            c.num_hidden_layers
        ],
        moe: None,
        activation: config::activation(json)?,
        eos_token_ids: config::eos_ids(json),
        bos_token_id: config::bos_id(json),
        names: TensorNames {
            model_prefix: "model.".into(),
            lm_head: "lm_head.weight".into(),
        },
    })
}
