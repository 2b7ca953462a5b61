//! AVX2 dot products of the lattice i-quants (IQ2_XXS, IQ2_XS, IQ3_XXS,
//! IQ3_S, IQ2_S; IQ1_S and IQ1_M, whose grid holds signed values and whose
//! shifts add a second sum) with Q8_K activation rows, and the per-type
//! grid loads the AVX-512 versions share (`avx512_iq.rs`).
//!
//! Per 32 weights, in the order of the `_ref`s (`reference.rs`):
//! - the grid magnitudes (unsigned bytes, at most 62) are loaded entry by
//!   entry into one vector of 32 bytes (eight 4-byte IQ3 entries or four
//!   8-byte IQ2 ones; `vpgatherdd`/`vpgatherdq` ran 0.65-0.9 x these scalar
//!   loads on the machine of docs/BENCH.md);
//! - the signs go onto the activations (`vpsignb`: exact, the Q8_K
//!   quantizer never writes -128) as bytes -1 / +1: four loads from
//!   [`SIGN_VECTORS`] for the types whose sign bytes come through
//!   [`KSIGNS`](super::super::grids::KSIGNS), IQ3_S's plain bits expanded
//!   by a byte shuffle and a compare ([`sign_bytes`]);
//! - `vpmaddubsw` then `vpmaddwd` by the odd sub-block scales
//!   ([`Lattice::scale_words`]; the i16 pairs stay below 2 · 62 · 127).
//!
//! A block's i32 lanes are scaled by `d · d_a` into an f32 accumulator; the
//! types' constant factors (0.125, 0.25) multiply the row's sum once, as in
//! the `_ref`s. A prefill takes the k-quants' batched micro-kernel
//! (`tile`): the same grid and sign loads unpack its rows
//! (`tile::avx2::unpack_row`) as signed values offset into unsigned codes.

// `unsafe fn` bodies are wrapped whole in one `unsafe` block (see SAFETY).
#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::super::iquants::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, Iq1Entries,
    u32_at,
};
use super::avx2::{Avx2Mac, Mac, act, hsum, lane, scales_at, wrappers};

/// 32 sign bits (bit i of byte k: weight 8k + i negative) as bytes -1 / +1
/// for `vpsignb`.
#[inline(always)]
unsafe fn sign_bytes(bits: u32) -> __m256i {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        // byte k of `bits` to bytes 8k..8k + 8 (each 128-bit lane holds all four)
        let spread = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let v = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let neg = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
        _mm256_or_si256(neg, _mm256_set1_epi8(1))
    }
}

/// Four 8-byte IQ2 (or IQ1) grid entries, `grid[at(i)]` in lane i.
#[inline(always)]
pub(crate) unsafe fn grid64x4(grid: &[u64], at: impl Fn(usize) -> usize) -> __m256i {
    let e = |i: usize| grid[at(i)] as i64;
    // SAFETY: inlined into AVX2 code.
    unsafe { _mm256_setr_epi64x(e(0), e(1), e(2), e(3)) }
}

/// Eight 4-byte IQ3 grid entries, `grid[at(i)]` in lane i.
#[inline(always)]
unsafe fn grid32x8(grid: &[u32], at: impl Fn(usize) -> usize) -> __m256i {
    let e = |i: usize| grid[at(i)] as i32;
    // SAFETY: inlined into AVX2 code.
    unsafe { _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7)) }
}

/// Adds one block's i32 lanes, times `d · d_a`, into `acc`.
#[inline(always)]
unsafe fn add_block<B>(w: &B, a: &BlockQ8K, isum: __m256i, acc: __m256) -> __m256 {
    // SAFETY: every type here has its f16 `d` at byte 0; inlined into AVX2
    // + FMA + F16C code.
    unsafe {
        _mm256_fmadd_ps(
            lane::<0>(scales_at(w, 0, a.d)),
            _mm256_cvtepi32_ps(isum),
            acc,
        )
    }
}

/// The odd integer `2s + 1` of the 4-bit scale `s` in bits 28..32.
#[inline(always)]
fn top_scale(aux: u32) -> i32 {
    2 * (aux >> 28) as i32 + 1
}

/// `2s + 1` of the nibble `n` of `b`.
#[inline(always)]
fn nibble_scale(b: u8, n: usize) -> i32 {
    2 * i32::from((b >> (4 * n)) & 0x0F) + 1
}

/// A lattice type's blocks as the shared bodies take them, by 32-weight
/// group `g < 8`.
pub(crate) trait Lattice {
    /// The constant the `_ref` multiplies the row's sum by.
    const FACTOR: f32;

