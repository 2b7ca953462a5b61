//! AVX-512 dot products of the lattice i-quants (IQ2_XXS, IQ2_XS, IQ3_XXS,
//! IQ3_S) with Q8_K activation rows: the AVX2 bodies' arithmetic
//! (`avx2_iq.rs`) on 512-bit vectors, two 32-weight groups at a time.
//!
//! Per 64 weights: the two groups' grid magnitudes as the AVX2 bodies
//! load them ([`Lattice::grid`]), joined; the 64 sign bits, which in
//! weight order are exactly an AVX-512 byte mask, negate the activations
//! with one masked subtract (no sign vector to build); `vpmaddubsw`; then
//! the groups' odd scales, as i16 words per 128-bit lane, applied and
//! summed by [`Acc512`] (`vpdpwssd` with VNNI, `vpmaddwd` + add without).
//! `vpdpbusd` would skip `vpmaddubsw` but leave the scales to a `vpmulld`
//! per 64 weights.

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::iquants::{BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs};
use super::avx2::{scales_at, wrappers};
use super::avx2_iq::Lattice;
use super::avx512::{Acc512, BwAcc, VnniAcc, act64, join};

/// Scales as i16 words, `s[q]` in every word of 128-bit lane q.
#[inline(always)]
unsafe fn lane_scales(s: [i32; 4]) -> __m512i {
    let w = s.map(|s| s * 0x1_0001);
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let v = _mm512_castsi128_si512(_mm_setr_epi32(w[0], w[1], w[2], w[3]));
        let at = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        _mm512_permutexvar_epi32(at, v)
    }
}

/// A lattice type's row · Q8_K.
#[inline(always)]
unsafe fn pairs<A: Acc512>(w: &[impl Lattice], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX-512 code; `w` and `a` are
    // whole blocks, every load inside one.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            let mut isum = _mm512_setzero_si512();
            for k in 0..4 {
                let grid = join(w.grid(2 * k), w.grid(2 * k + 1));
                let signs = u64::from(w.signs(2 * k)) | u64::from(w.signs(2 * k + 1)) << 32;
                let ((s0, s1), (s2, s3)) = (w.scales(2 * k), w.scales(2 * k + 1));
                let sc = [s0, s1, s2, s3];
                let x = act64(a, k);
                let x = _mm512_mask_sub_epi8(x, signs, _mm512_setzero_si512(), x);
                isum = A::madd_acc(isum, _mm512_maddubs_epi16(grid, x), lane_scales(sc));
            }
            let d = _mm512_broadcastss_ps(scales_at(w, 0, a.d));
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc);
        }
        factor_of(w) * _mm512_reduce_add_ps(acc)
    }
}

/// The [`Lattice::FACTOR`] of a row's type.
fn factor_of<B: Lattice>(_: &[B]) -> f32 {
    B::FACTOR
}

wrappers! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c", BwAcc;
    iq2_xxs_bw = pairs(BlockIq2Xxs, BlockQ8K);
    iq2_xs_bw = pairs(BlockIq2Xs, BlockQ8K);
    iq3_xxs_bw = pairs(BlockIq3Xxs, BlockQ8K);
    iq3_s_bw = pairs(BlockIq3S, BlockQ8K);
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", VnniAcc;
    iq2_xxs_vnni = pairs(BlockIq2Xxs, BlockQ8K);
    iq2_xs_vnni = pairs(BlockIq2Xs, BlockQ8K);
    iq3_xxs_vnni = pairs(BlockIq3Xxs, BlockQ8K);
    iq3_s_vnni = pairs(BlockIq3S, BlockQ8K);
}
