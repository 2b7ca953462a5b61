//! AVX2 forward pass of the `q3-tcq` Viterbi: the 64 path costs live in
//! eight vectors; per step every vector of new states pulls its two
//! predecessors' costs and its branches' subset errors with lane permutes.
//! The same f32 operations as `Search::forward_ref` in the same order (no
//! FMA) and the same tie rule, so back pointers and the final state are
//! bit for bit the scalar ones.

use std::arch::x86_64::*;

use super::viterbi::{PULL, Search, best_state};
use super::{LEVELS_3, LEVELS_4, STATES};

/// Vectors of 8 states.
const V: usize = STATES / 8;

/// # Safety
/// The CPU must support AVX2; `s.x`, `s.d`, `s.wide` have one length and
/// `back` at least that many entries.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn forward(s: &Search<'_>, back: &mut [u64]) -> u32 {
    let levels = |l: &[i8]| -> __m256 {
        let f: [f32; 8] = std::array::from_fn(|i| f32::from(l[i]));
        // SAFETY: `f` holds 8 f32.
        unsafe { _mm256_loadu_ps(f.as_ptr()) }
    };
    let l3 = [levels(&LEVELS_3[..8]), levels(&LEVELS_3[8..])];
    let l4 = [
        levels(&LEVELS_4[..8]),
        levels(&LEVELS_4[8..16]),
        levels(&LEVELS_4[16..24]),
        levels(&LEVELS_4[24..]),
    ];
    let lanes = |f: &dyn Fn(usize) -> i32| -> __m256i {
        let a: [i32; 8] = std::array::from_fn(f);
        // SAFETY: `a` holds 8 i32.
        unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
    };
    // New states 8v..8v+8 come from states 4v..4v+4 (each twice): lanes
    // 0..4 of vector v/2 for even v, lanes 4..8 for odd v.
    let pred = [lanes(&|l| (l / 2) as i32), lanes(&|l| (4 + l / 2) as i32)];
    let pull0: [__m256i; V] = std::array::from_fn(|v| lanes(&|l| i32::from(PULL[8 * v + l][0])));
    let pull1: [__m256i; V] = std::array::from_fn(|v| lanes(&|l| i32::from(PULL[8 * v + l][1])));
    let swap_halves = lanes(&|l| ((l + 4) % 8) as i32);

    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut cost = [inf; V];
    cost[0] = _mm256_blend_ps::<1>(inf, _mm256_setzero_ps());
    for (t, slot) in back[..s.x.len()].iter_mut().enumerate() {
        let e = if t < s.live {
            let (xv, dv) = (_mm256_set1_ps(s.x[t]), _mm256_set1_ps(s.d[t]));
            let sq = |l: __m256| {
                let v = _mm256_sub_ps(xv, _mm256_mul_ps(dv, l));
                _mm256_mul_ps(v, v)
            };
            // Lane i of every level vector is a level of subset i % 4.
            let m = if s.wide[t] {
                _mm256_min_ps(
                    _mm256_min_ps(sq(l4[0]), sq(l4[1])),
                    _mm256_min_ps(sq(l4[2]), sq(l4[3])),
                )
            } else {
                _mm256_min_ps(sq(l3[0]), sq(l3[1]))
            };
            _mm256_min_ps(m, _mm256_permutevar8x32_ps(m, swap_halves))
        } else {
            _mm256_setzero_ps()
        };
        let mut next = [inf; V];
        let mut bits = 0u64;
        for (v, n) in next.iter_mut().enumerate() {
            let idx = pred[v % 2];
            let c0 = _mm256_add_ps(
                _mm256_permutevar8x32_ps(cost[v / 2], idx),
                _mm256_permutevar8x32_ps(e, pull0[v]),
            );
            let c1 = _mm256_add_ps(
                _mm256_permutevar8x32_ps(cost[v / 2 + V / 2], idx),
                _mm256_permutevar8x32_ps(e, pull1[v]),
            );
            let lt = _mm256_cmp_ps::<_CMP_LT_OQ>(c1, c0);
            *n = _mm256_blendv_ps(c0, c1, lt);
            bits |= u64::from(_mm256_movemask_ps(lt) as u32) << (8 * v);
        }
        *slot = bits;
        cost = next;
    }
    let mut out = [0f32; STATES];
    for (o, c) in out.chunks_exact_mut(8).zip(&cost) {
        // SAFETY: each chunk holds 8 f32.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *c) };
    }
    best_state(&out)
}
