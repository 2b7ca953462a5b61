//! llama.cpp tensor names → Hugging Face state-dict names: the names every
//! arch shares, here, and a family's own (its `Gguf::layer_names` in
//! `waste-family`); and the row operations that turn a GGUF tensor back
//! into the HF one: slicing one expert out of a 3-D `ffn_*_exps` tensor,
//! and undoing the q/k rotary row permutation llama.cpp's converter applies
//! to the `llama` arch. The table is shared/fixtures/gguf/README.md's.

use waste_family::{Family, Gguf};

use super::file::GgufTensorInfo;

/// Head counts that the q/k un-permutation needs (llama arch only).
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
}

/// Where an HF tensor's values come from inside a GGUF tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub hf_name: String,
    /// First row (a row = `dims[0]` elements) and row count to decode.
    pub first_row: u64,
    pub rows: u64,
    /// Row-major HF shape.
    pub shape: Vec<usize>,
    /// Undo llama.cpp's rotary row permutation with this many heads.
    pub unpermute_heads: Option<usize>,
}

/// The HF tensors one GGUF tensor of `family` (as llama.cpp writes it,
/// `gguf`) provides (several for a 3-D expert tensor), or nothing for names
/// without an HF counterpart.
pub fn map_tensor(family: &Family, gguf: &Gguf, heads: Heads, t: &GgufTensorInfo) -> Vec<Mapped> {
    // Dims of unknown-type tensors were not size-checked: ignore shapes whose
    // element count overflows, so that the row arithmetic below cannot.
    if t.dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .is_none()
    {
        return Vec::new();
    }
    let whole = |hf_name: String, unpermute_heads: Option<usize>| Mapped {
        hf_name,
        first_row: 0,
        rows: t.dims[1..].iter().product(),
        shape: t.shape(),
        unpermute_heads,
    };
    let top = match t.name.as_str() {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(hf) = top {
        return vec![whole(hf.to_string(), None)];
    }
    let Some((layer, rest)) = t
        .name
        .strip_prefix("blk.")
        .and_then(|s| s.split_once('.'))
        .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)))
    else {
        return Vec::new();
    };
    let prefix = format!("model.layers.{layer}.");
    let (block, proj) = (family.moe.block, family.moe.proj);
    let permute = |n: usize| gguf.permute_qk.then_some(n);
    let Some((stem, suffix @ ("weight" | "bias"))) = rest.rsplit_once('.') else {
        return Vec::new();
    };
    let one = |hf: &str, heads: Option<usize>| vec![whole(format!("{prefix}{hf}.{suffix}"), heads)];
    if let Some(hf) = gguf.layer_names.and_then(|own| own(stem, suffix)) {
        let mut m = whole(format!("{prefix}{hf}"), None);
        if let [n] = m.shape[..]
            && gguf.row_vectors.contains(&stem)
        {
            m.shape = vec![1, n];
        }
        return vec![m];
    }
    match stem {
        "attn_norm" => one("input_layernorm", None),
        "ffn_norm" => one("post_attention_layernorm", None),
        "attn_q" => one("self_attn.q_proj", permute(heads.q)),
        "attn_k" => one("self_attn.k_proj", permute(heads.kv)),
        "attn_v" => one("self_attn.v_proj", None),
        "attn_output" => one("self_attn.o_proj", None),
        "attn_q_norm" => one("self_attn.q_norm", None),
        "attn_k_norm" => one("self_attn.k_norm", None),
        "ffn_gate" => one("mlp.gate_proj", None),
        "ffn_up" => one("mlp.up_proj", None),
        "ffn_down" => one("mlp.down_proj", None),
        "ffn_gate_inp" => one(&format!("{block}.gate"), None),
        "ffn_gate_exps" => experts(t, &prefix, block, proj[0], suffix),
        "ffn_up_exps" => experts(t, &prefix, block, proj[1], suffix),
        "ffn_down_exps" => experts(t, &prefix, block, proj[2], suffix),
        // Older Mixtral files store one 2-D tensor per expert: ffn_gate.{e}.
        other => match other.split_once('.') {
            Some((kind, e)) if e.parse::<u32>().is_ok() => {
                let p = match kind {
                    "ffn_gate" => proj[0],
                    "ffn_up" => proj[1],
                    "ffn_down" => proj[2],
                    _ => return Vec::new(),
                };
                one(&format!("{block}.experts.{e}.{p}"), None)
            }
            _ => Vec::new(),
        },
    }
}

/// More experts per layer than any model has: a hostile dim, not a model.
const MAX_EXPERTS: u64 = 1 << 16;

/// One HF tensor per expert of a 3-D `[n_expert, out, in]` tensor: expert
/// `e` is rows `e * out .. (e + 1) * out`.
fn experts(t: &GgufTensorInfo, prefix: &str, block: &str, proj: &str, suffix: &str) -> Vec<Mapped> {
    let [_, out, n_expert] = t.dims[..] else {
        return Vec::new();
    };
    if n_expert > MAX_EXPERTS {
        return Vec::new();
    }
    (0..n_expert)
        .map(|e| Mapped {
            hf_name: format!("{prefix}{block}.experts.{e}.{proj}.{suffix}"),
            first_row: e * out,
            rows: out,
            shape: t.shape()[1..].to_vec(),
            unpermute_heads: None,
        })
        .collect()
}

