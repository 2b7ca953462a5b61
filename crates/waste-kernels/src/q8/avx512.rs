//! AVX-512 `q8` dot product: the AVX2 kernel. A VNNI version with codes +
//! 128 for `vpdpbusd` (the offset cancelled in i32, scales copied ahead
//! like `q4`'s) measured 0.6-1.0x it on Zen 4; one in llama.cpp's manner
//! (magnitudes against signed activations, the scale read with each
//! block) 1.0 x it streaming and 1.02-1.09 x resident on Zen 5 (docs/BENCH.md).

use crate::quant::act::QuantizedActs;

/// AVX-512 version of [`super::reference::vec_dot_q8_q8_ref`]: the AVX2
/// kernel ([`super::avx2::vec_dot_q8_q8`]).
///
/// # Safety
/// AVX2, FMA and F16C must be available (implied by the AVX-512 tables).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { super::avx2::vec_dot_q8_q8(rows, row_bytes, grid, acts, out) }
}
