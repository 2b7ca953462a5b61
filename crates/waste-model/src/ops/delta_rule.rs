//! The gated delta rule of Kimi Delta Attention for one head, in two forms
//! that compute the same function: the token-by-token recurrence (decode)
//! and the chunked WY form (prefill), as FLA's `fused_recurrent_kda` and
//! `chunk_kda` do. State S is (K, V), key channel major.
//!
//! Recurrence, per token: S ← diag(exp g)·S; u = β(v − Sᵀk); S ← S + k·uᵀ;
//! o = Sᵀq (read after the write).

/// One head's prepared inputs for `n` tokens: q and k already L2-normalised
/// (q also scaled), `g` the per-channel log decays, all row-major (n, dim).
#[derive(Debug, Clone, Default)]
pub struct HeadInputs {
    pub n: usize,
    /// Key width K.
    pub dk: usize,
    /// Value width V.
    pub dv: usize,
    pub q: Vec<f32>,    // (n, K)
    pub k: Vec<f32>,    // (n, K)
    pub v: Vec<f32>,    // (n, V)
    pub g: Vec<f32>,    // (n, K), ≤ 0
    pub beta: Vec<f32>, // (n)
}

/// Tokens per chunk of the chunked form. Small chunks keep the number of
/// decay factors exp(G_t − G_j) per token low (C/2 · K); any size is exact.
pub const CHUNK: usize = 16;

/// The recurrence: advances `s` (K, V) over all tokens, writing o (n, V).
pub fn recurrent(x: &HeadInputs, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    let mut u = vec![0f32; dv];
    for t in 0..x.n {
        let (q, k, g) = (
            &x.q[t * dk..][..dk],
            &x.k[t * dk..][..dk],
            &x.g[t * dk..][..dk],
        );
        for (row, gd) in s.chunks_mut(dv).zip(g) {
            let decay = gd.exp();
            row.iter_mut().for_each(|v| *v *= decay);
        }
        let v = &x.v[t * dv..][..dv];
        for (j, uj) in u.iter_mut().enumerate() {
            let ks: f32 = (0..dk).map(|d| k[d] * s[d * dv + j]).sum();
            *uj = x.beta[t] * (v[j] - ks);
        }
        for (row, kd) in s.chunks_mut(dv).zip(k) {
            for (sv, uj) in row.iter_mut().zip(&u) {
                *sv += kd * uj;
            }
        }
        for (j, oj) in out[t * dv..][..dv].iter_mut().enumerate() {
            *oj = (0..dk).map(|d| q[d] * s[d * dv + j]).sum();
        }
    }
}

