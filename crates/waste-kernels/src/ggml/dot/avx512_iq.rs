//! AVX-512 dot products of IQ3_XXS and IQ3_S with Q8_K activation rows:
//! the AVX2 bodies' arithmetic (`avx2_iq.rs`) on 512-bit vectors, two
//! 32-weight groups at a time.
//!
//! Per 64 weights: the two groups' grid magnitudes as the AVX2 bodies
//! load them ([`Lattice::grid`]), joined; the 64 sign bits, which in
//! weight order are exactly an AVX-512 byte mask, negate the activations
//! with one masked subtract (no sign vector to build); `vpmaddubsw`; then
//! the groups' odd scales, as i16 words per 128-bit lane, applied and
//! summed by [`Acc512`] (`vpdpwssd` with VNNI, `vpmaddwd` + add without).
//! `vpdpbusd` would skip `vpmaddubsw` but leave the scales to a `vpmulld`
//! per 64 weights.
//!
//! IQ2_XXS and IQ2_XS take the AVX2 kernels in the AVX-512 tables: with
//! half as many grid loads per weight, their sign bits dominate, and the
//! mask (from [`ksigns8`]) ran 0.8-0.9 x the AVX2 bodies' sign table.

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::iquants::{BlockIq3S, BlockIq3Xxs, u32_at};
use super::avx2::{scales_at, wrappers};
use super::avx2_iq::{Lattice, nibble_scale, top_scale};
use super::avx512::{Acc512, BwAcc, VnniAcc, act64, join};

/// A lattice type with one scale per 32-weight group, whose sign bits the
/// 512-bit bodies take as a mask.
trait Masked: Lattice {
    /// Group `g`'s 32 sign bits (bit i of byte k: weight 8k + i negative).
    fn sign_bits(&self, g: usize) -> u32;

    /// Group `g`'s odd scale.
    fn scale(&self, g: usize) -> i32;
}

impl Masked for BlockIq3Xxs {
    #[inline(always)]
    fn sign_bits(&self, g: usize) -> u32 {
        ksigns8(u64::from(ksign_indices(u32_at(&self.scales_and_signs, g)))) as u32
    }

    #[inline(always)]
    fn scale(&self, g: usize) -> i32 {
        top_scale(u32_at(&self.scales_and_signs, g))
    }
}

impl Masked for BlockIq3S {
    #[inline(always)]
    fn sign_bits(&self, g: usize) -> u32 {
        u32_at(&self.signs, g)
    }

    #[inline(always)]
    fn scale(&self, g: usize) -> i32 {
        nibble_scale(self.scales[g / 2], g % 2)
    }
}

/// The four 7-bit [`KSIGNS`] indices at bits 0, 7, 14 and 21 of an
/// IQ3_XXS sign word, one per byte.
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
fn ksign_indices(aux: u32) -> u32 {
    (aux & 0x7F) | (aux << 1) & 0x7F00 | (aux << 2) & 0x7F_0000 | (aux << 3) & 0x7F00_0000
}

/// [`KSIGNS`] of each byte of `idx` (7-bit indices): the index with the
/// parity of its bits in bit 7, eight at a time.
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
fn ksigns8(idx: u64) -> u64 {
    // Folding by 4, 2, 1 leaves each byte's parity in its bit 0; the bits
    // shifted in from the next byte only reach bits 1..8.
    let mut p = idx ^ idx >> 4;
    p ^= p >> 2;
    p ^= p >> 1;
    idx | (p & 0x0101_0101_0101_0101) << 7
}

/// Two scales as i16 words, `lo` in the low 256 bits and `hi` above.
#[inline(always)]
unsafe fn half_scales(lo: i32, hi: i32) -> __m512i {
    let (lo, hi) = (lo * 0x1_0001, hi * 0x1_0001);
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let v = _mm512_castsi128_si512(_mm_setr_epi32(lo, hi, 0, 0));
        let at = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        _mm512_permutexvar_epi32(at, v)
    }
}

/// A lattice type's row · Q8_K.
#[inline(always)]
unsafe fn pairs<A: Acc512>(w: &[impl Masked], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX-512 code; `w` and `a` are
    // whole blocks, every load inside one.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            let mut isum = _mm512_setzero_si512();
            for k in 0..4 {
                let grid = join(w.grid(2 * k), w.grid(2 * k + 1));
                let signs = u64::from(w.sign_bits(2 * k)) | u64::from(w.sign_bits(2 * k + 1)) << 32;
                let sc = half_scales(w.scale(2 * k), w.scale(2 * k + 1));
                let x = act64(a, k);
                let x = _mm512_mask_sub_epi8(x, signs, _mm512_setzero_si512(), x);
                isum = A::madd_acc(isum, _mm512_maddubs_epi16(grid, x), sc);
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
    iq3_xxs_bw = pairs(BlockIq3Xxs, BlockQ8K);
    iq3_s_bw = pairs(BlockIq3S, BlockQ8K);
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", VnniAcc;
    iq3_xxs_vnni = pairs(BlockIq3Xxs, BlockQ8K);
    iq3_s_vnni = pairs(BlockIq3S, BlockQ8K);
}

#[cfg(test)]
mod tests {
    use super::super::super::grids::KSIGNS;
    use super::*;

    #[test]
    fn eight_at_a_time_ksigns_is_the_table_for_every_index() {
        for i in 0..128u64 {
            // the index in every byte position, the others holding other indices
            for at in 0..8 {
                let others = 0x7F_3A_01_55_00_66_2B_7Eu64 & !(0xFF << (8 * at));
                let got = ksigns8(others | i << (8 * at));
                assert_eq!(
                    (got >> (8 * at)) as u8,
                    KSIGNS[i as usize],
                    "index {i} at {at}"
                );
            }
        }
    }

    #[test]
    fn sign_index_fields_are_the_refs_bit_fields() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let aux = (s >> 16) as u32;
            let got = ksign_indices(aux).to_le_bytes();
            for (l, &g) in got.iter().enumerate() {
                assert_eq!(u32::from(g), (aux >> (7 * l)) & 127);
            }
        }
    }
}
