//! AVX2 `q8` dot product: the codes are the int8 weights.

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use crate::ggml::dot::avx2::Avx2Mac;
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, vec_dot};

/// The `q8` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q8;

impl Avx2Block for Q8 {
    const BYTES: usize = BLOCK_BYTES;
    const OFFSET: i8 = 0;
    const INLINE: bool = true;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn decode(blk: *const u8, _lut: [__m256i; 2]) -> __m256i {
        // SAFETY: the caller guarantees 34 readable bytes at `blk`.
        unsafe { _mm256_loadu_si256(blk.add(2).cast()) }
    }

    #[inline(always)]
    unsafe fn scale(blk: *const u8) -> f32 {
        // The block's first 16 bytes, the scale in lane 0: from its two
        // bytes alone the compiler builds an insert into whatever register
        // is at hand, an accumulator of another chain, which then waits on
        // it (docs/BENCH.md, "`q8` experts: a false dependency between
        // chains").
        // SAFETY: the caller guarantees a readable block (34 bytes) at
        // `blk`; F16C is enabled in the (inlined-into) caller.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_loadu_si128(blk.cast()))) }
    }

    #[inline]
    unsafe fn scale_raw(blk: *const u8) -> u32 {
        // SAFETY: the caller guarantees a readable block at `blk`.
        u32::from(unsafe { blk.cast::<u16>().read_unaligned() })
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales8(raw: __m256i) -> __m256 {
        let lo = _mm256_castsi256_si128(raw);
        _mm256_cvtph_ps(_mm_packus_epi32(lo, _mm256_extracti128_si256(raw, 1)))
    }
}

/// AVX2 version of [`super::reference::vec_dot_q8_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q8, Avx2Mac>(rows, row_bytes, grid, acts, out) }
}
