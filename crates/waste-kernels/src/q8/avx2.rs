//! AVX2 `q8` dot product: the codes are the int8 weights.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, scale};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, vec_dot};

/// The `q8` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q8;

impl Avx2Block for Q8 {
    const BYTES: usize = BLOCK_BYTES;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn decode(blk: *const u8, _lut: __m256i) -> __m256i {
        // SAFETY: the caller guarantees 34 readable bytes at `blk`.
        unsafe { _mm256_loadu_si256(blk.add(2).cast()) }
    }

    #[inline]
    fn scale(blk: &[u8]) -> f32 {
        scale(blk)
    }
}

/// AVX2 version of [`super::reference::vec_dot_q8_q8_ref`].
///
/// # Safety
/// AVX2 and FMA must be available.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn vec_dot_q8_q8(row: &[u8], grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q8>(row, grid, acts, out) }
}
