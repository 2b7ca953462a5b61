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
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<1>(w, acts, tokens, out) }
}

/// [`gemm_tile`] for rows whose two 16-weight sub-blocks of each 32 share
/// their scale and min ([`super::paired`]): their integer sums added in
/// i32 and scaled once, which halves the conversions and FMAs that cost
/// the kernel about as much as its `vpdpbusd`s.
///
/// # Safety
/// As [`gemm_tile`]; `sc[2j] == sc[2j + 1]` and `m[2j] == m[2j + 1]` in
/// every block of `w`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile_paired(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<2>(w, acts, tokens, out) }
}

/// The kernel, `S` sub-blocks (sharing their scale and min) per step.
///
/// # Safety
/// As [`gemm_tile_paired`] for `S == 2`, [`gemm_tile`] for `S == 1`.
#[inline(always)]
unsafe fn gemm<const S: usize>(
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
            for j in (0..16).step_by(S) {
                let ap = at.a.as_ptr().add(256 * j);
                let mut a = [_mm512_setzero_si512(); 8];
                for (i, a) in a.iter_mut().enumerate().take(4 * S) {
                    *a = _mm512_load_si512(ap.add(64 * i).cast());
                }
                let mut bsum = _mm512_load_ps(at.bsum.as_ptr().add(TOKENS * j));
                if S == 2 {
                    bsum =
                        _mm512_add_ps(bsum, _mm512_load_ps(at.bsum.as_ptr().add(TOKENS * (j + 1))));
                }
                for (r, inner) in inner.iter_mut().enumerate() {
                    let u = w.get_unchecked(r * nsb + s);
                    let q = u.q.as_ptr().add(16 * j).cast::<i32>();
                    let init = if S == 2 {
                        u.init[j] + u.init[j + 1]
                    } else {
                        u.init[j]
                    };
                    let mut dot = _mm512_set1_epi32(init);
                    for (i, a) in a.iter().enumerate().take(4 * S) {
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
