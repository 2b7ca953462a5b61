//! llama.cpp's `deepseek2` architecture (every DeepSeek-V2/V3/R1 and Kimi K2
//! GGUF) read as Hugging Face `deepseek_v3`: the config.json synthesised
//! from the `deepseek2.*` metadata, and MLA's `kv_b_proj` re-assembled from
//! the `attn_k_b` / `attn_v_b` pair that newer converters store instead of
//! `attn_kv_b`. The other tensor names are in `names`.
//!
//! The converter (convert_hf_to_gguf.py, `DeepseekV2Model`) stores MLA as MQA
//! over the latent: `head_count_kv` 1, `key_length` kv_lora_rank +
//! qk_rope_head_dim, `value_length` kv_lora_rank, and the per-head sizes in
//! `key_length_mla` / `value_length_mla` (older files: in key_length /
//! value_length). It permutes no rows: deepseek2 ropes adjacent pairs, which
//! is DeepSeek's interleaved rope (`rope_interleave`).

use serde_json::{Value, json};

use super::config::{Meta, special_ids};
use super::file::{GgufFile, GgufTensorInfo};
use super::meta::MetaValue;
use crate::error::{Error, Result};

/// `expert_gating_func` values (llama.cpp `llama_expert_gating_func_type`).
const GATING_SOFTMAX: u64 = 1;
const GATING_SIGMOID: u64 = 2;