    /// The eight groups of a block written out rather than looped: with
    /// `g` a constant the per-block work (IQ2_XS's scale vector) is done
    /// once and each group's byte picks are constants; LLVM keeps the loop
    /// rolled and builds them per group. On Zen 3 the IQ2 types ran 1.06
    /// (IQ2_XXS) and 1.26 x (IQ2_XS) so, the IQ3 ones 0.91-1.0 x (BENCH.md).
    const UNROLL: bool;

    /// The group's grid magnitudes, one byte a weight.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn grid(&self, g: usize) -> __m256i;

    /// The group's signs as bytes -1 / +1 for `vpsignb`.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn sign_vector(&self, g: usize) -> __m256i;

    /// The odd scales of the group's weights 0..16 (in the low 128 bits)
    /// and 16..32 (the high ones) as i16 words, the `vpmaddwd` operand.
    ///
    /// # Safety
    /// AVX2 must be enabled in the caller.
    unsafe fn scale_words(&self, g: usize) -> __m256i;
}

/// One odd scale in every i16 word.
#[inline(always)]
unsafe fn words(sc: i32) -> __m256i {
    // SAFETY: inlined into AVX2 code.
    unsafe { _mm256_set1_epi16(sc as i16) }
}

/// [`KSIGNS`](super::super::grids::KSIGNS) entry i as eight bytes -1 / +1
/// (what [`sign_bytes`] makes of it).
static SIGN_VECTORS: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let k = super::super::grids::KSIGNS[i];
        let mut v = 0u64;
        let mut j = 0;
        while j < 8 {
            let b: u64 = if (k >> j) & 1 == 1 { 0xFF } else { 0x01 };
            v |= b << (8 * j);
            j += 1;
        }
        t[i] = v;
        i += 1;
    }
    t
};

/// The sign bytes of four 8-weight entries, `at(l)` the [`KSIGNS`] index of
/// entry l: four table loads (they ran 1.1 x computing the sign bits and
/// expanding them by [`sign_bytes`]).
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
unsafe fn ksign_vector(at: impl Fn(usize) -> usize) -> __m256i {
    let e = |l: usize| SIGN_VECTORS[at(l) & 127] as i64;
    // SAFETY: inlined into AVX2 code.
    unsafe { _mm256_setr_epi64x(e(0), e(1), e(2), e(3)) }
}

impl Lattice for BlockIq2Xxs {
    const FACTOR: f32 = 0.125;
    const UNROLL: bool = true;

    #[inline(always)]
    unsafe fn grid(&self, g: usize) -> __m256i {
        let q = &self.qs[8 * g..][..4];
        // SAFETY: as the trait's.
        unsafe { grid64x4(&IQ2XXS_GRID, |i| usize::from(q[i])) }
    }

    #[inline(always)]
    unsafe fn sign_vector(&self, g: usize) -> __m256i {
        let aux = u32_at(&self.qs, 2 * g + 1) as usize;
        // SAFETY: as the trait's.
        unsafe { ksign_vector(|l| aux >> (7 * l)) }
    }

    #[inline(always)]
    unsafe fn scale_words(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { words(top_scale(u32_at(&self.qs, 2 * g + 1))) }
    }
}

/// The four little-endian u16 entries of IQ2_XS group `g`.
#[inline(always)]
fn xs_entries(w: &BlockIq2Xs, g: usize) -> u64 {
    u64::from_le_bytes(w.qs[8 * g..][..8].try_into().expect("8 bytes"))
}

/// The odd scales `2s + 1` of the 4-bit scales packed two a byte in
/// `packed` (low nibble first), made at once: byte h of the result from
/// nibble h.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
pub(crate) unsafe fn odd_scales(packed: u64) -> __m128i {
    // SAFETY: as the function's.
    unsafe {
        let b = _mm_cvtsi64_si128(packed as i64);
        let m4 = _mm_set1_epi8(0x0F);
        let n = _mm_unpacklo_epi8(
            _mm_and_si128(b, m4),
            _mm_and_si128(_mm_srli_epi16(b, 4), m4),
        );
        _mm_add_epi8(_mm_add_epi8(n, n), _mm_set1_epi8(1))
    }
}

impl Lattice for BlockIq2Xs {
    const FACTOR: f32 = 0.125;
    const UNROLL: bool = true;

    #[inline(always)]
    unsafe fn grid(&self, g: usize) -> __m256i {
        let q = xs_entries(self, g);
        // SAFETY: as the trait's.
        unsafe { grid64x4(&IQ2XS_GRID, |i| (q >> (16 * i)) as usize & 511) }
    }

