//! AVX-512 `q3` dot product: two blocks (64 weights) unpacked per step.

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use super::avx2::Q3;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, vec_dot};

impl Avx512Block for Q3 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    unsafe fn decode2(blk: *const u8, lut: __m512i) -> __m512i {
        // SAFETY: the caller guarantees 26 readable bytes at `blk`.
        let (qs0, qh0, qs1, qh1) = unsafe {
            (
                blk.add(1).cast::<u64>().read_unaligned() as i64,
                blk.add(9).cast::<u32>().read_unaligned() as i32,
                blk.add(BLOCK_BYTES + 1).cast::<u64>().read_unaligned() as i64,
                blk.add(BLOCK_BYTES + 9).cast::<u32>().read_unaligned() as i32,
            )
        };
        let lo = _mm512_set_epi64(qs1, qs1, qs1, qs1, qs0, qs0, qs0, qs0);
        let lo = _mm512_srlv_epi64(lo, _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0));
        let lo = _mm512_and_si512(lo, _mm512_set1_epi8(3));
        let h = _mm512_set_epi32(
            qh1, qh1, qh1, qh1, qh1, qh1, qh1, qh1, qh0, qh0, qh0, qh0, qh0, qh0, qh0, qh0,
        );
        let spread = _mm512_set_epi64(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let hb = _mm512_shuffle_epi8(h, spread);
        let set = _mm512_test_epi8_mask(hb, _mm512_set1_epi64(0x8040_2010_0804_0201u64 as i64));
        let c = _mm512_mask_add_epi8(lo, set, lo, _mm512_set1_epi8(4));
        _mm512_shuffle_epi8(lut, c)
    }
}

/// AVX-512 version of [`super::reference::vec_dot_q3_q8_ref`].
///
/// # Safety
/// AVX-512 F and BW, AVX2 and FMA must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn vec_dot_q3_q8(row: &[u8], grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3>(row, grid, acts, out) }
}