/// Inverse of llama.cpp's `permute` on a `[rows, cols]` q or k projection:
/// within each head of `rows / n_head` rows, GGUF row `2i + j` is HF row
/// `i + j * head_dim / 2` (interleaved rotary pairs back to rotate-half).
/// A row is `cols` items: values, or a row's ggml blocks as bytes (rows
/// move whole, so blocks kept as stored are un-permuted the same way).
/// `None` when the rows do not split into heads of even size.
pub fn unpermute_rows<T: Copy + Default>(data: &[T], cols: usize, n_head: usize) -> Option<Vec<T>> {
    let rows = data.len().checked_div(cols)?;
    let head_dim = rows.checked_div(n_head)?;
    if rows % n_head != 0 || head_dim % 2 != 0 || rows * cols != data.len() {
        return None;
    }
    let half = head_dim / 2;
    let mut out = vec![T::default(); data.len()];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_dim + 2 * i + j) * cols;
                let dst = (h * head_dim + j * half + i) * cols;
                out[dst..dst + cols].copy_from_slice(&data[src..src + cols]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;
    use waste_family::{llama, mixtral, qwen3_moe};

    /// `map_tensor` for a family read from a GGUF.
    fn map(family: &Family, heads: Heads, t: &GgufTensorInfo) -> Vec<Mapped> {
        map_tensor(family, family.gguf.as_ref().unwrap(), heads, t)
    }

    fn info(name: &str, dims: &[u64]) -> GgufTensorInfo {
        GgufTensorInfo {
            name: name.into(),
            dims: dims.to_vec(),
            ggml_type: GgmlType::F32,
            offset: 0,
            size: None,
        }
    }

    const HEADS: Heads = Heads { q: 4, kv: 2 };

    #[test]
    fn experts_split_by_family() {
        let t = info("blk.3.ffn_down_exps.weight", &[256, 128, 8]);
        let m = map(&mixtral::FAMILY, HEADS, &t);
        assert_eq!(m.len(), 8);
        assert_eq!(
            m[5].hf_name,
            "model.layers.3.block_sparse_moe.experts.5.w2.weight"
        );
        assert_eq!(
            (m[5].first_row, m[5].rows, &m[5].shape[..]),
            (640, 128, &[128, 256][..])
        );
        let m = map(
            &qwen3_moe::FAMILY,
            HEADS,
            &info("blk.0.ffn_gate_inp.weight", &[128, 16]),
        );
        assert_eq!(m[0].hf_name, "model.layers.0.mlp.gate.weight");
        let m = map(
            &mixtral::FAMILY,
            HEADS,
            &info("blk.1.ffn_up.7.weight", &[128, 256]),
        );
        assert_eq!(
            m[0].hf_name,
            "model.layers.1.block_sparse_moe.experts.7.w3.weight"
        );
    }

    #[test]
    fn a_one_row_tensor_stored_1d_reads_as_one_row() {
        let family = &waste_family::qwen2_moe::FAMILY;
        for dims in [&[128][..], &[128, 1][..]] {
            let m = map(
                family,
                HEADS,
                &info("blk.2.ffn_gate_inp_shexp.weight", dims),
            );
            assert_eq!(m[0].hf_name, "model.layers.2.mlp.shared_expert_gate.weight");
            assert_eq!((&m[0].shape[..], m[0].rows), (&[1, 128][..], 1));
        }
        let m = map(family, HEADS, &info("blk.2.attn_q.bias", &[128]));
        assert_eq!(m[0].shape, [128]);
    }

    #[test]
    fn permutation_only_for_llama_q_k() {
        let q = info("blk.0.attn_q.weight", &[128, 128]);
        assert_eq!(map(&llama::FAMILY, HEADS, &q)[0].unpermute_heads, Some(4));
        assert_eq!(map(&qwen3_moe::FAMILY, HEADS, &q)[0].unpermute_heads, None);
        let k = info("blk.0.attn_k.bias", &[64]);
        let m = map(&mixtral::FAMILY, HEADS, &k);
        assert_eq!(
            (m[0].hf_name.as_str(), m[0].unpermute_heads),
            ("model.layers.0.self_attn.k_proj.bias", Some(2))
        );
        assert!(map(&llama::FAMILY, HEADS, &info("rope_freqs.weight", &[32])).is_empty());
        assert!(map(&llama::FAMILY, HEADS, &info("blk.x.attn_q.weight", &[4])).is_empty());
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: gguf = hf.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2)
        let (n_head, head_dim, cols) = (2, 6, 3);
        let hf: Vec<f32> = (0..n_head * head_dim * cols).map(|v| v as f32).collect();
        let mut gguf = vec![0f32; hf.len()];
        for h in 0..n_head {
            for j in 0..2 {
                for i in 0..head_dim / 2 {
                    let src = (h * head_dim + j * head_dim / 2 + i) * cols;
                    let dst = (h * head_dim + 2 * i + j) * cols;
                    gguf[dst..dst + cols].copy_from_slice(&hf[src..src + cols]);
                }
            }
        }
        assert_ne!(gguf, hf);
        assert_eq!(unpermute_rows(&gguf, cols, n_head).unwrap(), hf);
        assert!(unpermute_rows(&gguf, cols, 4).is_none());
        assert!(unpermute_rows(&gguf, 0, 2).is_none());
    }
}
