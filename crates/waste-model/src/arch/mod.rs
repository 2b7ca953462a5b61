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

use serde::Deserialize;
use serde_json::Value;
use waste_kernels::Activation;

use crate::config::{
    self, AttentionConfig, FfnKind, GqaConfig, LayerAttention, MlaConfig, ModelConfig, MoeConfig,
    ResidualKind, TensorNames,
};
use crate::ops::rope::RopeParams;
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

/// The config.json keys every family reads alike; each family's own keys
/// are a struct of its own, parsed from the same json.
#[derive(Debug, Deserialize)]
pub(crate) struct Trunk {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    rms_norm_eps: Option<f32>,
    #[serde(default)]
    tie_word_embeddings: bool,
    max_position_embeddings: Option<usize>,
}

/// A family's values for the [`Trunk`] keys a config may leave out
/// (its transformers config class's defaults).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrunkDefaults {
    pub rms_norm_eps: f32,
    pub max_position_embeddings: usize,
}

impl Trunk {
    pub(crate) fn parse(json: &Value) -> Result<Self> {
        config::parse(json)
    }

    pub(crate) fn rms_norm_eps(&self, d: TrunkDefaults) -> f32 {
        self.rms_norm_eps.unwrap_or(d.rms_norm_eps)
    }

    /// `max_position_embeddings` as config.json gives it.
    pub(crate) fn max_position_embeddings(&self) -> Option<usize> {
        self.max_position_embeddings
    }

    /// The model of a family whose layers all use `attention` and sum into
    /// the residual stream, tensors under `model.`, with its special
    /// tokens from `json`; a family that differs overrides the fields by
    /// struct update.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn model(
        &self,
        model_type: &str,
        d: TrunkDefaults,
        attention: AttentionConfig,
        ffn: Vec<FfnKind>,
        moe: Option<MoeConfig>,
        activation: Activation,
        json: &Value,
    ) -> ModelConfig {
        ModelConfig {
            model_type: model_type.to_string(),
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            rms_norm_eps: self.rms_norm_eps(d),
            tie_word_embeddings: self.tie_word_embeddings,
            max_position_embeddings: self
                .max_position_embeddings
                .unwrap_or(d.max_position_embeddings),
            attention,
            linear_attention: None,
            layer_attention: vec![LayerAttention::Full; self.num_hidden_layers],
            residual: ResidualKind::Sum,
            ffn,
            moe,
            activation,
            eos_token_ids: config::eos_ids(json),
            bos_token_id: config::bos_id(json),
            names: TensorNames {
                model_prefix: "model.".into(),
                lm_head: "lm_head.weight".into(),
            },
        }
    }

    /// One FFN per layer: the MoE where `moe(layer)`, else a dense MLP
    /// of `intermediate_size`.
    pub(crate) fn ffn(
        &self,
        intermediate_size: usize,
        moe: impl Fn(usize) -> bool,
    ) -> Vec<FfnKind> {
        (0..self.num_hidden_layers)
            .map(|i| {
                if moe(i) {
                    FfnKind::Moe
                } else {
                    FfnKind::Dense { intermediate_size }
                }
            })
            .collect()
    }
}

/// serde's default of the counts that default to one.
fn one() -> usize {
    1
}

/// serde's default of the flags that default to set.
fn yes() -> bool {
    true
}

/// The head keys of a GQA family.
#[derive(Debug, Deserialize)]
struct GqaKeys {
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
}

/// The GQA attention `json` describes, rotary's base defaulting to
/// `rope_theta`: checked head counts, no q/k norm, no biases, no window;
/// a family sets what differs by struct update.
pub(crate) fn gqa(json: &Value, hidden_size: usize, rope_theta: f64) -> Result<GqaConfig> {
    let k: GqaKeys = config::parse(json)?;
    let kv_heads = k.num_key_value_heads.unwrap_or(k.num_attention_heads);
    check_heads(k.num_attention_heads, kv_heads)?;
    let hd = head_dim(k.head_dim, hidden_size, k.num_attention_heads)?;
    Ok(GqaConfig {
        num_heads: k.num_attention_heads,
        num_kv_heads: kv_heads,
        head_dim: hd,
        qk_norm: false,
        qkv_bias: false,
        o_bias: false,
        sliding_window: None,
        window_layers: None,
        rope: RopeParams::from_config(json, rope_theta)?.build(hd, false)?,
        softmax_scale: (hd as f32).powf(-0.5),
    })
}

/// The head keys of an MLA family.
#[derive(Debug, Deserialize)]
struct MlaKeys {
    num_attention_heads: usize,
    q_lora_rank: Option<usize>,
    kv_lora_rank: usize,
    qk_nope_head_dim: usize,
    qk_rope_head_dim: usize,
    v_head_dim: usize,
}

/// The MLA attention `json` describes, the latent norms at transformers'
/// default eps, no rotary, no output gate, softmax scale 1/√(q·k head
/// width); a family sets what differs by struct update.
pub(crate) fn mla(json: &Value) -> Result<MlaConfig> {
    let k: MlaKeys = config::parse(json)?;
    let qk_head_dim = k.qk_nope_head_dim + k.qk_rope_head_dim;
    Ok(MlaConfig {
        num_heads: k.num_attention_heads,
        q_lora_rank: k.q_lora_rank,
        kv_lora_rank: k.kv_lora_rank,
        qk_nope_head_dim: k.qk_nope_head_dim,
        qk_rope_head_dim: k.qk_rope_head_dim,
        v_head_dim: k.v_head_dim,
        // transformers builds q_a_layernorm / kv_a_layernorm with the default eps.
        latent_norm_eps: 1e-6,
        rope: None,
        output_gate: false,
        softmax_scale: (qk_head_dim as f32).powf(-0.5),
    })
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
