//! Grouped-query attention (Llama, Mistral/Mixtral, Qwen3) and the causal
//! softmax attention core that MLA shares.

use rayon::prelude::*;

use waste_kernels::dense::{CacheValue, kernels, prefetch};

use crate::cache::{CacheRows, LayerCache};
use crate::config::{GqaConfig, TensorNames};
use crate::layers::{Linear, Loader};
use crate::ops::{norm, rope, softmax};
use crate::{Error, Result};

/// Shape of one causal attention call over a cache of `pos0 + n` positions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttnShape {
    /// Position of the first query.
    pub pos0: usize,
    pub num_heads: usize,
    /// Width of one head's output row.
    pub dv: usize,
    pub window: Option<usize>,
    pub scale: f32,
}

/// Query heads scored together in one pass over the keys they share.
const HEADS_PER_PASS: usize = 4;

/// Causal softmax attention, parallel over (query, block of heads).
/// `group` consecutive query heads read the same keys (GQA's heads per KV
/// head; every head for MLA's latent cache): blocks of [`HEADS_PER_PASS`]
/// heads when `group` divides into them, else one head each.
/// `score(t, heads, j0, p)` writes the unscaled q·k of query t, each head
/// of the range `heads`, with keys j0, j0 + 1, .., head-major
/// (`p[i·keys + j]` for the range's i-th head); `value(h)` is head h's
/// value rows as (the values from position 0, the stride between
/// positions), each row `dv` wide, in the cache's value type `C`. Writes
/// (n, heads, dv).
pub(crate) fn attend<'v, C, S, V>(s: AttnShape, group: usize, score: S, value: V, out: &mut [f32])
where
    C: CacheValue,
    S: Fn(usize, std::ops::Range<usize>, usize, &mut [f32]) + Sync,
    V: Fn(usize) -> (&'v [C], usize) + Sync,
{
    let block = if group.is_multiple_of(HEADS_PER_PASS) {
        HEADS_PER_PASS
    } else {
        1
    };
    let blocks_per_query = s.num_heads / block;
    out.par_chunks_mut(block * s.dv)
        .enumerate()
        .for_each(|(i, o)| {
            let (t, h0) = (i / blocks_per_query, (i % blocks_per_query) * block);
            let pos = s.pos0 + t;
            let start = s.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let keys = pos + 1 - start;
            let mut p = vec![0f32; block * keys];
            score(t, h0..h0 + block, start, &mut p);
            for p in p.chunks_mut(keys) {
                for v in p.iter_mut() {
                    *v *= s.scale;
                }
                softmax::softmax(p);
            }
            o.fill(0.0);
            let heads = h0..h0 + block;
            let (v0, stride0) = value(h0);
            let shared = block == HEADS_PER_PASS
                && heads.clone().all(|h| {
                    let (v, stride) = value(h);
                    std::ptr::eq(v, v0) && stride == stride0
                });
            if shared {
                // The block's heads read the same value rows: each row
                // loaded once for the four.
                let (mut ps, mut os) = (p.chunks_exact(keys), o.chunks_exact_mut(s.dv));
                let p4 = [(); HEADS_PER_PASS].map(|_| ps.next().expect("a block's weights"));
                let o4 = [(); HEADS_PER_PASS].map(|_| os.next().expect("a block's outputs"));
                kernels().axpy_rows4(p4, &v0[start * stride0..], stride0, o4);
                return;
            }
            for ((p, o), h) in p.chunks(keys).zip(o.chunks_mut(s.dv)).zip(heads) {
                let (v, stride) = value(h);
                kernels().axpy_rows(p, &v[start * stride..], stride, o);
            }
        });
}

/// How many keys ahead of the four being scored [`score_heads`] asks for.
const KEYS_AHEAD: usize = 16;

/// The scores of query heads `qs` (one, or [`HEADS_PER_PASS`] sharing
/// their keys) against keys `j0..` (`key(j)`), head-major into `p` as
/// [`attend`]'s `score` writes them; `accumulate` adds to `p` instead
/// (MLA's rope part). Every score is one dispatched `dot` of the query and
/// the key (in the cache's value type `C`), bit for bit, however the keys
/// are grouped.
pub(crate) fn score_heads<'k, C: CacheValue>(
    qs: &[&[f32]],
    key: impl Fn(usize) -> &'k [C],
    j0: usize,
    p: &mut [f32],
    accumulate: bool,
) {
    let k = kernels();
    let keys = p.len() / qs.len().max(1);
    let mut put = |at: usize, v: f32| {
        if accumulate {
            p[at] += v;
        } else {
            p[at] = v;
        }
    };
    let mut done = 0;
    if let [q0, q1, q2, q3] = *qs {
        while done + 4 <= keys {
            let j = j0 + done;
            // The keys four passes ahead: a decode step's weights evict
            // the cache's rows from L3, and rows a stride apart are no
            // stream the hardware prefetcher follows.
            if done + KEYS_AHEAD + 4 <= keys {
                for ahead in j + KEYS_AHEAD..j + KEYS_AHEAD + 4 {
                    prefetch(key(ahead));
                }
            }
            let d = k.dot4x4(
                [q0, q1, q2, q3],
                [key(j), key(j + 1), key(j + 2), key(j + 3)],
            );
            for (r, row) in d.iter().enumerate() {
                for (c, v) in row.iter().enumerate() {
                    put(r * keys + done + c, *v);
                }
            }
            done += 4;
        }
    }
    for (r, q) in qs.iter().enumerate() {
        let mut at = done;
        while at + 4 <= keys {
            let j = j0 + at;
            let d = k.dot4(q, [key(j), key(j + 1), key(j + 2), key(j + 3)]);
            for (c, v) in d.iter().enumerate() {
                put(r * keys + at + c, *v);
            }
            at += 4;
        }
        for at in at..keys {
            put(r * keys + at, k.dot(q, key(j0 + at)));
        }
    }
}

