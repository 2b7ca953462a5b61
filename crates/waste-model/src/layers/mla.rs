//! Multi-head latent attention (DeepSeek-V2/V3, Kimi K2), cached as the
//! compressed latent plus one shared rotary key per position.
//!
//! Computed in the absorbed form: the key up-projection is folded into the
//! query (`q_lat = W_ukᵀ q_nope`) and the value up-projection is applied after
//! the softmax, so attention reads the latent directly and nothing is
//! decompressed per position. This is the same sum as transformers' expanded
//! form, reassociated.

use rayon::prelude::*;
use waste_kernels::Matrix;
use waste_kernels::dense::CacheValue;

use crate::cache::{CacheRows, LayerCache};
use crate::config::{MlaConfig, TensorNames};
use crate::error::KernelContext;
use crate::layers::attention::{AttnShape, attend, score_heads};
use crate::layers::{Linear, Loader};
use crate::ops::{norm, rope};
use crate::{Error, Result};

/// How the query is produced.
#[derive(Debug)]
enum QueryProj {
    /// `q_proj` (q_lora_rank null).
    Direct(Linear),
    /// `q_b_proj(q_a_layernorm(q_a_proj(x)))`.
    LowRank {
        a: Linear,
        norm: Vec<f32>,
        b: Linear,
    },
}

#[derive(Debug)]
pub struct MlaAttention {
    cfg: MlaConfig,
    q: QueryProj,        // → (heads·(nope+rope))
    kv_a: Linear,        // (kv_lora + rope, hidden)
    kv_a_norm: Vec<f32>, // (kv_lora)
    /// Per head, W_ukᵀ: (kv_lora, nope), from the key rows of `kv_b_proj`.
    uk_t: Vec<Matrix>,
    /// Per head, W_uv: (v_head_dim, kv_lora), from the value rows of `kv_b_proj`.
    uv: Vec<Matrix>,
    /// Sigmoid gate on the concatenated heads (Kimi K3): (heads·v_head_dim, hidden).
    output_gate: Option<Linear>,
    o_proj: Linear, // (hidden, heads·v_head_dim)
}

impl MlaAttention {
    pub fn load(
        w: Loader<'_>,
        names: &TensorNames,
        layer: usize,
        hidden: usize,
        cfg: &MlaConfig,
    ) -> Result<Self> {
        let p = |s: &str| names.layer(layer, &format!("self_attn.{s}"));
        let qk_head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
        let q_out = cfg.num_heads * qk_head;
        let q = match cfg.q_lora_rank {
            None => QueryProj::Direct(w.linear(&p("q_proj"), hidden, q_out, false)?),
            Some(r) => QueryProj::LowRank {
                a: w.linear(&p("q_a_proj"), hidden, r, false)?,
                norm: w.vector(&p("q_a_layernorm.weight"), r)?,
                b: w.linear(&p("q_b_proj"), r, q_out, false)?,
            },
        };
        let per_head = cfg.qk_nope_head_dim + cfg.v_head_dim;
        let kv_b_name = p("kv_b_proj.weight");
        let kv_b = w.matrix(&kv_b_name, cfg.num_heads * per_head, cfg.kv_lora_rank)?;
        let slice = |start, end| {
            kv_b.slice_rows(start, end).map_err(|e| Error::Weight {
                name: kv_b_name.clone(),
                source: Box::new(e),
            })
        };
        let (mut uk_t, mut uv) = (Vec::new(), Vec::new());
        for h in 0..cfg.num_heads {
            let base = h * per_head;
            uk_t.push(slice(base, base + cfg.qk_nope_head_dim)?.transposed());
            uv.push(slice(base + cfg.qk_nope_head_dim, base + per_head)?);
        }
        Ok(Self {
            q,
            kv_a: w.linear(
                &p("kv_a_proj_with_mqa"),
                hidden,
                cfg.kv_lora_rank + cfg.qk_rope_head_dim,
                false,
            )?,
            kv_a_norm: w.vector(&p("kv_a_layernorm.weight"), cfg.kv_lora_rank)?,
            uk_t,
            uv,
            output_gate: if cfg.output_gate {
                Some(w.linear(&p("g_proj"), hidden, cfg.num_heads * cfg.v_head_dim, false)?)
            } else {
                None
            },
            o_proj: w.linear(&p("o_proj"), cfg.num_heads * cfg.v_head_dim, hidden, false)?,
            cfg: cfg.clone(),
        })
    }

