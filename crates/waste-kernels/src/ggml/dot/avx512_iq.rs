//! AVX-512 dot products of the lattice i-quants (IQ2_XXS, IQ2_XS,
//! IQ3_XXS, IQ3_S) with Q8_K activation rows: the AVX2 bodies' arithmetic
//! (`avx2_iq.rs`) on 512-bit vectors, two 32-weight groups at a time.
//!
//! Per 64 weights:
//! - the grid magnitudes: IQ3_XXS's 256-entry grid is held in 16 registers
//!   and looked up by `vpermt2d` and blends ([`lookup`]: 1.2-1.3 x the
//!   AVX2 bodies' scalar loads); the others take those loads, joined (the
//!   IQ2 entries are 8 bytes; the same lookup over IQ3_S's 512 entries ran
//!   0.7 x);
//! - the 64 sign bits, which in weight order are exactly an AVX-512 byte
//!   mask, negate the activations with one masked subtract; the whole
//!   block's [`KSIGNS`](super::super::grids::KSIGNS) bytes are made at
//!   once on vectors ([`Masked::block_signs`]; made per group in scalar
//!   code they cost IQ2_XXS and IQ2_XS so much that the AVX2 bodies'
//!   sign table won);
//! - `vpmaddubsw`, then the groups' odd scales, as i16 words picked from
//!   the block's scales made once, applied and summed by [`Acc512`]
//!   (`vpdpwssd` with VNNI, `vpmaddwd` + add without). `vpdpbusd` would
//!   skip `vpmaddubsw` but leave the scales to a `vpmulld` per 64 weights.

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::grids::IQ3XXS_GRID;
use super::super::iquants::{BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs};
use super::avx2::{scales_at, wrappers};
use super::avx2_iq::{Lattice, odd_scales};
use super::avx512::{Acc512, BwAcc, VnniAcc, act64, join};

/// A lattice type as the 512-bit bodies take it, by block and by pair of
/// 32-weight groups.
trait Masked: Lattice {
    /// The block's 256 sign bits, 64 a pair of groups (bit i of word k:
    /// weight 64k + i negative).
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    unsafe fn block_signs(&self) -> [u64; 4];

    /// Groups 2k and 2k + 1's odd scales as i16 words, weights 16q..16q
    /// + 16 of the pair's in 128-bit lane q.
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    unsafe fn pair_scales(&self, k: usize) -> __m512i;

    /// Groups 2k and 2k + 1's grid magnitudes.
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    #[inline(always)]
    unsafe fn grid_pair(&self, k: usize) -> __m512i {
        // SAFETY: as the trait's.
        unsafe { join(self.grid(2 * k), self.grid(2 * k + 1)) }
    }
}

/// The 16 entries of a 4-byte grid at the indices (below `grid.len()`) in
/// the i32 lanes of `idx`, looked up in registers: `vpermt2d` over each 32
/// entries, then blends by the index's higher bits.
#[inline(always)]
unsafe fn lookup<const N: usize>(grid: &[u32; N], idx: __m512i) -> __m512i {
    const { assert!(N.is_multiple_of(32) && N <= 512) };
    // SAFETY: the loads cover the N entries 16 at a time; inlined into
    // AVX-512 code.
    unsafe {
        let t = |i: usize| _mm512_loadu_si512(grid.as_ptr().add(16 * i).cast());
        let mut r = [_mm512_setzero_si512(); 16];
        for (j, r) in r.iter_mut().enumerate().take(N / 32) {
            *r = _mm512_permutex2var_epi32(t(2 * j), idx, t(2 * j + 1));
        }
        let mut n = N / 32;
        let mut bit = 5;
        while n > 1 {
            let k = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(1 << bit));
            for j in 0..n / 2 {
                r[j] = _mm512_mask_blend_epi32(k, r[2 * j], r[2 * j + 1]);
            }
            n /= 2;
            bit += 1;
        }
        r[0]
    }
}

/// The [`KSIGNS`] bytes of eight sign words (`aux`, four 7-bit indices
/// each at bits 7l) made at once: each word's indices spread to its four
/// bytes, then [`ksigns32`]: the parity of each byte's bits into its bit 7
/// (folding by 4, 2, 1 leaves it in bit 0; bits shifted in from the next
/// byte only reach bits 1..8).
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
unsafe fn ksign_bytes(aux: __m256i) -> [u64; 4] {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let field = |n: i32, m: i32| {
            _mm256_and_si256(
                _mm256_sllv_epi32(aux, _mm256_set1_epi32(n)),
                _mm256_set1_epi32(m),
            )
        };
        ksigns32(_mm256_or_si256(
            _mm256_or_si256(field(0, 0x7F), field(1, 0x7F00)),
            _mm256_or_si256(field(2, 0x7F_0000), field(3, 0x7F00_0000)),
        ))
    }
}

/// [`KSIGNS`] of each byte of `idx` (7-bit indices).
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
unsafe fn ksigns32(idx: __m256i) -> [u64; 4] {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let mut p = _mm256_xor_si256(idx, _mm256_srli_epi16(idx, 4));
        p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 2));
        p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 1));
        let parity = _mm256_slli_epi16(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7);
        std::mem::transmute::<__m256i, [u64; 4]>(_mm256_or_si256(idx, parity))
    }
}

