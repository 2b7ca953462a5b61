//! AVX-512 `q4` dot product: with VNNI, one block per vector, the nibbles
//! looked up as grid + 128 (unsigned, for `vpdpbusd`; the shared kernel is
//! `quant/avx512.rs`). Without VNNI the AVX2 kernel is as fast: AVX-512 at
//! 256 bits adds nothing to its sign trick.

use std::arch::x86_64::*;

use super::avx2::Q4;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q4 {
    const PAIRED: bool = false;
    const VNNI_OFFSET: i32 = 128;
    /// grid + 128 in both lanes.
    type Consts = __m256i;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn consts(grid: &[i8; 16]) -> __m256i {
        // SAFETY: `grid` is 16 readable bytes.
        let g = unsafe { _mm_loadu_si128(grid.as_ptr().cast()) };
        _mm256_broadcastsi128_si256(_mm_xor_si128(g, _mm_set1_epi8(i8::MIN)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_u8(blk: *const u8, lut: &__m256i) -> __m256i {
        // SAFETY: the caller guarantees 17 readable bytes at `blk`.
        let q = unsafe { _mm_loadu_si128(blk.add(1).cast()) };
        let m = _mm_set1_epi8(15);
        let c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
        _mm256_shuffle_epi8(*lut, c)
    }

    unsafe fn pair_scales8(_x: &[__m256i; 4], _c: &Self::Consts) -> __m256 {
        unreachable!("not paired")
    }

    unsafe fn decode_pair(_x: __m256i, _lut: &__m256i) -> [__m256i; 2] {
        unreachable!("q4 blocks are not paired")
    }
}

/// AVX-512 (VNNI, VBMI) version of [`super::reference::vec_dot_q4_q8_ref`], over
/// `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, AVX2, FMA and F16C must be available
/// (the VNNI table's contract; these kernels use VNNI only).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
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
