//! The AVX-512 (F + BW) row dot product shared by every block format: two
//! blocks decode to 64 int8 weights per step, `maddubs` with int8
//! activations, i32 sums scaled in f32. Offset formats (`q3`) multiply
//! unsigned bytes directly; signed ones move the weight's sign onto the
//! activation by a masked negate (AVX-512 has no byte sign instruction).
//! An odd last block takes the AVX2 path.

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, dot_i8, hsum, lut, tiles};

/// A block format as AVX-512 sees it: two consecutive blocks at once.
pub(crate) trait Avx512Block: Avx2Block {
    /// The 64 weights of the two blocks at `blk` as (grid value + OFFSET) bytes.
    ///
    /// # Safety
    /// AVX-512 F and BW must be available and `blk` must point to
    /// `2 · BYTES` readable bytes.
    unsafe fn decode2(blk: *const u8, lut: [__m512i; 2]) -> __m512i;
}

/// Lanes 0..8 = `lo`, lanes 8..16 = `hi`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
fn two_scales(lo: f32, hi: f32) -> __m512 {
    let v = _mm512_castps256_ps512(_mm256_set1_ps(lo));
    _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(v),
        _mm256_castps_pd(_mm256_set1_ps(hi)),
        1,
    ))
}

/// `out[r·n + t]` = packed row `r` (of `row_bytes` in `rows`) · activation row `t`.
///
/// # Safety
/// AVX-512 F and BW, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot<B: Avx512Block>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let lut2 = lut::<B>(grid);
    let lut = lut2.map(|l| _mm512_inserti64x4(_mm512_castsi256_si512(l), l, 1));
    tiles(rows, row_bytes, B::BYTES, acts, out, |row, t, o| {
        // SAFETY: the ISA is this function's contract; `tiles` checked the lengths.
        unsafe {
            match o.len() {
                1 => rows_n::<B, 1>(row, lut, acts, t, o),
                2 => rows_n::<B, 2>(row, lut, acts, t, o),
                3 => rows_n::<B, 3>(row, lut, acts, t, o),
                _ => rows_n::<B, 4>(row, lut, acts, t, o),
            }
        }
    });
}

/// # Safety
/// The ISA available; `row` holds `acts.blocks` blocks; `t0 + N <= acts.n`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn rows_n<B: Avx512Block, const N: usize>(
    row: &[u8],
    lut: [__m512i; 2],
    acts: &QuantizedActs,
    t0: usize,
    out: &mut [f32],
) {
    let nb = acts.blocks;
    let (p, qs, ds, sums) = (
        row.as_ptr(),
        acts.qs.as_ptr(),
        acts.d.as_ptr(),
        acts.sums.as_ptr(),
    );
    let ones = _mm512_set1_epi16(1);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut tail = [0f32; N];
    let mut corr = [0f32; N];
    let mut b = 0;
    // SAFETY (whole block): blocks b, b + 1 < nb lie in `row`, activation
    // blocks (t0 + j)·nb + b (+1) in `acts` (the caller's contract).
    unsafe {
        while b + 2 <= nb {
            let blk = p.add(b * B::BYTES);
            let w = B::decode2(blk, lut);
            let (d0, d1) = (B::scale(blk), B::scale(blk.add(B::BYTES)));
            let (neg, aw) = if B::OFFSET == 0 {
                (_mm512_movepi8_mask(w), _mm512_abs_epi8(w))
            } else {
                (0, w)
            };
            for j in 0..N {
                let at = (t0 + j) * nb + b;
                let a = _mm512_loadu_si512(qs.add(at * 32).cast());
                let a = if B::OFFSET == 0 {
                    _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a)
                } else {
                    a
                };
                let s = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, a), ones);
                let f = two_scales(d0 * *ds.add(at), d1 * *ds.add(at + 1));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc[j]);
                if B::OFFSET != 0 {
                    corr[j] += d0 * *sums.add(at) + d1 * *sums.add(at + 1);
                }
            }
            b += 2;
        }
        if b < nb {
            let blk = p.add(b * B::BYTES);
            let w = B::decode(
                blk,
                [
                    _mm512_castsi512_si256(lut[0]),
                    _mm512_castsi512_si256(lut[1]),
                ],
            );
            let d0 = B::scale(blk);
            for j in 0..N {
                let at = (t0 + j) * nb + b;
                let a = _mm256_loadu_si256(qs.add(at * 32).cast());
                let s = if B::OFFSET == 0 {
                    dot_i8::<true>(w, a)
                } else {
                    dot_i8::<false>(w, a)
                };
                tail[j] = hsum(_mm256_cvtepi32_ps(s)) * (d0 * *ds.add(at));
                if B::OFFSET != 0 {
                    corr[j] += d0 * *sums.add(at);
                }
            }
        }
    }
    for j in 0..N {
        out[j] = _mm512_reduce_add_ps(acc[j]) + tail[j] - f32::from(B::OFFSET) * corr[j];
    }
}
