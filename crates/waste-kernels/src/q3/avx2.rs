//! AVX2 `q3` dot product: unpacks a block's 2+1-bit planes to 32 codes, maps
//! them through the grid with one byte shuffle, then the shared int8 dot.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, SCALES};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, vec_dot};

/// The `q3` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q3;

impl Avx2Block for Q3 {
    const BYTES: usize = BLOCK_BYTES;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn decode(blk: *const u8, lut: __m256i) -> __m256i {
        // SAFETY: the caller guarantees 13 readable bytes at `blk`.
        let (qs, qh) = unsafe {
            (
                blk.add(1).cast::<u64>().read_unaligned(),
                blk.add(9).cast::<u32>().read_unaligned(),
            )
        };
        // Byte 8·l + j = qs[j] >> 2l: the low bits of weight 8·l + j.
        let lo = _mm256_srlv_epi64(_mm256_set1_epi64x(qs as i64), _mm256_set_epi64x(6, 4, 2, 0));
        let lo = _mm256_and_si256(lo, _mm256_set1_epi8(3));
        // Byte i = qh byte i / 8, tested against bit i % 8.
        let spread = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let hb = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
        let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let hi = _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_and_si256(hb, bits), bits),
            _mm256_set1_epi8(4),
        );
        _mm256_shuffle_epi8(lut, _mm256_or_si256(lo, hi))
    }

    #[inline]
    fn scale(blk: &[u8]) -> f32 {
        SCALES[usize::from(blk[0])]
    }
}

/// AVX2 version of [`super::reference::vec_dot_q3_q8_ref`].
///
/// # Safety
/// AVX2 and FMA must be available.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn vec_dot_q3_q8(row: &[u8], grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3>(row, grid, acts, out) }
}
