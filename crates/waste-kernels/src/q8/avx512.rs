//! AVX-512 `q8` dot product: two blocks (64 weights) per step.

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use super::avx2::Q8;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q8 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn decode2(blk: *const u8, _lut: [__m512i; 2]) -> __m512i {
        // SAFETY: the caller guarantees 68 readable bytes at `blk`.
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(blk.add(2).cast()),
                _mm256_loadu_si256(blk.add(BLOCK_BYTES + 2).cast()),
            )
        };
        _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)
    }
}

/// AVX-512 version of [`super::reference::vec_dot_q8_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F and BW, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q8>(rows, row_bytes, grid, acts, out) }
}
