//! A Hugging Face `config.json` synthesised from GGUF metadata, in the
//! spelling `waste_model::ModelConfig::from_json` reads (see the fixtures'
//! config.json files): `general.architecture` picks the family, the
//! `{arch}.*` keys give the shape, `tokenizer.ggml.*` the special ids.
//! Anything the HF config cannot express (partial rotary, llama3 rope
//! frequency tensors, per-layer head counts that differ) is refused by name
//! rather than approximated.

use serde_json::{Value, json};

use super::file::GgufFile;
use super::meta::MetaValue;
use crate::error::{Error, Result};
use waste_family::{Family, Gguf, GgufConfig};

/// Architectures this reader maps, for error messages.
pub const SUPPORTED: &str =
    "llama (dense or Mixtral-style MoE), qwen2moe, qwen3moe, deepseek2 (DeepSeek-V3/R1, Kimi K2)";

/// The range of one `{arch}.*` count: (key suffix, the HF key it becomes,
/// min, max). Checked as it is read, before it sizes anything; the maxima
/// are `waste_model::limits`' (docs/FORMAT.md), which this crate may not
/// depend on (a waste-model test keeps the two tables equal).
pub const COUNT_LIMITS: &[(&str, &str, u64, u64)] = &[
    ("block_count", "num_hidden_layers", 1, 1024),
    ("embedding_length", "hidden_size", 1, 1 << 16),
    ("attention.head_count", "num_attention_heads", 1, 1024),
    ("attention.head_count_kv", "num_key_value_heads", 1, 1024),
    ("attention.key_length", "head_dim", 1, 4096),
    ("attention.value_length", "head_dim", 1, 4096),
    ("rope.dimension_count", "head_dim", 1, 4096),
    ("feed_forward_length", "intermediate_size", 1, 1 << 20),
    (
        "expert_feed_forward_length",
        "moe_intermediate_size",
        1,
        1 << 20,
    ),
    (
        "expert_shared_feed_forward_length",
        "shared_expert_intermediate_size",
        1,
        1 << 20,
    ),
    // 0 experts is a dense llama file.
    ("expert_count", "num_experts", 0, 4096),
    ("expert_used_count", "num_experts_per_tok", 1, 4096),
    ("context_length", "max_position_embeddings", 1, 1 << 24),
    (
        "rope.scaling.original_context_length",
        "max_position_embeddings",
        1,
        1 << 24,
    ),
];

/// Typed access to one architecture's `{arch}.*` keys.
pub(super) struct Meta<'a> {
    file: &'a GgufFile,
    pub(super) arch: &'a str,
}

impl Meta<'_> {
    pub(super) fn err(&self, key: &str, reason: impl Into<String>) -> Error {
        Error::GgufMetadata {
            path: self.file.path().to_path_buf(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(super) fn value(&self, suffix: &str) -> (String, Option<&MetaValue>) {
        let key = format!("{}.{suffix}", self.arch);
        let value = self.file.get(&key);
        (key, value)
    }

    /// A count that may be stored per layer (an array): all entries must agree.
    pub(super) fn opt_usize(&self, suffix: &str) -> Result<Option<usize>> {
        let (key, value) = self.value(suffix);
        let Some(value) = value else { return Ok(None) };
        let as_usize = |v: &MetaValue| v.as_u64().and_then(|v| usize::try_from(v).ok());
        let n = match value.as_array() {
            Some(items) => {
                let mut values = items.iter().map(as_usize);
                let first = values.next().flatten();
                if first.is_none() || values.any(|v| v != first) {
                    return Err(self.err(
                        &key,
                        "per-layer values differ; waste needs one value for every layer",
                    ));
                }
                first
            }
            None => as_usize(value),
        };
        let n =
            n.ok_or_else(|| self.err(&key, format!("{value} is not a non-negative integer")))?;
        if let Some(&(_, _, min, max)) = COUNT_LIMITS.iter().find(|l| l.0 == suffix)
            && !(min..=max).contains(&(n as u64))
        {
            return Err(self.err(&key, format!("{n} is outside {min}..={max}")));
        }
        Ok(Some(n))
    }

    pub(super) fn usize(&self, suffix: &str) -> Result<usize> {
        self.opt_usize(suffix)?
            .ok_or_else(|| self.err(&format!("{}.{suffix}", self.arch), "missing"))
    }

    pub(super) fn opt_f64(&self, suffix: &str) -> Result<Option<f64>> {
        let (key, value) = self.value(suffix);
        value
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| self.err(&key, format!("{v} is not a number")))
            })
            .transpose()
    }
}

