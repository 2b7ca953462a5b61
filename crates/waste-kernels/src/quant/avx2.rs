//! The AVX2 row dot product shared by every block format: a block decodes to
//! 32 int8 weights, multiplied with int8 activations by `maddubs`, summed in
//! i32, scaled in f32. Formats whose grid fits 0..127 after an offset (`q3`:
//! +64) decode straight to unsigned bytes and pay the offset once per block
//! from the activation sums; the others use the sign trick |w| · sign(a, w).
//! The per-format bit unpacking lives in `q3/avx2.rs`, `q4/avx2.rs`, `q8/avx2.rs`.

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;

/// A block format as AVX2 sees it.
pub(crate) trait Avx2Block {
    /// Bytes per block of 32 weights.
    const BYTES: usize;
    /// Added to every grid value so that it is a byte in 0..128; 0 = signed
    /// weights (sign trick).
    const OFFSET: i8;
    /// The 32 weights of the block at `blk` as (grid value + OFFSET) bytes;
    /// `lut` = the byte-shuffle tables of grid entries 0..16 and 4..16 (see [`lut`]).
    ///
    /// # Safety
    /// AVX2 must be available and `blk` must point to `BYTES` readable bytes.
    unsafe fn decode(blk: *const u8, lut: [__m256i; 2]) -> __m256i;
    /// The f32 scale of the block at `blk`.
    ///
    /// # Safety
    /// `blk` must point to `BYTES` readable bytes.
    unsafe fn scale(blk: *const u8) -> f32;
}

/// `Σ_i w_i · a_i` of 32 byte pairs as 8 i32 partial sums: `w` unsigned when
/// `OFFSET != 0`, else signed (sign trick). |w|, |a| ≤ 127 keep every pair of
/// products inside the i16 of `maddubs`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_i8<const SIGNED: bool>(w: __m256i, a: __m256i) -> __m256i {
    let p = if SIGNED {
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
    } else {
        _mm256_maddubs_epi16(w, a)
    };
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The byte-shuffle tables of `grid` plus the format's offset, in both lanes:
/// entries 0..16, and entries 4..16 (the upper half of a 3-bit grid).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn lut<B: Avx2Block>(grid: &[i8; 16]) -> [__m256i; 2] {
    // SAFETY: `grid` is 16 readable bytes.
    let g = unsafe { _mm_loadu_si128(grid.as_ptr().cast()) };
    let g = _mm_add_epi8(g, _mm_set1_epi8(B::OFFSET));
    [
        _mm256_broadcastsi128_si256(g),
        _mm256_broadcastsi128_si256(_mm_srli_si128(g, 4)),
    ]
}

/// Checks the lengths every kernel relies on; returns the number of rows.
pub(crate) fn check(
    rows: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    acts: &QuantizedActs,
    out: &[f32],
) -> usize {
    let n = acts.n.max(1);
    let nrows = out.len() / n;
    assert!(out.len() == nrows * n, "output is not (rows, n)");
    assert!(
        row_bytes >= acts.blocks * block_bytes && rows.len() >= nrows * row_bytes,
        "rows too short"
    );
    assert!(acts.qs.len() >= acts.n * acts.blocks * 32 && acts.d.len() >= acts.n * acts.blocks);
    assert!(acts.sums.len() >= acts.n * acts.blocks);
    nrows
}

/// `out[r·n + t]` = packed row `r` (of `row_bytes` in `rows`) · activation row `t`.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot<B: Avx2Block>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let lut = lut::<B>(grid);
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

/// Checks the lengths (see [`check`]), then calls `f(row, t0, out)` for every
/// packed row and every run of at most 4 activation rows `t0..t0 + out.len()`.
#[inline]
pub(crate) fn tiles(
    rows: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    acts: &QuantizedActs,
    out: &mut [f32],
    mut f: impl FnMut(&[u8], usize, &mut [f32]),
) {
    let nrows = check(rows, row_bytes, block_bytes, acts, out);
    for (r, o) in out.chunks_mut(acts.n.max(1)).take(nrows).enumerate() {
        for (i, o) in o.chunks_mut(4).enumerate() {
            f(&rows[r * row_bytes..], 4 * i, o);
        }
    }
}

/// One row against activation rows `t0..t0 + N`: each block decoded once,
/// two blocks per step into two accumulators.
///
/// # Safety
/// AVX2/FMA available; `row` holds `acts.blocks` blocks; `t0 + N <= acts.n`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_n<B: Avx2Block, const N: usize>(
    row: &[u8],
    lut: [__m256i; 2],
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
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    let mut corr = [0f32; N];
    // SAFETY (both loops): blocks b (+1) < nb lie in `row` and activation
    // blocks (t0 + j)·nb + b (+1) in `acts` (the caller's contract).
    unsafe {
        let mut b = 0;
        while b + 2 <= nb {
            let blk = p.add(b * B::BYTES);
            let (w0, w1) = (B::decode(blk, lut), B::decode(blk.add(B::BYTES), lut));
            let (d0, d1) = (B::scale(blk), B::scale(blk.add(B::BYTES)));
            for j in 0..N {
                let at = (t0 + j) * nb + b;
                let a0 = _mm256_loadu_si256(qs.add(at * 32).cast());
                let a1 = _mm256_loadu_si256(qs.add(at * 32 + 32).cast());
                let (s0, s1) = if B::OFFSET == 0 {
                    (dot_i8::<true>(w0, a0), dot_i8::<true>(w1, a1))
                } else {
                    (dot_i8::<false>(w0, a0), dot_i8::<false>(w1, a1))
                };
                acc[j][0] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(s0),
                    _mm256_set1_ps(d0 * *ds.add(at)),
                    acc[j][0],
                );
                acc[j][1] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(s1),
                    _mm256_set1_ps(d1 * *ds.add(at + 1)),
                    acc[j][1],
                );
                if B::OFFSET != 0 {
                    corr[j] += d0 * *sums.add(at) + d1 * *sums.add(at + 1);
                }
            }
            b += 2;
        }
        if b < nb {
            let blk = p.add(b * B::BYTES);
            let (w0, d0) = (B::decode(blk, lut), B::scale(blk));
            for j in 0..N {
                let at = (t0 + j) * nb + b;
                let a0 = _mm256_loadu_si256(qs.add(at * 32).cast());
                let s0 = if B::OFFSET == 0 {
                    dot_i8::<true>(w0, a0)
                } else {
                    dot_i8::<false>(w0, a0)
                };
                acc[j][0] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(s0),
                    _mm256_set1_ps(d0 * *ds.add(at)),
                    acc[j][0],
                );
                if B::OFFSET != 0 {
                    corr[j] += d0 * *sums.add(at);
                }
            }
        }
    }
    for j in 0..N {
        out[j] = hsum(_mm256_add_ps(acc[j][0], acc[j][1])) - f32::from(B::OFFSET) * corr[j];
    }
}
