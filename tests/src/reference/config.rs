//! The reference forward's view of `config.json`: the family, the shapes and
//! the rope settings, read the way transformers reads them (null = absent,
//! `rope_parameters` or `rope_theta` + `rope_scaling`). Owns no math beyond the
//! DeepSeek softmax scale.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::rope::{Rope, yarn_get_mscale};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arch {
    Llama,
    Mixtral,
    Qwen2Moe,
    Qwen3Moe,
    DeepseekV3,
}

/// MLA shapes of DeepSeek-V3 attention.
#[derive(Debug)]
pub(super) struct Mla {
    pub(super) q_lora_rank: Option<usize>,
    pub(super) kv_lora_rank: usize,
    pub(super) nope: usize,
    pub(super) rope: usize,
    pub(super) v: usize,
}

#[derive(Debug)]
pub(super) struct Config<'a> {
    pub(super) json: &'a Value,
    pub(super) arch: Arch,
    pub(super) hidden: usize,
    pub(super) layers: usize,
    pub(super) vocab: usize,
    pub(super) eps: f64,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    /// Per-head q/k dim of standard attention (unused by MLA).
    pub(super) head_dim: usize,
    /// Key j is visible from query i iff j <= i and i - j < window.
    pub(super) window: Option<usize>,
    /// Whether layer i has the window (Qwen2-MoE's `layer_types`); empty:
    /// every layer has it.
    pub(super) window_layers: Vec<bool>,
    pub(super) scale: f64,
    pub(super) rope: Rope,
    pub(super) mla: Option<Mla>,
    pub(super) tie_embeddings: bool,
}

/// `json[key]`, treating an explicit `null` like an absent key.
pub(super) fn field<'a>(json: &'a Value, key: &str) -> Option<&'a Value> {
    json.get(key).filter(|v| !v.is_null())
}

pub(super) fn opt_usize(json: &Value, key: &str) -> Result<Option<usize>> {
    field(json, key)
        .map(|v| {
            let n = v
                .as_u64()
                .with_context(|| format!("config: `{key}` is not an unsigned integer: {v}"))?;
            Ok(usize::try_from(n)?)
        })
        .transpose()
}

pub(super) fn req_usize(json: &Value, key: &str) -> Result<usize> {
    opt_usize(json, key)?.with_context(|| format!("config: `{key}` is missing"))
}

pub(super) fn opt_f64(json: &Value, key: &str) -> Result<Option<f64>> {
    field(json, key)
        .map(|v| {
            v.as_f64()
                .with_context(|| format!("config: `{key}` is not a number: {v}"))
        })
        .transpose()
}

pub(super) fn opt_bool(json: &Value, key: &str) -> Result<Option<bool>> {
    field(json, key)
        .map(|v| {
            v.as_bool()
                .with_context(|| format!("config: `{key}` is not a bool: {v}"))
        })
        .transpose()
}