/// Attention with `num_kv_heads` key/value heads shared by groups of query heads.
#[derive(Debug)]
pub struct GqaAttention {
    cfg: GqaConfig,
    q_proj: Linear,           // (heads·head_dim, hidden)
    k_proj: Linear,           // (kv_heads·head_dim, hidden)
    v_proj: Linear,           // (kv_heads·head_dim, hidden)
    o_proj: Linear,           // (hidden, heads·head_dim)
    q_norm: Option<Vec<f32>>, // (head_dim)
    k_norm: Option<Vec<f32>>, // (head_dim)
    norm_eps: f32,
}

impl GqaAttention {
    pub fn load(
        w: Loader<'_>,
        names: &TensorNames,
        layer: usize,
        hidden: usize,
        cfg: &GqaConfig,
        norm_eps: f32,
    ) -> Result<Self> {
        let p = |s: &str| names.layer(layer, &format!("self_attn.{s}"));
        let (q_out, kv_out) = (
            cfg.num_heads * cfg.head_dim,
            cfg.num_kv_heads * cfg.head_dim,
        );
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(w.vector(&p("q_norm.weight"), cfg.head_dim)?),
                Some(w.vector(&p("k_norm.weight"), cfg.head_dim)?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            q_proj: w.linear(&p("q_proj"), hidden, q_out, cfg.qkv_bias)?,
            k_proj: w.linear(&p("k_proj"), hidden, kv_out, cfg.qkv_bias)?,
            v_proj: w.linear(&p("v_proj"), hidden, kv_out, cfg.qkv_bias)?,
            o_proj: w.linear(&p("o_proj"), q_out, hidden, cfg.o_bias)?,
            q_norm,
            k_norm,
            norm_eps,
            cfg: GqaConfig {
                sliding_window: cfg.sliding_window.filter(|_| {
                    cfg.window_layers
                        .as_ref()
                        .is_none_or(|l| l.get(layer).copied().unwrap_or(false))
                }),
                ..cfg.clone()
            },
        })
    }

    /// Attends `n` normalised rows `x` (n, hidden) at positions pos0.., appending
    /// their keys and values to `cache`. Returns (n, hidden) before the residual.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        pos0: usize,
        cache: &mut LayerCache,
        layer: usize,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let hd = c.head_dim;
        let mut q = self.q_proj.forward(x, n, layer)?; // (n, heads, hd)
        let mut k = self.k_proj.forward(x, n, layer)?; // (n, kv_heads, hd)
        let v = self.v_proj.forward(x, n, layer)?; // (n, kv_heads, hd)
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            norm::rms_norm_rows(&mut q, qn, self.norm_eps);
            norm::rms_norm_rows(&mut k, kn, self.norm_eps);
        }
        for t in 0..n {
            let (cos, sin) = rope::cos_sin(&c.rope, pos0 + t);
            for head in q[t * c.num_heads * hd..(t + 1) * c.num_heads * hd].chunks_mut(hd) {
                rope::apply(&c.rope, head, &cos, &sin);
            }
            for head in k[t * c.num_kv_heads * hd..(t + 1) * c.num_kv_heads * hd].chunks_mut(hd) {
                rope::apply(&c.rope, head, &cos, &sin);
            }
        }
        let LayerCache::Kv { kv, width, stride } = cache else {
            return Err(Error::Step {
                layer,
                what: "GQA layer given a latent cache",
            });
        };
        let (width, stride) = (*width, *stride);
        for (kr, vr) in k.chunks_exact(width).zip(v.chunks_exact(width)) {
            kv.push(kr, vr, stride - width);
        }
        let out = match kv {
            CacheRows::F32(p) => self.attend_cached(&q, n, pos0, &p.first, &p.second, stride),
            CacheRows::F16(p) => self.attend_cached(&q, n, pos0, &p.first, &p.second, stride),
        };
        self.o_proj.forward(&out, n, layer)
    }

    /// Attention of the `n` rotated queries `q` over the cached keys `kc`
    /// and values `vc` (rows `stride` apart), (n, heads·head_dim).
    fn attend_cached<C: CacheValue>(
        &self,
        q: &[f32],
        n: usize,
        pos0: usize,
        kc: &[C],
        vc: &[C],
        stride: usize,
    ) -> Vec<f32> {
        let c = &self.cfg;
        let (hd, group) = (c.head_dim, c.num_heads / c.num_kv_heads);
        let shape = AttnShape {
            pos0,
            num_heads: c.num_heads,
            dv: hd,
            window: c.sliding_window,
            scale: c.softmax_scale,
        };
        let mut out = vec![0f32; n * c.num_heads * hd];
        attend(
            shape,
            group,
            |t, heads, j0, p| {
                let kv = heads.start / group;
                let qs: Vec<&[f32]> = heads
                    .map(|h| &q[(t * c.num_heads + h) * hd..][..hd])
                    .collect();
                score_heads(&qs, |j| &kc[j * stride + kv * hd..][..hd], j0, p, false);
            },
            |h| (&vc[(h / group) * hd..], stride),
            &mut out,
        );
        out
    }
}