/// The family of a GGUF file and how llama.cpp wrote it, or an error
/// naming its architecture.
pub fn family(file: &GgufFile) -> Result<(&'static Family, &'static Gguf)> {
    let arch = architecture(file)?;
    let unsupported = |reason: &str| Error::UnsupportedGguf {
        path: file.path().to_path_buf(),
        architecture: arch.to_string(),
        reason: format!("{reason} (supported: {SUPPORTED})"),
    };
    if matches!(arch, "qwen2" | "qwen3") {
        return Err(unsupported(
            "dense Qwen needs q/k/v biases without an o bias (qwen2) or q/k norms on a dense model (qwen3), which no waste config expresses yet",
        ));
    }
    // Only llama.cpp's `llama` arch holds dense and MoE models alike; the
    // others are read as the one family that names them.
    let experts = match arch {
        "llama" => {
            let meta = Meta { file, arch };
            matches!(meta.opt_usize("expert_count")?, Some(n) if n > 0)
        }
        _ => true,
    };
    waste_family::by_gguf_arch(arch, experts)
        .and_then(|f| Some((f, f.gguf.as_ref()?)))
        .ok_or_else(|| unsupported("architecture not mapped"))
}

fn architecture(file: &GgufFile) -> Result<&str> {
    file.get("general.architecture")
        .and_then(MetaValue::as_str)
        .ok_or_else(|| Error::GgufMetadata {
            path: file.path().to_path_buf(),
            key: "general.architecture".into(),
            reason: "missing or not a string".into(),
        })
}

/// The HF config.json of `file`, read as `family` (written as `gguf` says).
pub fn config_json(file: &GgufFile, family: &Family, gguf: &Gguf) -> Result<Value> {
    let arch = architecture(file)?;
    let m = Meta { file, arch };
    if gguf.config == GgufConfig::Deepseek2 {
        return super::deepseek2::config_json(file, &m);
    }
    let heads = m.usize("attention.head_count")?;
    let kv_heads = m.opt_usize("attention.head_count_kv")?.unwrap_or(heads);
    let hidden = m.usize("embedding_length")?;
    let head_dim = m.opt_usize("attention.key_length")?;
    if let (Some(k), Some(v)) = (head_dim, m.opt_usize("attention.value_length")?)
        && k != v
    {
        return Err(m.err(
            &format!("{arch}.attention.value_length"),
            format!("{v} differs from key_length {k}"),
        ));
    }
    let rotated = head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0));
    if let Some(dims) = m.opt_usize("rope.dimension_count")?
        && dims != rotated
    {
        return Err(m.err(
            &format!("{arch}.rope.dimension_count"),
            format!("partial rotary ({dims} of {rotated} head dims) is not supported"),
        ));
    }
    if file.tensor("rope_freqs.weight").is_some() {
        return Err(m.err(
            "rope_freqs.weight",
            "llama3-style rope frequency factors are not supported yet",
        ));
    }
    let embed = file
        .tensor("token_embd.weight")
        .ok_or_else(|| Error::MissingTensor {
            name: format!("token_embd.weight (in {})", file.path().display()),
        })?;
    let vocab = embed.shape().first().copied().unwrap_or(0);
    let (bos, eos) = special_ids(file);
    let mut c = json!({
        "architectures": [family.hf_architecture],
        "model_type": family.model_types[0],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": m.usize("block_count")?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": m.opt_f64("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| m.err(&format!("{arch}.attention.layer_norm_rms_epsilon"), "missing"))?,
        "rope_theta": m.opt_f64("rope.freq_base")?.unwrap_or(10_000.0),
        "max_position_embeddings": m.opt_usize("context_length")?.unwrap_or(4096),
        "tie_word_embeddings": file.tensor("output.weight").is_none(),
        "hidden_act": "silu",
        "sliding_window": null,
        "bos_token_id": bos,
        "eos_token_id": eos,
    });
    if let Some(scaling) = rope_scaling(&m)? {
        c["rope_scaling"] = scaling;
    }
    if gguf.config == GgufConfig::GatedSharedExpert {
        c["qkv_bias"] = json!(qkv_bias(file, &m)?);
    } else {
        c["attention_bias"] = json!(attention_bias(file, &m)?);
    }
    let ffn = m.opt_usize("feed_forward_length")?;
    match gguf.config {
        GgufConfig::Dense => {
            c["intermediate_size"] =
                json!(ffn.ok_or_else(|| m.err("llama.feed_forward_length", "missing"))?);
        }
        GgufConfig::LocalExperts => {
            c["num_local_experts"] = json!(m.usize("expert_count")?);
            c["num_experts_per_tok"] = json!(m.usize("expert_used_count")?);
            let width = m.opt_usize("expert_feed_forward_length")?.or(ffn);
            c["intermediate_size"] =
                json!(width.ok_or_else(|| m.err("llama.feed_forward_length", "missing"))?);
        }
        GgufConfig::Deepseek2 => unreachable!("deepseek2 returned above"),
        GgufConfig::Experts => {
            let moe = m.usize("expert_feed_forward_length")?;
            c["num_experts"] = json!(m.usize("expert_count")?);
            c["num_experts_per_tok"] = json!(m.usize("expert_used_count")?);
            c["moe_intermediate_size"] = json!(moe);
            c["intermediate_size"] = json!(ffn.unwrap_or(moe));
            // llama.cpp always renormalises qwen3moe's top-k weights unless
            // a newer converter says otherwise.
            let norm = m
                .value("expert_weights_norm")
                .1
                .and_then(MetaValue::as_bool);
            c["norm_topk_prob"] = json!(norm.unwrap_or(true));
            c["decoder_sparse_step"] = json!(1);
            c["mlp_only_layers"] = json!([]);
        }
        GgufConfig::GatedSharedExpert => {
            // llama.cpp's qwen2moe: every layer routes, the expert width
            // defaults to feed_forward_length / expert_used_count and the
            // shared one to feed_forward_length, and the top-k weights are
            // never renormalised, whatever the file says.
            let ffn = ffn.ok_or_else(|| m.err("qwen2moe.feed_forward_length", "missing"))?;
            let used = m.usize("expert_used_count")?;
            let moe = m.opt_usize("expert_feed_forward_length")?;
            c["num_experts"] = json!(m.usize("expert_count")?);
            c["num_experts_per_tok"] = json!(used);
            c["intermediate_size"] = json!(ffn);
            c["moe_intermediate_size"] = json!(moe.unwrap_or(ffn / used));
            let shared = m.opt_usize("expert_shared_feed_forward_length")?;
            c["shared_expert_intermediate_size"] = json!(shared.unwrap_or(ffn));
            c["norm_topk_prob"] = json!(false);
            c["decoder_sparse_step"] = json!(1);
            c["mlp_only_layers"] = json!([]);
            c["use_sliding_window"] = json!(false);
        }
    }
    Ok(c)
}

