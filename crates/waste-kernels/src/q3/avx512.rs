//! AVX-512 `q3` dot product: two blocks (64 weights) unpacked per step.

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use super::avx2::Q3;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q3 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    unsafe fn decode2(blk: *const u8, lut: [__m512i; 2]) -> __m512i {
        // SAFETY: the caller guarantees 26 readable bytes at `blk`.
        let (qs0, qh0, qs1, qh1) = unsafe {
            (
                _mm_loadu_si64(blk.add(1)),
                _mm_loadu_si32(blk.add(9)),
                _mm_loadu_si64(blk.add(BLOCK_BYTES + 1)),
                _mm_loadu_si32(blk.add(BLOCK_BYTES + 9)),
            )
        };
        // The same bit moves as the AVX2 decode, one block per 256-bit half.
        let both = |a: __m256i, b: __m256i| _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        let lo = both(_mm256_broadcastq_epi64(qs0), _mm256_broadcastq_epi64(qs1));
        let lo = _mm512_srlv_epi64(lo, _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0));
        let lo = _mm512_and_si512(lo, _mm512_set1_epi8(3));
        let hi = both(_mm256_broadcastd_epi32(qh0), _mm256_broadcastd_epi32(qh1));
        let hi = _mm512_sllv_epi32(
            hi,
            _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0),
        );
        let upper = _mm512_movepi8_mask(hi);
        _mm512_mask_blend_epi8(
            upper,
            _mm512_shuffle_epi8(lut[0], lo),
            _mm512_shuffle_epi8(lut[1], lo),
        )
    }
}

/// AVX-512 version of [`super::reference::vec_dot_q3_q8_ref`], over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F and BW, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3>(rows, row_bytes, grid, acts, out) }
}