    /// Attends `n` normalised rows (n, hidden) at positions pos0.., appending
    /// their latents to `cache`. Returns (n, hidden) before the residual.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        pos0: usize,
        cache: &mut LayerCache,
        layer: usize,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (heads, nope, rope_dim, lora) = (
            c.num_heads,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.kv_lora_rank,
        );
        let qk_head = nope + rope_dim;
        let mut q = match &self.q {
            QueryProj::Direct(l) => l.forward(x, n, layer)?,
            QueryProj::LowRank { a, norm: w, b } => {
                let mut qa = a.forward(x, n, layer)?;
                norm::rms_norm_rows(&mut qa, w, c.latent_norm_eps);
                b.forward(&qa, n, layer)?
            }
        }; // (n, heads, nope+rope)
        let kv = self.kv_a.forward(x, n, layer)?; // (n, lora+rope)
        let mut latent = Vec::with_capacity(n * lora);
        let mut k_rope = Vec::with_capacity(n * rope_dim);
        for (t, row) in kv.chunks(lora + rope_dim).enumerate() {
            let mut l = row[..lora].to_vec();
            norm::rms_norm(&mut l, &self.kv_a_norm, c.latent_norm_eps);
            latent.extend_from_slice(&l);
            let mut kr = row[lora..].to_vec();
            // NoPE MLA (Kimi) attends the rope dimensions unrotated.
            if let Some(r) = &c.rope {
                let (cos, sin) = rope::cos_sin(r, pos0 + t);
                rope::apply(r, &mut kr, &cos, &sin);
                for head in q[t * heads * qk_head..(t + 1) * heads * qk_head].chunks_mut(qk_head) {
                    rope::apply(r, &mut head[nope..], &cos, &sin);
                }
            }
            k_rope.extend_from_slice(&kr);
        }
        let LayerCache::Latent { rows, .. } = cache else {
            return Err(Error::Step {
                layer,
                what: "MLA layer given a key/value cache",
            });
        };
        rows.push(&latent, &k_rope, 0);

        // q_lat (n, heads, lora) = W_ukᵀ q_nope per head.
        let q_lat_by_head = self.per_head(
            layer,
            n,
            |h| gather(&q, n, heads * qk_head, h * qk_head, nope),
            &self.uk_t,
        )?;
        let q_lat = interleave_heads(&q_lat_by_head, n, lora);
        let out_lat = match rows {
            CacheRows::F32(p) => self.attend_cached(&q, &q_lat, n, pos0, &p.first, &p.second),
            CacheRows::F16(p) => self.attend_cached(&q, &q_lat, n, pos0, &p.first, &p.second),
        };
        // v (n, heads, v_head_dim) = W_uv · out_lat per head.
        let v_by_head = self.per_head(
            layer,
            n,
            |h| gather(&out_lat, n, heads * lora, h * lora, lora),
            &self.uv,
        )?;
        let mut v = interleave_heads(&v_by_head, n, c.v_head_dim);
        if let Some(g) = &self.output_gate {
            let gate = g.forward(x, n, layer)?;
            for (o, g) in v.iter_mut().zip(&gate) {
                *o *= 1.0 / (1.0 + (-g).exp());
            }
        }
        self.o_proj.forward(&v, n, layer)
    }

    /// Attention of the `n` queries (`q` for the rope part, `q_lat` the
    /// absorbed latent part) over the cached latents `lc` and rope keys `rc`:
    /// (n, heads, kv_lora_rank).
    fn attend_cached<C: CacheValue>(
        &self,
        q: &[f32],
        q_lat: &[f32],
        n: usize,
        pos0: usize,
        lc: &[C],
        rc: &[C],
    ) -> Vec<f32> {
        let c = &self.cfg;
        let (heads, nope, rope_dim, lora) = (
            c.num_heads,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.kv_lora_rank,
        );
        let qk_head = nope + rope_dim;
        let shape = AttnShape {
            pos0,
            num_heads: heads,
            dv: lora,
            window: None,
            scale: c.softmax_scale,
        };
        let mut out_lat = vec![0f32; n * heads * lora];
        // Every head reads the one latent cache: the score of a key is
        // its latent dot plus its rope dot, in that order.
        attend(
            shape,
            heads,
            |t, block, j0, p| {
                let ql: Vec<&[f32]> = block
                    .clone()
                    .map(|h| &q_lat[(t * heads + h) * lora..][..lora])
                    .collect();
                let qr: Vec<&[f32]> = block
                    .map(|h| &q[(t * heads + h) * qk_head + nope..][..rope_dim])
                    .collect();
                score_heads(&ql, |j| &lc[j * lora..][..lora], j0, p, false);
                score_heads(&qr, |j| &rc[j * rope_dim..][..rope_dim], j0, p, true);
            },
            |_| (lc, lora),
            &mut out_lat,
        );
        out_lat
    }

    /// Applies `mats[h]` to the (n, cols) input `input(h)` of every head, in parallel.
    fn per_head(
        &self,
        layer: usize,
        n: usize,
        input: impl Fn(usize) -> Vec<f32> + Sync,
        mats: &[Matrix],
    ) -> Result<Vec<Vec<f32>>> {
        mats.par_iter()
            .enumerate()
            .map(|(h, m)| m.matmul_alloc(&input(h), n).at_layer(layer))
            .collect()
    }
}

/// Columns `off..off+width` of each of the n rows (stride `stride`) of `x`.
fn gather(x: &[f32], n: usize, stride: usize, off: usize, width: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|t| x[t * stride + off..][..width].iter().copied())
        .collect()
}

/// Per-head (n, width) blocks → (n, heads, width).
fn interleave_heads(by_head: &[Vec<f32>], n: usize, width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * by_head.len() * width);
    for t in 0..n {
        for h in by_head {
            out.extend_from_slice(&h[t * width..][..width]);
        }
    }
    out
}
