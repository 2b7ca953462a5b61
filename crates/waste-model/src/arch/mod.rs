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
            file: crate::error::CONFIG_JSON.into(),
            model_type: other.to_string(),
            supported: SUPPORTED,
        }),
    }
}

/// `head_dim` when the config gives it (and it is not null), else hidden /
/// heads; rotary needs it even.
pub(crate) fn head_dim(explicit: Option<usize>, hidden: usize, heads: usize) -> Result<usize> {
    if heads == 0 || (explicit.is_none() && !hidden.is_multiple_of(heads)) {
        return Err(Error::config(
            "head_dim",
            format!(
                "absent, and hidden_size {hidden} does not split into num_attention_heads {heads}"
            ),
        ));
    }
    let hd = explicit.unwrap_or(hidden / heads);
    crate::limits::check_range("head_dim", hd, 1, crate::limits::MAX_HEAD_DIM)?;
    if !hd.is_multiple_of(2) {
        return Err(Error::config(
            "head_dim",
            format!("{hd} is odd; rotary embeddings need an even head width"),
        ));
    }
    Ok(hd)
}

/// Checks the relations between head counts that every GQA family needs.
pub(crate) fn check_heads(heads: usize, kv_heads: usize) -> Result<()> {
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(Error::config(
            "num_key_value_heads",
            format!("{kv_heads} does not divide num_attention_heads {heads}"),
        ));
    }
    Ok(())
}

/// A router picks `1 ..= experts` experts per token (`top_k_key` and
/// `experts_key` are the family's spellings).
pub(crate) fn check_top_k(
    top_k_key: &str,
    top_k: usize,
    experts_key: &str,
    experts: usize,
) -> Result<()> {
    if top_k == 0 || top_k > experts {
        return Err(Error::config(
            top_k_key,
            format!("{top_k} experts per token, but {experts_key} is {experts}"),
        ));
    }
    Ok(())
}
