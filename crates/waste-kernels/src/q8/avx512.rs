//! AVX-512 `q8` dot product: with VNNI, one block per vector, the codes made
//! unsigned by adding 128 (a sign-bit flip) for `vpdpbusd` (the shared
//! kernel is `quant/avx512.rs`). Without VNNI the AVX2 kernel is as fast.

use std::arch::x86_64::*;

use super::avx2::Q8;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q8 {
    const PAIRED: bool = false;
    const VNNI_OFFSET: i32 = 128;
    type Consts = ();

    #[inline]
    unsafe fn consts(_grid: &[i8; 16]) {}

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_u8(blk: *const u8, _c: &()) -> __m256i {
        // SAFETY: the caller guarantees 34 readable bytes at `blk`.
        let q = unsafe { _mm256_loadu_si256(blk.add(2).cast()) };
        _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN))
    }

    unsafe fn pair_scales8(_x: &[__m256i; 4], _c: &Self::Consts) -> __m256 {
        unreachable!("not paired")
    }

    unsafe fn decode_pair(_x: __m256i, _c: &()) -> [__m256i; 2] {
        unreachable!("q8 blocks are not paired")
    }
}

/// AVX-512 (VNNI, VBMI) version of [`super::reference::vec_dot_q8_q8_ref`], over
/// `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, AVX2, FMA and F16C must be available
/// (the VNNI table's contract; these kernels use VNNI only).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
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