/// The chunked form: the same function, [`CHUNK`] tokens at a time. Within a
/// chunk, with cumulative log decays G_t and S₀ the state at its start,
/// (I + A)·U = β⊙(V − K̃·S₀) where A_tj = β_t Σ_d k_t,d k_j,d e^{G_t,d − G_j,d}
/// (j < t) and K̃_t = e^{G_t}⊙k_t, solved by forward substitution (the WY
/// form); then o_t = (e^{G_t}⊙q_t)·S₀ + Σ_{j≤t} (Σ_d q_t,d k_j,d e^{G_t,d − G_j,d}) u_j
/// and S ← e^{G_last}⊙S₀ + Σ_j (e^{G_last − G_j}⊙k_j) u_jᵀ. Only differences
/// G_t − G_j with j ≤ t are exponentiated, so nothing overflows.
pub fn chunked(x: &HeadInputs, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    for start in (0..x.n).step_by(CHUNK) {
        let c = CHUNK.min(x.n - start);
        let row =
            |a: &[f32], t: usize, w: usize| -> Vec<f32> { a[(start + t) * w..][..w].to_vec() };
        // Cumulative log decays within the chunk.
        let mut cum = vec![0f32; c * dk];
        for t in 0..c {
            for d in 0..dk {
                let prev = if t == 0 { 0.0 } else { cum[(t - 1) * dk + d] };
                cum[t * dk + d] = prev + x.g[(start + t) * dk + d];
            }
        }
        let gt = |t: usize| &cum[t * dk..][..dk];
        // Σ_d a_d b_d e^{G_t,d − G_j,d}
        let decayed_dot = |a: &[f32], t: usize, b: &[f32], j: usize| -> f32 {
            (0..dk)
                .map(|d| a[d] * b[d] * (gt(t)[d] - gt(j)[d]).exp())
                .sum()
        };
        let keys: Vec<Vec<f32>> = (0..c).map(|t| row(&x.k, t, dk)).collect();
        let beta = &x.beta[start..start + c];

        // Forward substitution for U₀ = (I+A)⁻¹ β V and W = (I+A)⁻¹ β K̃.
        let mut u0 = vec![0f32; c * dv];
        let mut w = vec![0f32; c * dk];
        for t in 0..c {
            let v = row(&x.v, t, dv);
            for j in 0..dv {
                u0[t * dv + j] = beta[t] * v[j];
            }
            for d in 0..dk {
                w[t * dk + d] = beta[t] * gt(t)[d].exp() * keys[t][d];
            }
            for j in 0..t {
                let a = beta[t] * decayed_dot(&keys[t], t, &keys[j], j);
                let (done, cur) = u0.split_at_mut(t * dv);
                for (x, y) in cur[..dv].iter_mut().zip(&done[j * dv..][..dv]) {
                    *x -= a * y;
                }
                let (done, cur) = w.split_at_mut(t * dk);
                for (x, y) in cur[..dk].iter_mut().zip(&done[j * dk..][..dk]) {
                    *x -= a * y;
                }
            }
        }
        // U = U₀ − W·S₀.
        let mut u = u0;
        for t in 0..c {
            for j in 0..dv {
                let ws: f32 = (0..dk).map(|d| w[t * dk + d] * s[d * dv + j]).sum();
                u[t * dv + j] -= ws;
            }
        }
        // Outputs.
        for t in 0..c {
            let q = row(&x.q, t, dk);
            let qd: Vec<f32> = (0..dk).map(|d| q[d] * gt(t)[d].exp()).collect();
            let o = &mut out[(start + t) * dv..][..dv];
            for (j, oj) in o.iter_mut().enumerate() {
                *oj = (0..dk).map(|d| qd[d] * s[d * dv + j]).sum();
            }
            for j in 0..=t {
                let b = decayed_dot(&q, t, &keys[j], j);
                for (oj, uj) in o.iter_mut().zip(&u[j * dv..][..dv]) {
                    *oj += b * uj;
                }
            }
        }
        // State update.
        let last = gt(c - 1).to_vec();
        for d in 0..dk {
            let decay = last[d].exp();
            let srow = &mut s[d * dv..][..dv];
            srow.iter_mut().for_each(|v| *v *= decay);
            for (j, key) in keys.iter().enumerate() {
                let f = key[d] * (last[d] - gt(j)[d]).exp();
                for (sv, uj) in srow.iter_mut().zip(&u[j * dv..][..dv]) {
                    *sv += f * uj;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded pseudo-random inputs shaped like KDA's: unit-norm keys, decays
    /// in (−5, 0) (K3's lower bound) with some near zero, β in (0, 1).
    fn inputs(n: usize, dk: usize, dv: usize, seed: u32) -> HeadInputs {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let mut unit = |w: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .flat_map(|_| {
                    let v: Vec<f32> = (0..w).map(|_| rnd()).collect();
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.into_iter().map(move |x| scale * x / norm)
                })
                .collect()
        };
        let q = unit(dk, (dk as f32).powf(-0.5));
        let k = unit(dk, 1.0);
        let v: Vec<f32> = unit(dv, 3.0);
        let mut rnd2 = {
            let mut s = seed.wrapping_add(7).max(1);
            move || {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as f32 / u32::MAX as f32
            }
        };
        let g = (0..n * dk)
            .map(|i| {
                if i % 7 == 0 {
                    -1e-3 * rnd2()
                } else {
                    -5.0 * rnd2()
                }
            })
            .collect();
        let beta = (0..n).map(|_| rnd2()).collect();
        HeadInputs {
            n,
            dk,
            dv,
            q,
            k,
            v,
            g,
            beta,
        }
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn chunked_equals_the_recurrence_across_chunks_and_from_a_nonzero_state() {
        for (n, dk, dv, seed) in [
            (1, 4, 4, 1),
            (15, 8, 6, 2),
            (16, 8, 8, 3),
            (37, 16, 12, 4),
            (70, 32, 32, 5),
        ] {
            let x = inputs(n, dk, dv, seed);
            let s0: Vec<f32> = (0..dk * dv).map(|i| ((i as f32) * 0.37).sin()).collect();
            let (mut s_rec, mut s_chk) = (s0.clone(), s0);
            let (mut o_rec, mut o_chk) = (vec![0f32; n * dv], vec![0f32; n * dv]);
            recurrent(&x, &mut s_rec, &mut o_rec);
            chunked(&x, &mut s_chk, &mut o_chk);
            let scale = o_rec.iter().fold(1f32, |m, v| m.max(v.abs()));
            assert!(
                max_diff(&o_rec, &o_chk) <= 1e-5 * scale,
                "outputs n={n}: {}",
                max_diff(&o_rec, &o_chk)
            );
            assert!(
                max_diff(&s_rec, &s_chk) <= 1e-5 * scale,
                "state n={n}: {}",
                max_diff(&s_rec, &s_chk)
            );
        }
    }
}
