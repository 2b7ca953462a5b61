//! Attention of the reference forward: eager causal softmax attention over
//! the whole sequence (optional sliding window), standard GQA attention
//! (Llama, Mixtral, Qwen3) and DeepSeek's MLA in its expanded form. No cache.

use anyhow::Result;

use super::config::{Arch, Config, Mla, opt_bool};
use super::ops::{dot, load, mat, rms_norm, softmax};
use crate::MemorySource;

/// Per token, per head vectors.
pub(super) type Heads = Vec<Vec<f32>>;

pub(super) fn split_heads(x: &[f32], dim: usize) -> Heads {
    x.chunks(dim).map(<[f32]>::to_vec).collect()
}

/// Eager causal attention over the whole sequence: q `[n][heads][dk]`, k
/// `[n][kv_heads][dk]`, v `[n][kv_heads][dv]`; query head h reads kv head
/// `h / (heads / kv_heads)`. Returns `[n][heads * dv]`.
pub(super) fn causal_attention(
    q: &[Heads],
    k: &[Heads],
    v: &[Heads],
    scale: f64,
    window: Option<usize>,
) -> Vec<Vec<f32>> {
    let (heads, kv_heads) = (q[0].len(), k[0].len());
    let group = heads / kv_heads;
    let dv = v[0][0].len();
    (0..q.len())
        .map(|i| {
            let visible: Vec<usize> = (0..=i)
                .filter(|&j| window.is_none_or(|w| i - j < w))
                .collect();
            let mut out = vec![0f32; heads * dv];
            for h in 0..heads {
                let kh = h / group;
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| dot(&q[i][h], &k[j][kh]) * scale)
                    .collect();
                let probs = softmax(&scores);
                for d in 0..dv {
                    let acc: f64 = visible
                        .iter()
                        .zip(&probs)
                        .map(|(&j, &p)| p * f64::from(v[j][kh][d]))
                        .sum();
                    out[h * dv + d] = acc as f32;
                }
            }
            out
        })
        .collect()
}

/// Llama / Mixtral / Qwen3 attention: GQA, half-split rope, Qwen3's per-head
/// q_norm / k_norm before rope (quirk 9).
pub(super) fn gqa_attention(
    cfg: &Config,
    src: &MemorySource,
    layer: usize,
    p: &str,
    x: &[Vec<f32>],
) -> Result<Vec<Vec<f32>>> {
    let (hd, nh, nkv) = (cfg.head_dim, cfg.heads, cfg.kv_heads);
    let wq = mat(
        src,
        &format!("{p}self_attn.q_proj.weight"),
        nh * hd,
        cfg.hidden,
    )?;
    let wk = mat(
        src,
        &format!("{p}self_attn.k_proj.weight"),
        nkv * hd,
        cfg.hidden,
    )?;
    let wv = mat(
        src,
        &format!("{p}self_attn.v_proj.weight"),
        nkv * hd,
        cfg.hidden,
    )?;
    let wo = mat(
        src,
        &format!("{p}self_attn.o_proj.weight"),
        cfg.hidden,
        nh * hd,
    )?;
    // Qwen2-MoE: q/k/v biases unless `qkv_bias` is false (transformers'
    // default is true), never an o bias.
    let biases = if cfg.arch == Arch::Qwen2Moe && opt_bool(cfg.json, "qkv_bias")?.unwrap_or(true) {
        Some(
            [
                ("q_proj", nh * hd),
                ("k_proj", nkv * hd),
                ("v_proj", nkv * hd),
            ]
            .map(|(w, n)| load(src, &format!("{p}self_attn.{w}.bias"), &[n])),
        )
    } else {
        None
    };
    let biases = match biases {
        Some([q, k, v]) => Some([q?, k?, v?]),
        None => None,
    };
    let plus = |y: Vec<f32>, i: usize| match &biases {
        Some(b) => y.iter().zip(&b[i]).map(|(y, b)| y + b).collect(),
        None => y,
    };
    let qk_norm = if cfg.arch == Arch::Qwen3Moe {
        Some((
            load(src, &format!("{p}self_attn.q_norm.weight"), &[hd])?,
            load(src, &format!("{p}self_attn.k_norm.weight"), &[hd])?,
        ))
    } else {
        None
    };
    let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
    for (pos, row) in x.iter().enumerate() {
        let mut q = split_heads(&plus(wq.matvec(row), 0), hd);
        let mut k = split_heads(&plus(wk.matvec(row), 1), hd);
        if let Some((qn, kn)) = &qk_norm {
            q.iter_mut().for_each(|h| *h = rms_norm(h, qn, cfg.eps));
            k.iter_mut().for_each(|h| *h = rms_norm(h, kn, cfg.eps));
        }
        q.iter_mut()
            .chain(k.iter_mut())
            .for_each(|h| cfg.rope.apply(h, pos));
        qs.push(q);
        ks.push(k);
        vs.push(split_heads(&plus(wv.matvec(row), 2), hd));
    }
    let windowed = cfg.window_layers.is_empty() || cfg.window_layers.get(layer) == Some(&true);
    let window = cfg.window.filter(|_| windowed);
    let out = causal_attention(&qs, &ks, &vs, cfg.scale, window);
    Ok(out.iter().map(|o| wo.matvec(o)).collect())
}

