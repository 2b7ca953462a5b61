//! AVX-512 dot products of the lattice i-quants (IQ2_XXS, IQ2_XS, IQ3_XXS,
//! IQ3_S) with Q8_K activation rows: the AVX2 bodies' arithmetic
//! (`avx2_iq.rs`) on 512-bit vectors, two 32-weight groups at a time.
//!
//! Per 64 weights: one gather of grid magnitudes (16 IQ3 entries by
//! `vpgatherdd`, 8 IQ2 ones by `vpgatherdq`); the 64 sign bits, which in
//! weight order are exactly an AVX-512 byte mask, negate the activations
//! with one masked subtract (no sign vector to build); `vpmaddubsw`; then
//! the groups' odd scales, as i16 words per 128-bit lane, applied and
//! summed by [`Acc512`] (`vpdpwssd` with VNNI, `vpmaddwd` + add without).
//! `vpdpbusd` would skip `vpmaddubsw` but leave the scales to a `vpmulld`
//! per 64 weights.

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::grids::{IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::super::iquants::{BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, u32_at};
use super::avx2::{scales_at, wrappers};
use super::avx2_iq::{Lattice, ksign_indices, ksign_indices_xs, ksigns8, nibble_scale, top_scale};
use super::avx512::{Acc512, BwAcc, VnniAcc, act64};

/// A lattice type's blocks in pairs of 32-weight groups.
pub(crate) trait Pairs: Lattice {
    /// Groups 2k and 2k + 1: the grid magnitudes, the 64 sign bits (bit i:
    /// weight i negative), and the odd scales of the four 16-weight
    /// quarters.
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller; `k < 4`.
    unsafe fn pair(&self, k: usize) -> (__m512i, u64, [i32; 4]);
}

/// The u64 of two little-endian u32 words `k` and `k + 1` of `b`.
#[inline(always)]
fn u64_at(b: &[u8], k: usize) -> u64 {
    u64::from(u32_at(b, k)) | u64::from(u32_at(b, k + 1)) << 32
}

/// The [`KSIGNS`](super::super::grids::KSIGNS) bytes of two sign words.
#[inline(always)]
fn ksigns_of_pair(aux0: u32, aux1: u32) -> u64 {
    ksigns8(u64::from(ksign_indices(aux0)) | u64::from(ksign_indices(aux1)) << 32)
}

impl Pairs for BlockIq2Xxs {
    #[inline(always)]
    unsafe fn pair(&self, k: usize) -> (__m512i, u64, [i32; 4]) {
        let (aux0, aux1) = (u32_at(&self.qs, 4 * k + 1), u32_at(&self.qs, 4 * k + 3));
        let idx = u64::from(u32_at(&self.qs, 4 * k)) | u64::from(u32_at(&self.qs, 4 * k + 2)) << 32;
        let (s0, s1) = (top_scale(aux0), top_scale(aux1));
        // SAFETY: 8-bit indices into 256 entries; AVX-512 code.
        let grid = unsafe {
            let idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(idx as i64));
            _mm512_i32gather_epi64::<8>(idx, IQ2XXS_GRID.as_ptr().cast())
        };
        (grid, ksigns_of_pair(aux0, aux1), [s0, s0, s1, s1])
    }
}

impl Pairs for BlockIq2Xs {
    #[inline(always)]
    unsafe fn pair(&self, k: usize) -> (__m512i, u64, [i32; 4]) {
        let (q0, q1) = (u64_at(&self.qs, 4 * k), u64_at(&self.qs, 4 * k + 2));
        let signs =
            ksigns8(u64::from(ksign_indices_xs(q0)) | u64::from(ksign_indices_xs(q1)) << 32);
        let (b0, b1) = (self.scales[2 * k], self.scales[2 * k + 1]);
        let sc = [(b0, 0), (b0, 1), (b1, 0), (b1, 1)].map(|(b, n)| nibble_scale(b, n));
        // SAFETY: 16 bytes at 16k < 64; 9-bit indices into 512 entries;
        // AVX-512 code.
        let grid = unsafe {
            let q = _mm_loadu_si128(self.qs.as_ptr().add(16 * k).cast());
            let idx = _mm256_and_si256(_mm256_cvtepu16_epi32(q), _mm256_set1_epi32(511));
            _mm512_i32gather_epi64::<8>(idx, IQ2XS_GRID.as_ptr().cast())
        };
        (grid, signs, sc)
    }
}

impl Pairs for BlockIq3Xxs {
    #[inline(always)]
    unsafe fn pair(&self, k: usize) -> (__m512i, u64, [i32; 4]) {
        let (aux0, aux1) = (
            u32_at(&self.scales_and_signs, 2 * k),
            u32_at(&self.scales_and_signs, 2 * k + 1),
        );
        let (s0, s1) = (top_scale(aux0), top_scale(aux1));
        // SAFETY: 16 bytes at 16k < 64; 8-bit indices into 256 entries;
        // AVX-512 code.
        let grid = unsafe {
            let idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(self.qs.as_ptr().add(16 * k).cast()));
            _mm512_i32gather_epi32::<4>(idx, IQ3XXS_GRID.as_ptr().cast())
        };
        (grid, ksigns_of_pair(aux0, aux1), [s0, s0, s1, s1])
    }
}

impl Pairs for BlockIq3S {
    #[inline(always)]
    unsafe fn pair(&self, k: usize) -> (__m512i, u64, [i32; 4]) {
        let (s0, s1) = (
            nibble_scale(self.scales[k], 0),
            nibble_scale(self.scales[k], 1),
        );
        let qh = u16::from_le_bytes([self.qh[2 * k], self.qh[2 * k + 1]]);
        // SAFETY: 16 bytes at 16k < 64; 9-bit indices into 512 entries;
        // AVX-512 code.
        let grid = unsafe {
            let low = _mm512_cvtepu8_epi32(_mm_loadu_si128(self.qs.as_ptr().add(16 * k).cast()));
            // entry l's ninth index bit, bit l of `qh`, to bit 8
            let at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let high = _mm512_srlv_epi32(_mm512_set1_epi32(i32::from(qh) << 8), at);
            let idx = _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi32(0x100)));
            _mm512_i32gather_epi32::<4>(idx, IQ3S_GRID.as_ptr().cast())
        };
        (grid, u64_at(&self.signs, 2 * k), [s0, s0, s1, s1])
    }
}

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
unsafe fn pairs<A: Acc512>(w: &[impl Pairs], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX-512 code; `w` and `a` are
    // whole blocks, every load inside one.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            let mut isum = _mm512_setzero_si512();
            for k in 0..4 {
                let (grid, signs, sc) = w.pair(k);
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
