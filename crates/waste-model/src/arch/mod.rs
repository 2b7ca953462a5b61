//! The supported model families. Each file parses its family's Hugging Face
//! `config.json` (HF spelling) into the shared [`ModelConfig`]; the layers
//! then build every family the same way.

pub mod deepseek_v3;
pub mod kimi_linear;
pub mod llama;
pub mod mixtral;
pub mod qwen3_moe;

use serde_json::Value;

use crate::config::ModelConfig;
use crate::{Error, Result};

/// `model_type` values waste runs.
pub const SUPPORTED: &str =
    "deepseek_v3, kimi_k2, kimi_linear, kimi_k3, qwen3_moe, mixtral, llama, mistral";

pub(crate) fn parse_config(model_type: &str, json: &Value) -> Result<ModelConfig> {
    match model_type {
        "deepseek_v3" | "kimi_k2" => deepseek_v3::parse(model_type, json),
        "kimi_linear" | "kimi_k3" => kimi_linear::parse(model_type, json),
        "qwen3_moe" => qwen3_moe::parse(json),
        "mixtral" => mixtral::parse(json),
        "llama" | "mistral" => llama::parse(model_type, json),
        other => Err(Error::UnsupportedArchitecture {
            model_type: other.to_string(),
            supported: SUPPORTED,
        }),
    }
}

/// `head_dim` when the config gives it (and it is not null), else hidden / heads.
pub(crate) fn head_dim(explicit: Option<usize>, hidden: usize, heads: usize) -> Result<usize> {
    if heads == 0 || (explicit.is_none() && !hidden.is_multiple_of(heads)) {
        return Err(Error::Config(format!(
            "cannot derive head_dim from hidden_size {hidden} and num_attention_heads {heads}"
        )));
    }
    Ok(explicit.unwrap_or(hidden / heads))
}

/// Checks the relations between head counts that every GQA family needs.
pub(crate) fn check_heads(heads: usize, kv_heads: usize) -> Result<()> {
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(Error::Config(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )));
    }
    Ok(())
}
