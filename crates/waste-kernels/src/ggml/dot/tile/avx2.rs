//! The batched micro-kernel with AVX2: as `avx512.rs` on 8 tokens per
//! register (each tile in two halves), `vpmaddubsw` + `vpmaddwd` for the
//! multiply-accumulate (the pairs fit i16: codes < 64 times `a + 128`
//! ≤ 255, twice, is under 32767).

use std::arch::x86_64::*;

use super::{ActTile, ROWS, TOKENS, Unpacked};

/// [`super::GemmTile`] with AVX2 + FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `w.len() == ROWS · acts.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm_tile(w: &[Unpacked], acts: &[ActTile], out: &mut [f32; ROWS * TOKENS]) {
    let nsb = acts.len();
    assert_eq!(w.len(), ROWS * nsb, "ROWS rows of nsb super-blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every pointer read stays inside `acts[s]` or `w[r · nsb + s]`
    // (q: 16j + 4i + 4 ≤ 256; a: 64 (4j + i) + 32h + 32 ≤ 4096; g + r < ROWS).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        // Four rows per pass: 16 ymm registers hold no more accumulators.
        for g in (0..ROWS).step_by(4) {
            for h in 0..2 {
                let mut acc = [_mm256_setzero_ps(); 4];
                for (s, at) in acts.iter().enumerate() {
                    let mut inner = [_mm256_setzero_ps(); 4];
                    for j in 0..16 {
                        let ap = at.a.as_ptr().add(256 * j + 32 * h);
                        let a = [
                            _mm256_load_si256(ap.cast()),
                            _mm256_load_si256(ap.add(64).cast()),
                            _mm256_load_si256(ap.add(128).cast()),
                            _mm256_load_si256(ap.add(192).cast()),
                        ];
                        let bsum = _mm256_load_ps(at.bsum.as_ptr().add(TOKENS * j + 8 * h));
                        for (r, inner) in inner.iter_mut().enumerate() {
                            let u = w.get_unchecked((g + r) * nsb + s);
                            let q = u.q.as_ptr().add(16 * j).cast::<i32>();
                            let mut dot = _mm256_set1_epi32(u.init[j]);
                            for (i, a) in a.iter().enumerate() {
                                let wq = _mm256_set1_epi32(q.add(i).read_unaligned());
                                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(*a, wq), ones);
                                dot = _mm256_add_epi32(dot, p);
                            }
                            *inner = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(dot),
                                _mm256_set1_ps(u.sc[j]),
                                *inner,
                            );
                            *inner = _mm256_fnmadd_ps(bsum, _mm256_set1_ps(u.m[j]), *inner);
                        }
                    }
                    let d = _mm256_load_ps(at.d.as_ptr().add(8 * h));
                    for (acc, inner) in acc.iter_mut().zip(inner) {
                        *acc = _mm256_fmadd_ps(inner, d, *acc);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add((g + r) * TOKENS + 8 * h), *acc);
                }
            }
        }
    }
}
