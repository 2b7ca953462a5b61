//! The AVX-512 (F + BW) row dot product shared by every block format: two
//! blocks decode to 64 signed int8 weights per step; |w| · (±a) by `maddubs`
//! (AVX-512 has no byte sign instruction: the sign moves by a masked negate),
//! i32 sums scaled in f32. An odd last block takes the AVX2 path.

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, dot_i8, hsum};

/// A block format as AVX-512 sees it: two consecutive blocks at once.
pub(crate) trait Avx512Block: Avx2Block {
    /// The 64 weights of the two blocks at `blk` as int8 grid values.
    ///
    /// # Safety
    /// AVX-512 F and BW must be available and `blk` must point to
    /// `2 · BYTES` readable bytes.
    unsafe fn decode2(blk: *const u8, lut: __m512i) -> __m512i;
}

/// Lanes 0..8 = `lo`, lanes 8..16 = `hi`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
fn two_scales(lo: f32, hi: f32) -> __m512 {
    let v = _mm512_castps256_ps512(_mm256_set1_ps(lo));
    _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(v),
        _mm256_castps_pd(_mm256_set1_ps(hi)),
        1,
    ))
}

/// `out[t]` = dot of one packed row with activation row `t`, for every `t`.
///
/// # Safety
/// AVX-512 F and BW, AVX2 and FMA must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub(crate) unsafe fn vec_dot<B: Avx512Block>(
    row: &[u8],
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    assert!(
        row.len() >= acts.blocks * B::BYTES && out.len() >= acts.n,
        "row or output too short"
    );
    assert!(acts.qs.len() >= acts.n * acts.blocks * 32 && acts.d.len() >= acts.n * acts.blocks);
    // SAFETY: `grid` is 16 readable bytes.
    let lut = unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(grid.as_ptr().cast())) };
    let mut t = 0;
    while t < acts.n {
        let left = acts.n - t;
        // SAFETY: the ISA is this function's contract; the lengths were checked above.
        unsafe {
            match left {
                1 => rows_n::<B, 1>(row, lut, acts, t, &mut out[t..]),
                2 => rows_n::<B, 2>(row, lut, acts, t, &mut out[t..]),
                3 => rows_n::<B, 3>(row, lut, acts, t, &mut out[t..]),
                _ => rows_n::<B, 4>(row, lut, acts, t, &mut out[t..]),
            }
        }
        t += left.min(4);
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn rows_n<B: Avx512Block, const N: usize>(
    row: &[u8],
    lut: __m512i,
    acts: &QuantizedActs,
    t0: usize,
    out: &mut [f32],
) {
    let nb = acts.blocks;
    let ones = _mm512_set1_epi16(1);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut b = 0;
    while b + 2 <= nb {
        let blk = &row[b * B::BYTES..(b + 2) * B::BYTES];
        // SAFETY: `blk` holds 2 · B::BYTES bytes; the ISA is this function's contract.
        let w = unsafe { B::decode2(blk.as_ptr(), lut) };
        let neg = _mm512_movepi8_mask(w);
        let aw = _mm512_abs_epi8(w);
        let (d0, d1) = (B::scale(blk), B::scale(&blk[B::BYTES..]));
        for (j, acc) in acc.iter_mut().enumerate() {
            let at = (t0 + j) * nb + b;
            // SAFETY: the caller checked `qs` holds n · nb · 32 codes; b + 1 < nb.
            let a = unsafe { _mm512_loadu_si512(acts.qs.as_ptr().add(at * 32).cast()) };
            let sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
            let s = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sa), ones);
            let f = two_scales(d0 * acts.d[at], d1 * acts.d[at + 1]);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, *acc);
        }
        b += 2;
    }
    let mut tail = [0f32; N];
    if b < nb {
        let blk = &row[b * B::BYTES..(b + 1) * B::BYTES];
        let lut2 = _mm512_castsi512_si256(lut);
        // SAFETY: `blk` holds B::BYTES bytes; AVX2 is implied by the contract.
        let w = unsafe { B::decode(blk.as_ptr(), lut2) };
        let dw = B::scale(blk);
        for (j, tl) in tail.iter_mut().enumerate() {
            let at = (t0 + j) * nb + b;
            // SAFETY: as above, block b < nb.
            let a = unsafe { _mm256_loadu_si256(acts.qs.as_ptr().add(at * 32).cast()) };
            *tl = hsum(_mm256_cvtepi32_ps(dot_i8(w, a))) * (dw * acts.d[at]);
        }
    }
    for ((o, acc), tl) in out.iter_mut().zip(acc).zip(tail) {
        *o = _mm512_reduce_add_ps(acc) + tl;
    }
}