/// DeepSeek-V3 multi-head latent attention in transformers' expanded form
/// (quirks 5, 6, 7): per-head keys and values rebuilt from the latent.
pub(super) fn mla_attention(
    cfg: &Config,
    m: &Mla,
    src: &MemorySource,
    p: &str,
    x: &[Vec<f32>],
) -> Result<Vec<Vec<f32>>> {
    let (nh, qd) = (cfg.heads, m.nope + m.rope);
    let a = |name: &str| format!("{p}self_attn.{name}.weight");
    let q_lora = match m.q_lora_rank {
        Some(r) => Some((
            mat(src, &a("q_a_proj"), r, cfg.hidden)?,
            load(src, &a("q_a_layernorm"), &[r])?,
            mat(src, &a("q_b_proj"), nh * qd, r)?,
        )),
        None => None,
    };
    let q_proj = if q_lora.is_none() {
        Some(mat(src, &a("q_proj"), nh * qd, cfg.hidden)?)
    } else {
        None
    };
    let kv_a = mat(
        src,
        &a("kv_a_proj_with_mqa"),
        m.kv_lora_rank + m.rope,
        cfg.hidden,
    )?;
    let kv_norm = load(src, &a("kv_a_layernorm"), &[m.kv_lora_rank])?;
    let kv_b = mat(src, &a("kv_b_proj"), nh * (m.nope + m.v), m.kv_lora_rank)?;
    let wo = mat(src, &a("o_proj"), cfg.hidden, nh * m.v)?;
    let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
    for (pos, row) in x.iter().enumerate() {
        let q = match (&q_lora, &q_proj) {
            // q_a_layernorm / kv_a_layernorm use eps 1e-6 whatever rms_norm_eps says.
            (Some((qa, qa_norm, qb)), _) => qb.matvec(&rms_norm(&qa.matvec(row), qa_norm, 1e-6)),
            (None, Some(wq)) => wq.matvec(row),
            (None, None) => unreachable!("one q projection is always loaded"),
        };
        let mut q = split_heads(&q, qd);
        q.iter_mut()
            .for_each(|h| cfg.rope.apply(&mut h[m.nope..], pos));
        let ckv = kv_a.matvec(row);
        let latent = rms_norm(&ckv[..m.kv_lora_rank], &kv_norm, 1e-6);
        let mut k_rot = ckv[m.kv_lora_rank..].to_vec();
        cfg.rope.apply(&mut k_rot, pos);
        let kv = split_heads(&kv_b.matvec(&latent), m.nope + m.v);
        ks.push(
            kv.iter()
                .map(|h| [&h[..m.nope], &k_rot[..]].concat())
                .collect(),
        );
        vs.push(kv.iter().map(|h| h[m.nope..].to_vec()).collect());
        qs.push(q);
    }
    let out = causal_attention(&qs, &ks, &vs, cfg.scale, None);
    Ok(out.iter().map(|o| wo.matvec(o)).collect())
}
