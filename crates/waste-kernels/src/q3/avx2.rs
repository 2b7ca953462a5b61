//! AVX2 `q3` dot product: unpacks a block's 2+1-bit planes to 32 codes, maps
//! them through the grid with one byte shuffle, then the shared int8 dot.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, SCALE_TOP_EXP};
use crate::ggml::dot::avx2::{Avx2Mac, AvxVnniMac};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, table_bits, vec_dot};
use crate::quant::scale::scale_table;

/// The f32 bits of [`super::SCALES`], for scalar copies.
pub(crate) static SCALE_BITS: [u32; 256] =
    table_bits(super::sixteenths(scale_table(SCALE_TOP_EXP)));

/// The `q3` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q3;

impl Avx2Block for Q3 {
    const BYTES: usize = BLOCK_BYTES;
    const OFFSET: i8 = 64;
    // Each block's scale read beside its decode: on Zen 3 faster than the
    // chunked scale copies (BENCH.md, "q3 decode on AVX2: scales inline").
    const INLINE: bool = true;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn decode(blk: *const u8, lut: [__m256i; 2]) -> __m256i {
        // SAFETY: the caller guarantees 13 readable bytes at `blk`.
        let (qs, qh) = unsafe { (_mm_loadu_si64(blk.add(1)), _mm_loadu_si32(blk.add(9))) };
        // Byte 8·l + j = qs[j] >> 2l: the low bits of weight 8·l + j.
        let lo = _mm256_srlv_epi64(_mm256_broadcastq_epi64(qs), _mm256_set_epi64x(6, 4, 2, 0));
        let lo = _mm256_and_si256(lo, _mm256_set1_epi8(3));
        // Dword k shifted left by k: bit 7 of byte 4k + m = bit 8m + 7 - k of
        // qh = the high bit of weight 4k + m. `blendv` reads only that bit.
        let hi = _mm256_sllv_epi32(
            _mm256_broadcastd_epi32(qh),
            _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
        );
        _mm256_blendv_epi8(
            _mm256_shuffle_epi8(lut[0], lo),
            _mm256_shuffle_epi8(lut[1], lo),
            hi,
        )
    }

    #[inline]
    unsafe fn scale_raw(blk: *const u8) -> u32 {
        // SAFETY: the caller guarantees a readable block at `blk`.
        SCALE_BITS[usize::from(unsafe { *blk })]
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales8(raw: __m256i) -> __m256 {
        _mm256_castsi256_ps(raw)
    }
}

/// AVX2 version of [`super::reference::vec_dot_q3_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3, Avx2Mac>(rows, row_bytes, grid, acts, out) }
}

/// [`vec_dot_q3_q8`] with AVX-VNNI's `vpdpbusd` for the int8 products.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn vec_dot_q3_q8_avx_vnni(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3, AvxVnniMac>(rows, row_bytes, grid, acts, out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_bits_are_the_table() {
        for (b, s) in SCALE_BITS.iter().zip(super::super::SCALES.iter()) {
            assert_eq!(*b, s.to_bits());
        }
    }
}
