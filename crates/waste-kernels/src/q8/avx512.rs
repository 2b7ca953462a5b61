//! AVX-512 `q8` dot product: the AVX2 kernel. `q8` streams 34 bytes per 32
//! weights and is bound by memory; a VNNI version (codes + 128 for
//! `vpdpbusd`, the offset cancelled in i32, scales copied ahead like `q4`'s)
//! measured 0.6-1.0x the AVX2 kernel, whose scale is read with each block.

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
