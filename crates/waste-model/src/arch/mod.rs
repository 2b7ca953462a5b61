//! The forward side of each model family: `arch/<family>/` parses its
//! Hugging Face `config.json` (HF spelling) into the shared [`ModelConfig`],
//! choosing its layers, router and residual strategy; the layers then build
//! every family the same way. What the rest of the workspace knows about a
//! family (names, GGUF form, synthetic shapes) is its folder in
//! `waste-family`, whose registry picks the parser here.

pub mod deepseek_v3;
pub mod kimi_linear;
pub mod llama;
pub mod mixtral;
pub mod qwen2_moe;
pub mod qwen3_moe;

use serde_json::Value;

use crate::config::ModelConfig;
use crate::{Error, Result};

/// `model_type` values waste runs.
pub const SUPPORTED: &str =
    "deepseek_v3, kimi_k2, kimi_linear, kimi_k3, qwen2_moe, qwen3_moe, mixtral, llama, mistral";

/// A family's config parser: `model_type` as config.json spells it, and the json.
type Parse = fn(&str, &Value) -> Result<ModelConfig>;

/// Each family's parser, by its `waste-family` name: one line per family.
const PARSERS: &[(&str, Parse)] = &[
    ("llama", llama::parse),
    ("mixtral", mixtral::parse),
    ("qwen2_moe", qwen2_moe::parse),
    ("qwen3_moe", qwen3_moe::parse),
    ("deepseek_v3", deepseek_v3::parse),
    ("kimi_linear", kimi_linear::parse),
];

pub(crate) fn parse_config(model_type: &str, json: &Value) -> Result<ModelConfig> {
    let parse = waste_family::by_model_type(model_type)
        .and_then(|f| PARSERS.iter().find(|(name, _)| *name == f.name));
    match parse {
        Some((_, parse)) => parse(model_type, json),
        None => Err(Error::UnsupportedArchitecture {
            file: crate::error::CONFIG_JSON.into(),
            model_type: model_type.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_one_parser_and_is_listed() {
        let mut listed: Vec<&str> = SUPPORTED.split(", ").collect();
        let mut types = Vec::new();
        for f in waste_family::FAMILIES {
            let n = PARSERS.iter().filter(|(name, _)| *name == f.name).count();
            assert_eq!(n, 1, "{}", f.name);
            types.extend_from_slice(f.model_types);
        }
        assert_eq!(PARSERS.len(), waste_family::FAMILIES.len());
        listed.sort_unstable();
        types.sort_unstable();
        assert_eq!(listed, types);
    }
}