    #[inline(always)]
    unsafe fn sign_vector(&self, g: usize) -> __m256i {
        let q = xs_entries(self, g);
        // SAFETY: as the trait's.
        unsafe { ksign_vector(|l| (q >> (16 * l + 9)) as usize) }
    }

    /// Group g's two scales picked from the block's [`odd_scales`] by a byte
    /// shuffle: the same work for every group, which the unrolled body
    /// does once.
    #[inline(always)]
    unsafe fn scale_words(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe {
            let both = _mm256_broadcastsi128_si256(odd_scales(u64::from_le_bytes(self.scales)));
            // byte 2g (low lane) or 2g + 1 (high lane) to every i16 word
            let (lo, hi) = (2 * g as i8, 2 * g as i8 + 1);
            let pick = _mm256_set_epi8(
                -1, hi, -1, hi, -1, hi, -1, hi, -1, hi, -1, hi, -1, hi, -1, hi, -1, lo, -1, lo, -1,
                lo, -1, lo, -1, lo, -1, lo, -1, lo, -1, lo,
            );
            _mm256_shuffle_epi8(both, pick)
        }
    }
}

impl Lattice for BlockIq3Xxs {
    const FACTOR: f32 = 0.25;
    const UNROLL: bool = false;

    #[inline(always)]
    unsafe fn grid(&self, g: usize) -> __m256i {
        let q = &self.qs[8 * g..][..8];
        // SAFETY: as the trait's.
        unsafe { grid32x8(&IQ3XXS_GRID, |i| usize::from(q[i])) }
    }

    #[inline(always)]
    unsafe fn sign_vector(&self, g: usize) -> __m256i {
        let aux = u32_at(&self.scales_and_signs, g) as usize;
        // SAFETY: as the trait's.
        unsafe { ksign_vector(|l| aux >> (7 * l)) }
    }

    #[inline(always)]
    unsafe fn scale_words(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { words(top_scale(u32_at(&self.scales_and_signs, g))) }
    }
}

impl Lattice for BlockIq3S {
    const FACTOR: f32 = 1.0;
    const UNROLL: bool = false;

    #[inline(always)]
    unsafe fn grid(&self, g: usize) -> __m256i {
        let (q, qh) = (&self.qs[8 * g..][..8], usize::from(self.qh[g]));
        // entry i's ninth index bit is bit i of its `qh` byte
        let at = |i: usize| usize::from(q[i]) | (qh << (8 - i)) & 0x100;
        // SAFETY: as the trait's.
        unsafe { grid32x8(&IQ3S_GRID, at) }
    }

    #[inline(always)]
    unsafe fn sign_vector(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { sign_bytes(u32_at(&self.signs, g)) }
    }

    #[inline(always)]
    unsafe fn scale_words(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { words(nibble_scale(self.scales[g / 2], g % 2)) }
    }
}

impl Lattice for BlockIq2S {
    const FACTOR: f32 = 0.125;
    const UNROLL: bool = false;

    #[inline(always)]
    unsafe fn grid(&self, g: usize) -> __m256i {
        let (q, qh) = (&self.qs[4 * g..][..4], usize::from(self.qh[g]));
        // entry i's index bits 8 and 9 are bits 2i, 2i + 1 of its `qh` byte
        let at = |i: usize| usize::from(q[i]) | (qh << (8 - 2 * i)) & 0x300;
        // SAFETY: as the trait's.
        unsafe { grid64x4(&IQ2S_GRID, at) }
    }

    #[inline(always)]
    unsafe fn sign_vector(&self, g: usize) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { sign_bytes(u32_at(&self.signs, g)) }
    }

    #[inline(always)]
    unsafe fn scale_words(&self, g: usize) -> __m256i {
        let (lo, hi) = (
            nibble_scale(self.scales[g], 0),
            nibble_scale(self.scales[g], 1),
        );
        // SAFETY: as the trait's.
        unsafe { _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16)) }
    }
}

/// A lattice type's row · Q8_K.
#[inline(always)]
pub(crate) unsafe fn lattice<B: Lattice>(w: &[B], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX2 code; `w` and `a` are whole
    // blocks, every load inside one.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            let mut isum = _mm256_setzero_si256();
            macro_rules! group {
                ($($g:expr)*) => {$({
                    let x = _mm256_sign_epi8(act(a, $g), w.sign_vector($g));
                    let p = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(w.grid($g), x),
                        w.scale_words($g),
                    );
                    isum = _mm256_add_epi32(isum, p);
                })*};
            }
            if B::UNROLL {
                group!(0 1 2 3 4 5 6 7);
            } else {
                for g in 0..8 {
                    group!(g);
                }
            }
            acc = add_block(w, a, isum, acc);
        }
        B::FACTOR * hsum(acc)
    }
}

