//! The batched micro-kernel with AVX-512 VNNI: one i32 lane per token,
//! `vpdpbusd` of four unsigned activation codes of 16 tokens (one 64-byte
//! group of [`ActTile::a`]) with four codes of one weight row broadcast,
//! [`ROWS`] rows per pass so each activation load serves them all. Per
//! row, sub-block and tile: 4 `vpdpbusd`, a conversion and two FMAs for
//! 256 products.

use std::arch::x86_64::*;

use super::{ActTile, ROWS, TOKENS, Unpacked};

/// [`super::GemmTile`] with AVX-512 F + VNNI.
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI; `w.len() == ROWS · acts.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile(
    w: &[Unpacked],
    acts: &[ActTile],
    _tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    let nsb = acts.len();
    assert_eq!(w.len(), ROWS * nsb, "ROWS rows of nsb super-blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every pointer read stays inside `acts[s]` or `w[r · nsb + s]`
    // (q: 16j + 4i + 4 ≤ 256; a: 64 (4j + i) + 64 ≤ 4096).
    unsafe {
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for (s, at) in acts.iter().enumerate() {
            let mut inner = [_mm512_setzero_ps(); ROWS];
            for j in 0..16 {
                let ap = at.a.as_ptr().add(256 * j);
                let a = [
                    _mm512_load_si512(ap.cast()),
                    _mm512_load_si512(ap.add(64).cast()),
                    _mm512_load_si512(ap.add(128).cast()),
                    _mm512_load_si512(ap.add(192).cast()),
                ];
                let bsum = _mm512_load_ps(at.bsum.as_ptr().add(TOKENS * j));
                for (r, inner) in inner.iter_mut().enumerate() {
                    let u = w.get_unchecked(r * nsb + s);
                    let q = u.q.as_ptr().add(16 * j).cast::<i32>();
                    let mut dot = _mm512_set1_epi32(u.init[j]);
                    for (i, a) in a.iter().enumerate() {
                        dot = _mm512_dpbusd_epi32(
                            dot,
                            *a,
                            _mm512_set1_epi32(q.add(i).read_unaligned()),
                        );
                    }
                    *inner =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(u.sc[j]), *inner);
                    *inner = _mm512_fnmadd_ps(bsum, _mm512_set1_ps(u.m[j]), *inner);
                }
            }
            let d = _mm512_load_ps(at.d.as_ptr());
            for (acc, inner) in acc.iter_mut().zip(inner) {
                *acc = _mm512_fmadd_ps(inner, d, *acc);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(r * TOKENS), *acc);
        }
    }
}