/// The HF `deepseek_v3` config.json of a `deepseek2` file.
pub(super) fn config_json(file: &GgufFile, m: &Meta<'_>) -> Result<Value> {
    let key = |suffix: &str| format!("{}.{suffix}", m.arch);
    let heads = m.usize("attention.head_count")?;
    let rope_dim = m.usize("rope.dimension_count")?;
    let (k_len, v_len) = match (
        m.opt_usize("attention.key_length_mla")?,
        m.opt_usize("attention.value_length_mla")?,
    ) {
        (Some(k), Some(v)) => (k, v),
        _ => (
            m.usize("attention.key_length")?,
            m.usize("attention.value_length")?,
        ),
    };
    let nope = k_len.checked_sub(rope_dim).ok_or_else(|| {
        m.err(
            &key("attention.key_length_mla"),
            format!("per-head key size {k_len} is smaller than rope.dimension_count {rope_dim}"),
        )
    })?;
    let embed = file
        .tensor("token_embd.weight")
        .ok_or_else(|| Error::MissingTensor {
            name: format!("token_embd.weight (in {})", file.path().display()),
        })?;
    let n_layers = m.usize("block_count")?;
    let n_experts = m.opt_usize("expert_count")?.unwrap_or(0);
    let first_dense = m.opt_usize("leading_dense_block_count")?.unwrap_or(0);
    let (bos, eos) = special_ids(file);
    let mut c = json!({
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": embed.shape().first().copied().unwrap_or(0),
        "hidden_size": m.usize("embedding_length")?,
        "intermediate_size": m.usize("feed_forward_length")?,
        "num_hidden_layers": n_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "q_lora_rank": m.opt_usize("attention.q_lora_rank")?,
        "kv_lora_rank": m.usize("attention.kv_lora_rank")?,
        "qk_rope_head_dim": rope_dim,
        "qk_nope_head_dim": nope,
        "v_head_dim": v_len,
        "rms_norm_eps": m.opt_f64("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| m.err(&key("attention.layer_norm_rms_epsilon"), "missing"))?,
        "rope_theta": m.opt_f64("rope.freq_base")?.unwrap_or(10_000.0),
        "rope_interleave": true,
        "max_position_embeddings": m.opt_usize("context_length")?.unwrap_or(4096),
        "tie_word_embeddings": file.tensor("output.weight").is_none(),
        "attention_bias": false,
        "hidden_act": "silu",
        "first_k_dense_replace": first_dense,
        "moe_layer_freq": 1,
        "bos_token_id": bos,
        "eos_token_id": eos,
    });
    if let Some(scaling) = yarn(m)? {
        c["rope_scaling"] = scaling;
    }
    if n_experts > 0 {
        let n_group = m.opt_usize("expert_group_count")?.unwrap_or(1);
        // Files from before llama.cpp knew group-limited routing lack the
        // group keys; llama.cpp then routes over all experts (1 group).
        let topk_group = m.opt_usize("expert_group_used_count")?.unwrap_or(n_group);
        let scoring = match m.value("expert_gating_func").1 {
            // llama.cpp's default: DeepSeek-V2/V2.5 files predate the key.
            None => "softmax",
            Some(v) => match v.as_u64() {
                Some(GATING_SOFTMAX) => "softmax",
                Some(GATING_SIGMOID) => "sigmoid",
                _ => {
                    return Err(m.err(
                        &key("expert_gating_func"),
                        format!("{v} is not 1 (softmax) or 2 (sigmoid)"),
                    ));
                }
            },
        };
        // The selection bias is what HF calls noaux_tc routing (V3, K2).
        let biased = (first_dense..n_layers)
            .any(|l| file.tensor(&format!("blk.{l}.exp_probs_b.bias")).is_some());
        let topk_method = match (biased, n_group > 1) {
            (true, _) => "noaux_tc",
            (false, true) => "group_limited_greedy",
            (false, false) => "greedy",
        };
        let norm = m
            .value("expert_weights_norm")
            .1
            .and_then(MetaValue::as_bool);
        let extra = json!({
            "n_routed_experts": n_experts,
            "num_experts_per_tok": m.usize("expert_used_count")?,
            "n_shared_experts": m.opt_usize("expert_shared_count")?.unwrap_or(0),
            "moe_intermediate_size": m.usize("expert_feed_forward_length")?,
            // Absent means llama.cpp applies no scale.
            "routed_scaling_factor": m.opt_f64("expert_weights_scale")?.unwrap_or(1.0),
            "norm_topk_prob": norm.unwrap_or(false),
            "scoring_func": scoring,
            "topk_method": topk_method,
            "n_group": n_group,
            "topk_group": topk_group,
        });
        for (k, v) in extra.as_object().expect("a JSON object") {
            c[k] = v.clone();
        }
    } else {
        c["moe_intermediate_size"] = c["intermediate_size"].clone();
    }
    Ok(c)
}

/// `{arch}.rope.scaling.*` as DeepSeek's YaRN `rope_scaling`.
fn yarn(m: &Meta<'_>) -> Result<Option<Value>> {
    let key = |suffix: &str| format!("{}.{suffix}", m.arch);
    let ty = match m.value("rope.scaling.type").1 {
        None => return Ok(None),
        Some(v) => v
            .as_str()
            .ok_or_else(|| m.err(&key("rope.scaling.type"), format!("{v} is not a string")))?,
    };
    match ty {
        "none" => return Ok(None),
        "yarn" => {}
        other => {
            return Err(m.err(
                &key("rope.scaling.type"),
                format!("rope scaling {other:?} is not supported for deepseek2 (yarn or none)"),
            ));
        }
    }
    // The converter writes 0.1 * mscale_all_dim (its legacy convention), and
    // llama.cpp's deepseek2 takes mscale = mscale_all_dim: the rotated
    // values are not scaled, the softmax scale is mscale(factor)². Computed
    // in f32, so the stored 0.1f32 gives exactly 1.
    let log_mul = m
        .opt_f64("rope.scaling.yarn_log_multiplier")?
        .ok_or_else(|| {
            m.err(
                &key("rope.scaling.yarn_log_multiplier"),
                "missing; YaRN's attention temperature cannot be known without it",
            )
        })?;
    let mscale = f64::from(log_mul as f32 / 0.1f32);
    if let Some(f) = m.opt_f64("rope.scaling.yarn_attn_factor")?
        && f != 1.0
    {
        return Err(m.err(
            &key("rope.scaling.yarn_attn_factor"),
            format!("{f} is not supported (1 or absent)"),
        ));
    }
    let factor = m
        .opt_f64("rope.scaling.factor")?
        .ok_or_else(|| m.err(&key("rope.scaling.factor"), "missing"))?;
    let mut s = json!({
        "type": "yarn",
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": m.usize("rope.scaling.original_context_length")?,
        "mscale": mscale,
        "mscale_all_dim": mscale,
    });
    // Absent: llama.cpp's defaults, which are also transformers' (32, 1).
    for (gguf, hf) in [
        ("yarn_beta_fast", "beta_fast"),
        ("yarn_beta_slow", "beta_slow"),
    ] {
        if let Some(v) = m.opt_f64(&format!("rope.scaling.{gguf}"))? {
            s[hf] = json!(v);
        }
    }
    Ok(Some(s))
}

/// A layer's `kv_b_proj` [heads * (nope + v), kv_lora] stored as
/// `attn_k_b` (ggml dims [nope, kv_lora, heads]: per head the nope rows,
/// transposed) and `attn_v_b` (dims [kv_lora, v, heads]: the v rows as is).
#[derive(Debug, Clone)]
pub(super) struct SplitKvB {
    /// Indices of the two tensors in the file's table.
    pub k: usize,
    pub v: usize,
    pub heads: usize,
    pub nope: usize,
    pub v_dim: usize,
    pub lora: usize,
    /// What the HF tensor is said to be stored as: the pair's common type,
    /// F32 when they differ (then it is decoded to f32).
    pub info: GgufTensorInfo,
}

/// Every layer's `attn_k_b` + `attn_v_b` pair, as (HF name, pair). A layer
/// that also has `attn_kv_b` uses that one (some files carry both). The
/// shapes are checked against each other and against the config.
pub(super) fn split_kv_b(file: &GgufFile, config: &Value) -> Result<Vec<(String, SplitKvB)>> {
    let mut out = Vec::new();
    for (k, t) in file.tensors().iter().enumerate() {
        let layer_of = |suffix: &str| {
            t.name
                .strip_prefix("blk.")
                .and_then(|s| s.strip_suffix(suffix))
        };
        // A value half without its key half would leave kv_b_proj missing.
        if let Some(layer) = layer_of(".attn_v_b.weight")
            && file
                .tensor(&format!("blk.{layer}.attn_k_b.weight"))
                .is_none()
            && file
                .tensor(&format!("blk.{layer}.attn_kv_b.weight"))
                .is_none()
        {
            return Err(Error::BadTensor {
                path: file
                    .tensor_path(&t.name)
                    .unwrap_or(file.path())
                    .to_path_buf(),
                tensor: t.name.clone(),
                reason: format!("has no `blk.{layer}.attn_k_b.weight` to make kv_b_proj with"),
            });
        }
        let Some(layer) = layer_of(".attn_k_b.weight") else {
            continue;
        };
        if file
            .tensor(&format!("blk.{layer}.attn_kv_b.weight"))
            .is_some()
        {
            continue;
        }
        let bad = |tensor: &str, reason: String| Error::BadTensor {
            path: file
                .tensor_path(tensor)
                .unwrap_or(file.path())
                .to_path_buf(),
            tensor: tensor.to_string(),
            reason,
        };
        let v_name = format!("blk.{layer}.attn_v_b.weight");
        let v = file
            .tensor_index(&v_name)
            .ok_or_else(|| bad(&t.name, format!("has no `{v_name}` to make kv_b_proj with")))?;
        let vt = &file.tensors()[v];
        let (&[nope, lora, heads], &[lora_v, v_dim, heads_v]) = (&t.dims[..], &vt.dims[..]) else {
            return Err(bad(
                &t.name,
                format!(
                    "dims {:?} and `{v_name}` dims {:?} are not 3-D",
                    t.dims, vt.dims
                ),
            ));
        };
        let want = |key: &str| config[key].as_u64();
        if (lora, heads) != (lora_v, heads_v)
            || Some(heads) != want("num_attention_heads")
            || Some(nope) != want("qk_nope_head_dim")
            || Some(v_dim) != want("v_head_dim")
            || Some(lora) != want("kv_lora_rank")
        {
            return Err(bad(
                &t.name,
                format!(
                    "dims {:?} with `{v_name}` {:?} do not match heads {}, qk_nope_head_dim {}, v_head_dim {}, kv_lora_rank {}",
                    t.dims,
                    vt.dims,
                    config["num_attention_heads"],
                    config["qk_nope_head_dim"],
                    config["v_head_dim"],
                    config["kv_lora_rank"]
                ),
            ));
        }
        // Dims of a tensor of unknown type were never sized against the
        // file: refuse products that overflow rather than wrap.
        let rows = nope
            .checked_add(v_dim)
            .and_then(|r| r.checked_mul(heads))
            .filter(|r| {
                r.checked_mul(lora)
                    .is_some_and(|n| usize::try_from(n).is_ok())
            })
            .ok_or_else(|| bad(&t.name, format!("dims {:?} overflow", t.dims)))?;
        let (heads, nope, v_dim, lora) =
            (heads as usize, nope as usize, v_dim as usize, lora as usize);
        let common = if t.ggml_type == vt.ggml_type {
            t.ggml_type
        } else {
            super::GgmlType::F32
        };
        let info = GgufTensorInfo {
            name: format!("{} + attn_v_b", t.name),
            dims: vec![lora as u64, rows],
            ggml_type: common,
            offset: 0,
            size: None,
        };
        let hf = format!("model.layers.{layer}.self_attn.kv_b_proj.weight");
        out.push((
            hf,
            SplitKvB {
                k,
                v,
                heads,
                nope,
                v_dim,
                lora,
                info,
            },
        ));
    }
    Ok(out)
}

/// HF `kv_b_proj` from the decoded pair: head h's rows are its `nope` key
/// rows (`k_b[h]` transposed back) then its `v` value rows (`v_b[h]`).
/// `k_b` is [heads, lora, nope] and `v_b` [heads, v, lora], row-major.
pub(super) fn assemble_kv_b(s: &SplitKvB, k_b: &[f32], v_b: &[f32]) -> Option<Vec<f32>> {
    let (heads, nope, v_dim, lora) = (s.heads, s.nope, s.v_dim, s.lora);
    let size = |a: usize, b: usize| heads.checked_mul(a)?.checked_mul(b);
    if Some(k_b.len()) != size(lora, nope) || Some(v_b.len()) != size(v_dim, lora) {
        return None;
    }
    let mut out = Vec::with_capacity(heads * (nope + v_dim) * lora);
    for h in 0..heads {
        for i in 0..nope {
            out.extend((0..lora).map(|c| k_b[(h * lora + c) * nope + i]));
        }
        out.extend_from_slice(&v_b[h * v_dim * lora..(h + 1) * v_dim * lora]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;

    /// The converter's split, written out: `kv_b.view(heads, nope + v,
    /// lora)`, split at `nope` along dim 1, k part `.transpose(1, 2)`.
    #[test]
    fn assemble_inverts_the_converters_split() {
        let (heads, nope, v_dim, lora) = (3, 2, 4, 5);
        let kv_b: Vec<f32> = (0..heads * (nope + v_dim) * lora)
            .map(|x| x as f32)
            .collect();
        let at = |h: usize, r: usize, c: usize| kv_b[(h * (nope + v_dim) + r) * lora + c];
        let mut k_b = Vec::new();
        let mut v_b = Vec::new();
        for h in 0..heads {
            for c in 0..lora {
                k_b.extend((0..nope).map(|i| at(h, i, c)));
            }
            for j in 0..v_dim {
                v_b.extend((0..lora).map(|c| at(h, nope + j, c)));
            }
        }
        let info = GgufTensorInfo {
            name: String::new(),
            dims: vec![],
            ggml_type: GgmlType::F32,
            offset: 0,
            size: None,
        };
        let s = SplitKvB {
            k: 0,
            v: 1,
            heads,
            nope,
            v_dim,
            lora,
            info,
        };
        assert_eq!(assemble_kv_b(&s, &k_b, &v_b).unwrap(), kv_b);
        assert!(assemble_kv_b(&s, &k_b[1..], &v_b).is_none());
    }
}