/// IQ1_S · Q8_K, as [`vec_dot_iq1_s_q8k_ref`](super::reference::vec_dot_iq1_s_q8k_ref):
/// per 32 weights the four 8-byte grid entries (values -1, 0, 1) loaded as
/// one vector, multiplied through the sign trick (`|g|` against `a` with
/// `g`'s sign, 0 where `g` is) and scaled by `2s + 1` in [`Mac::dot_scaled`];
/// the shifts' `(2s + 1)·δ·Σ a` from `bsums`, in scalar code beside.
#[inline(always)]
pub(crate) unsafe fn iq1_s<M: Mac>(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX2 code; `w` and `a` are whole
    // blocks, every load inside one.
    unsafe {
        let (mut acc, mut shifted) = (_mm256_setzero_ps(), 0f32);
        for (w, a) in w.iter().zip(a) {
            let (mut isum, mut shifts) = (_mm256_setzero_si256(), 0i32);
            for g in 0..8 {
                let grid = grid64x4(&IQ1S_GRID, |l| w.grid_index(4 * g + l));
                let ls = w.odd_scale(2 * g);
                let p = M::dot_scaled(
                    _mm256_abs_epi8(grid),
                    _mm256_sign_epi8(act(a, g), grid),
                    ls,
                    ls,
                );
                isum = _mm256_add_epi32(isum, p);
                // the group's four entries shift alike
                let delta = if w.shifts_down(4 * g) { -ls } else { ls };
                shifts += delta * (i32::from(a.bsums[2 * g]) + i32::from(a.bsums[2 * g + 1]));
            }
            let dd = w.d_scale() * a.d;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
            shifted += dd * (0.125 * shifts as f32);
        }
        hsum(acc) + shifted
    }
}

/// IQ1_M · Q8_K, as [`vec_dot_iq1_m_q8k_ref`](super::reference::vec_dot_iq1_m_q8k_ref):
/// as [`iq1_s`], with a scale per 16 weights (the two halves of a group's
/// vector by [`Mac::dot_scaled`]) and a shift sign per 8, whose `δ·Σ a` is
/// a second product: bytes ±1 against the activations.
#[inline(always)]
pub(crate) unsafe fn iq1_m<M: Mac>(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into the wrappers' AVX2 code; `w` and `a` are whole
    // blocks, every load inside one.
    unsafe {
        let (mut acc, mut shifted) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (w, a) in w.iter().zip(a) {
            let (mut isum, mut shifts) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for g in 0..8 {
                let grid = grid64x4(&IQ1S_GRID, |l| w.grid_index(4 * g + l));
                let (lo, hi) = (w.odd_scale(2 * g), w.odd_scale(2 * g + 1));
                let x = act(a, g);
                let p = M::dot_scaled(_mm256_abs_epi8(grid), _mm256_sign_epi8(x, grid), lo, hi);
                isum = _mm256_add_epi32(isum, p);
                let sign = |l: usize| {
                    if w.shifts_down(4 * g + l) {
                        -1i64
                    } else {
                        0x0101_0101_0101_0101
                    }
                };
                let delta = _mm256_setr_epi64x(sign(0), sign(1), sign(2), sign(3));
                let ones = _mm256_set1_epi8(1);
                let q = M::dot_scaled(ones, _mm256_sign_epi8(x, delta), lo, hi);
                shifts = _mm256_add_epi32(shifts, q);
            }
            let dd = _mm256_set1_ps(w.d_scale() * a.d);
            acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc);
            shifted = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(shifts), shifted);
        }
        hsum(acc) + 0.125 * hsum(shifted)
    }
}

wrappers! {"avx2,fma,f16c", Avx2Mac;
    iq1_s_q8k = iq1_s(BlockIq1S, BlockQ8K);
    iq1_m_q8k = iq1_m(BlockIq1M, BlockQ8K);
}

wrappers! {"avx2,fma,f16c";
    iq2_xxs_q8k = lattice(BlockIq2Xxs, BlockQ8K);
    iq2_xs_q8k = lattice(BlockIq2Xs, BlockQ8K);
    iq3_xxs_q8k = lattice(BlockIq3Xxs, BlockQ8K);
    iq3_s_q8k = lattice(BlockIq3S, BlockQ8K);
    iq2_s_q8k = lattice(BlockIq2S, BlockQ8K);
}