/// The eight sign-and-scale words of an IQ2_XXS block (its odd u32s).
#[inline(always)]
unsafe fn iq2_xxs_aux(w: &BlockIq2Xxs) -> __m256i {
    // SAFETY: the 64 bytes of `qs`; inlined into AVX-512 code.
    unsafe {
        let qs = _mm512_loadu_si512(w.qs.as_ptr().cast());
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
        _mm512_castsi512_si256(_mm512_permutexvar_epi32(odd, qs))
    }
}

/// Pair k's scales from eight words with a 4-bit scale `s` in bits
/// 28..32 each: `2s + 1` of word 2k in the low 256 bits, of 2k + 1 above.
/// The same odd scales for every pair, which the unrolled body makes once.
#[inline(always)]
unsafe fn top_scales(aux: __m256i, k: usize) -> __m512i {
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let s = _mm256_srli_epi32(aux, 28);
        let odd = _mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1));
        let words = _mm512_castsi256_si512(_mm256_or_si256(odd, _mm256_slli_epi32(odd, 16)));
        let (lo, hi) = (2 * k as i32, 2 * k as i32 + 1);
        let at = _mm512_setr_epi32(
            lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi,
        );
        _mm512_permutexvar_epi32(at, words)
    }
}

impl Masked for BlockIq2Xxs {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: as the trait's.
        unsafe { ksign_bytes(iq2_xxs_aux(self)) }
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        // SAFETY: as the trait's.
        unsafe { top_scales(iq2_xxs_aux(self), k) }
    }
}

impl Masked for BlockIq2Xs {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: the 64 bytes of `qs`; AVX-512 code.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr().cast());
            ksigns32(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)))
        }
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        let at = [0, 1, 2, 3].map(|q| (4 * k + q) as u8);
        // SAFETY: as the trait's.
        unsafe { pick_scales(odd_scales(u64::from_le_bytes(self.scales)), at) }
    }
}

impl Masked for BlockIq3Xxs {
    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        // SAFETY: the 32 bytes of `scales_and_signs`; as the trait's.
        unsafe { top_scales(_mm256_loadu_si256(self.scales_and_signs.as_ptr().cast()), k) }
    }

    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: the 32 bytes of `scales_and_signs`; AVX2 code.
        unsafe { ksign_bytes(_mm256_loadu_si256(self.scales_and_signs.as_ptr().cast())) }
    }

    #[inline(always)]
    unsafe fn grid_pair(&self, k: usize) -> __m512i {
        // SAFETY: 16 bytes at 16k < 64; inlined into AVX-512 code.
        unsafe {
            let q = _mm_loadu_si128(self.qs.as_ptr().add(16 * k).cast());
            lookup(&IQ3XXS_GRID, _mm512_cvtepu8_epi32(q))
        }
    }
}

impl Masked for BlockIq3S {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        bytemuck::cast(self.signs)
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        let odd = |n: u8| [n, n, n + 1, n + 1];
        // SAFETY: as the trait's.
        unsafe {
            pick_scales(
                odd_scales(u64::from(u32::from_le_bytes(self.scales))),
                odd(2 * k as u8),
            )
        }
    }
}

/// Bytes `at[q]` of `odd` (odd scales, one a byte) in every i16 word of
/// 128-bit lane q: the same odd scales for every pair, which the unrolled
/// body makes once.
#[inline(always)]
unsafe fn pick_scales(odd: __m128i, at: [u8; 4]) -> __m512i {
    // 0xFF in the high byte: zero
    let b = |q: usize| ((0xFF00 | u64::from(at[q])) * 0x0001_0001_0001_0001) as i64;
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let pick = _mm512_setr_epi64(b(0), b(0), b(1), b(1), b(2), b(2), b(3), b(3));
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(odd), pick)
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
            for (k, signs) in w.block_signs().into_iter().enumerate() {
                let grid = w.grid_pair(k);
                let sc = w.pair_scales(k);
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
    iq2_xxs_bw = pairs(BlockIq2Xxs, BlockQ8K);
    iq2_xs_bw = pairs(BlockIq2Xs, BlockQ8K);
    iq3_s_bw = pairs(BlockIq3S, BlockQ8K);
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", VnniAcc;
    iq3_xxs_vnni = pairs(BlockIq3Xxs, BlockQ8K);
    iq2_xxs_vnni = pairs(BlockIq2Xxs, BlockQ8K);
    iq2_xs_vnni = pairs(BlockIq2Xs, BlockQ8K);
    iq3_s_vnni = pairs(BlockIq3S, BlockQ8K);
}

#[cfg(test)]
mod tests {
    use super::super::super::grids::KSIGNS;
    use super::super::super::iquants::u32_at;
    use super::*;

    #[test]
    fn iq3_xxs_sign_words_give_the_ksigns_bytes() {
        if !crate::quant::Isa::Avx512.available() {
            println!("SKIPPED: this CPU lacks AVX-512");
            return;
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut b = BlockIq3Xxs {
            d: [0; 2],
            qs: [0; 64],
            scales_and_signs: [0; 32],
        };
        for _ in 0..2_000 {
            for v in &mut b.scales_and_signs {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *v = (s >> 40) as u8;
            }
            // SAFETY: AVX-512 (and so AVX2) checked above.
            let got = unsafe { b.block_signs() };
            for g in 0..8 {
                let aux = u32_at(&b.scales_and_signs, g);
                for l in 0..4 {
                    let want = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                    let byte = (got[g / 2] >> (32 * (g % 2) + 8 * l)) as u8;
                    assert_eq!(byte, want, "word {g} index {l}");
                }
            }
        }
    }
}