impl<'a> Config<'a> {
    pub(super) fn parse(json: &'a Value) -> Result<Self> {
        let model_type = field(json, "model_type")
            .and_then(Value::as_str)
            .context("config: no `model_type`")?;
        let arch = match model_type {
            "llama" => Arch::Llama,
            "mixtral" => Arch::Mixtral,
            "qwen2_moe" => Arch::Qwen2Moe,
            "qwen3_moe" => Arch::Qwen3Moe,
            "deepseek_v3" | "kimi_k2" => Arch::DeepseekV3,
            other => bail!("config: unsupported model_type `{other}`"),
        };
        let hidden = req_usize(json, "hidden_size")?;
        let heads = req_usize(json, "num_attention_heads")?;
        let kv_heads = opt_usize(json, "num_key_value_heads")?.unwrap_or(heads);
        ensure!(
            heads.is_multiple_of(kv_heads),
            "config: {heads} heads not a multiple of {kv_heads} kv heads"
        );
        let head_dim = opt_usize(json, "head_dim")?.unwrap_or(hidden / heads);
        let window = match arch {
            Arch::Mixtral => opt_usize(json, "sliding_window")?,
            Arch::Qwen3Moe if opt_bool(json, "use_sliding_window")?.unwrap_or(false) => {
                opt_usize(json, "sliding_window")?
            }
            // transformers zeroes the window without use_sliding_window.
            Arch::Qwen2Moe if opt_bool(json, "use_sliding_window")?.unwrap_or(false) => {
                opt_usize(json, "sliding_window")?.filter(|&w| w > 0)
            }
            _ => None,
        };
        let layers = req_usize(json, "num_hidden_layers")?;
        // Qwen2-MoE windows the `sliding_attention` layers of `layer_types`;
        // without it, the even layers below `max_window_layers` (default 28).
        let window_layers = match (arch, field(json, "layer_types")) {
            (Arch::Qwen2Moe, Some(types)) => types
                .as_array()
                .context("config: `layer_types` is not a list")?
                .iter()
                .map(|t| t.as_str() == Some("sliding_attention"))
                .collect(),
            (Arch::Qwen2Moe, None) => {
                let max = opt_usize(json, "max_window_layers")?.unwrap_or(28);
                (0..layers).map(|i| (i + 1) % 2 == 1 && i < max).collect()
            }
            _ => Vec::new(),
        };
        let (rope_type, rope_params, theta) = rope_parameters(json)?;
        let mla = if arch == Arch::DeepseekV3 {
            Some(Mla {
                q_lora_rank: opt_usize(json, "q_lora_rank")?,
                kv_lora_rank: req_usize(json, "kv_lora_rank")?,
                nope: req_usize(json, "qk_nope_head_dim")?,
                rope: req_usize(json, "qk_rope_head_dim")?,
                v: req_usize(json, "v_head_dim")?,
            })
        } else {
            None
        };
        // Rope acts on qk_rope_head_dim for MLA (transformers sets config.head_dim to it).
        let rope_dim = mla.as_ref().map_or(head_dim, |m| m.rope);
        let interleaved =
            arch == Arch::DeepseekV3 && opt_bool(json, "rope_interleave")?.unwrap_or(true);
        let max_pos = opt_usize(json, "max_position_embeddings")?;
        let rope = Rope::new(
            &rope_type,
            rope_params,
            theta,
            rope_dim,
            max_pos,
            interleaved,
        )?;
        let scale = match &mla {
            // Quirk 3: qk_head_dim^-0.5 * m^2 whenever rope is scaled and mscale_all_dim != 0.
            Some(m) => {
                let mut scale = ((m.nope + m.rope) as f64).powf(-0.5);
                let mscale_all_dim = opt_f64(rope_params, "mscale_all_dim")?.unwrap_or(0.0);
                if rope_type != "default" && mscale_all_dim != 0.0 {
                    let factor = opt_f64(rope_params, "factor")?
                        .context("config: scaled rope without `factor`")?;
                    let m = yarn_get_mscale(factor, mscale_all_dim);
                    scale *= m * m;
                }
                scale
            }
            None => (head_dim as f64).powf(-0.5),
        };
        Ok(Self {
            json,
            arch,
            hidden,
            layers,
            vocab: req_usize(json, "vocab_size")?,
            eps: opt_f64(json, "rms_norm_eps")?.unwrap_or(1e-6),
            heads,
            kv_heads,
            head_dim,
            window,
            window_layers,
            scale,
            rope,
            mla,
            tie_embeddings: opt_bool(json, "tie_word_embeddings")?.unwrap_or(false),
        })
    }
}

pub(super) static EMPTY: Value = Value::Null;

/// (rope type, the object holding its parameters, theta) from either
/// transformers 5's `rope_parameters` or a release's `rope_theta` + `rope_scaling` (quirk 15).
pub(super) fn rope_parameters(json: &Value) -> Result<(String, &Value, f64)> {
    let params = field(json, "rope_parameters")
        .or_else(|| field(json, "rope_scaling"))
        .unwrap_or(&EMPTY);
    let theta = match opt_f64(params, "rope_theta")? {
        Some(theta) => theta,
        None => opt_f64(json, "rope_theta")?.unwrap_or(10000.0),
    };
    let rope_type = field(params, "rope_type")
        .or_else(|| field(params, "type"))
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    Ok((rope_type, params, theta))
}
