//! AVX2 `q4` dot product: nibbles to 32 codes, grid by one byte shuffle.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, SCALE_TOP_EXP};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, table_bits, vec_dot};
use crate::quant::scale::scale_table;

/// The f32 bits of [`super::SCALES`], for scalar copies.
pub(crate) static SCALE_BITS: [u32; 256] =
    table_bits(super::thirty_seconds(scale_table(SCALE_TOP_EXP)));

/// The `q4` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q4;

impl Avx2Block for Q4 {
    const BYTES: usize = BLOCK_BYTES;
    const OFFSET: i8 = 0;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn decode(blk: *const u8, lut: [__m256i; 2]) -> __m256i {
        // SAFETY: the caller guarantees 17 readable bytes at `blk`.
        let q = unsafe { _mm_loadu_si128(blk.add(1).cast()) };
        let m = _mm_set1_epi8(15);
        let c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
        _mm256_shuffle_epi8(lut[0], c)
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

/// AVX2 version of [`super::reference::vec_dot_q4_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q4>(rows, row_bytes, grid, acts, out) }
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