/// Qwen2-MoE's `qkv_bias`: q/k/v biases, never an o bias.
fn qkv_bias(file: &GgufFile, m: &Meta<'_>) -> Result<bool> {
    if file.tensor("blk.0.attn_output.bias").is_some() {
        return Err(m.err(
            "blk.0.attn_output.bias",
            "an o bias is not part of this architecture",
        ));
    }
    Ok(file.tensor("blk.0.attn_q.bias").is_some())
}

/// HF's `attention_bias` puts a bias on q, k, v and o alike; a file with q
/// biases but no o bias (Qwen2 style) cannot be expressed.
fn attention_bias(file: &GgufFile, m: &Meta<'_>) -> Result<bool> {
    let q = file.tensor("blk.0.attn_q.bias").is_some();
    let o = file.tensor("blk.0.attn_output.bias").is_some();
    if q != o {
        return Err(m.err(
            "blk.0.attn_q.bias",
            "q/k/v biases without an o bias (or the reverse) are not supported",
        ));
    }
    Ok(q)
}

/// `{arch}.rope.scaling.*` as HF `rope_scaling`.
fn rope_scaling(m: &Meta<'_>) -> Result<Option<Value>> {
    let (key, ty) = m.value("rope.scaling.type");
    let ty = match ty {
        None => return Ok(None),
        Some(v) => v
            .as_str()
            .ok_or_else(|| m.err(&key, format!("{v} is not a string")))?,
    };
    let factor = || {
        m.opt_f64("rope.scaling.factor")?
            .ok_or_else(|| m.err(&format!("{}.rope.scaling.factor", m.arch), "missing"))
    };
    Ok(match ty {
        "none" => None,
        "linear" => Some(json!({"rope_type": "linear", "factor": factor()?})),
        "yarn" => {
            let orig = m.usize("rope.scaling.original_context_length")?;
            Some(
                json!({"rope_type": "yarn", "factor": factor()?, "original_max_position_embeddings": orig}),
            )
        }
        other => return Err(m.err(&key, format!("rope scaling {other:?} is not supported"))),
    })
}

/// BOS id, and the ids that end generation: EOS plus llama.cpp's other
/// end-of-generation tokens (end of turn, end of message) when present.
pub(super) fn special_ids(file: &GgufFile) -> (Option<u64>, Value) {
    let id = |key: &str| file.get(key).and_then(MetaValue::as_u64);
    let mut eos: Vec<u64> = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if let Some(v) = id(key).filter(|v| !eos.contains(v)) {
            eos.push(v);
        }
    }
    let eos = match eos.as_slice() {
        [] => Value::Null,
        [one] => json!(one),
        many => json!(many),
    };
    (id("tokenizer.ggml.bos_token_id"), eos)
}
