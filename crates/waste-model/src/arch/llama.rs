//! Dense Llama-family decoders (`llama`, `mistral`): GQA, SwiGLU MLP, RMSNorm.
//! SmolLM2, the demo model, is one. See transformers' `modeling_llama.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::Result;
use crate::arch::{Trunk, TrunkDefaults, gqa};
use crate::config::{self, AttentionConfig, GqaConfig, ModelConfig};

/// config.json keys of a Llama checkpoint beyond the [`Trunk`] and the heads.
#[derive(Debug, Deserialize)]
struct LlamaConfig {
    intermediate_size: usize,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    sliding_window: Option<usize>,
}

const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-6,
    max_position_embeddings: 2048,
};

pub(crate) fn parse(model_type: &str, json: &Value) -> Result<ModelConfig> {
    let t = Trunk::parse(json)?;
    let c: LlamaConfig = config::parse(json)?;
    if c.mlp_bias {
        return Err(crate::Error::config("mlp_bias", "true is not supported"));
    }
    let attention = GqaConfig {
        qkv_bias: c.attention_bias,
        o_bias: c.attention_bias,
        sliding_window: c.sliding_window,
        ..gqa(json, t.hidden_size, 10_000.0)?
    };
    Ok(t.model(
        model_type,
        DEFAULTS,
        AttentionConfig::Gqa(attention),
        t.ffn(c.intermediate_size, |_| false),
        None,
        config::activation(json)?,
        json,
    ))
}
