//! AVX-512 `q4` dot product: two blocks (64 weights) unpacked per step.

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use super::avx2::Q4;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q4 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn decode2(blk: *const u8, lut: [__m512i; 2]) -> __m512i {
        // SAFETY: the caller guarantees 34 readable bytes at `blk`.
        let (q0, q1) = unsafe {
            (
                _mm_loadu_si128(blk.add(1).cast()),
                _mm_loadu_si128(blk.add(BLOCK_BYTES + 1).cast()),
            )
        };
        let m = _mm_set1_epi8(15);
        let lo = _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(q0, 4), m),
            _mm_and_si128(q0, m),
        );
        let hi = _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(q1, 4), m),
            _mm_and_si128(q1, m),
        );
        let c = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        _mm512_shuffle_epi8(lut[0], c)
    }
}

/// AVX-512 version of [`super::reference::vec_dot_q4_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F and BW, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
