//! The AVX2 row dot product shared by every block format: a block decodes to
//! 32 signed int8 weights, multiplied with int8 activations by `maddubs`
//! (sign trick: |w| · sign(a, w)), summed in i32, scaled in f32.
//! The per-format bit unpacking lives in `q3/avx2.rs`, `q4/avx2.rs`, `q8/avx2.rs`.

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;

/// A block format as AVX2 sees it.
pub(crate) trait Avx2Block {
    /// Bytes per block of 32 weights.
    const BYTES: usize;
    /// The 32 weights of the block at `blk` as int8 grid values.
    ///
    /// # Safety
    /// AVX2 must be available and `blk` must point to `BYTES` readable bytes.
    unsafe fn decode(blk: *const u8, lut: __m256i) -> __m256i;
    /// The f32 scale of a block (bytes `blk[..BYTES]`).
    fn scale(blk: &[u8]) -> f32;
}

/// `Σ_i w_i · a_i` of 32 int8 pairs as 8 i32 partial sums. Both |w| and |a|
/// are at most 127, so no pair of products saturates the i16 of `maddubs`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn dot_i8(w: __m256i, a: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `out[t]` = dot of one packed row with activation row `t`, for every `t`.
///
/// # Safety
/// AVX2 and FMA must be available.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn vec_dot<B: Avx2Block>(
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
    let lut = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(grid.as_ptr().cast())) };
    let mut t = 0;
    while t < acts.n {
        let left = acts.n - t;
        // SAFETY: AVX2/FMA are this function's contract; the lengths were checked above.
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

/// One row against activation rows `t0..t0 + N`: each block is decoded once.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_n<B: Avx2Block, const N: usize>(
    row: &[u8],
    lut: __m256i,
    acts: &QuantizedActs,
    t0: usize,
    out: &mut [f32],
) {
    let nb = acts.blocks;
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    for b in 0..nb {
        let blk = &row[b * B::BYTES..(b + 1) * B::BYTES];
        // SAFETY: `blk` holds B::BYTES bytes; AVX2 is this function's contract.
        let w = unsafe { B::decode(blk.as_ptr(), lut) };
        let dw = B::scale(blk);
        for (j, acc) in acc.iter_mut().enumerate() {
            let at = (t0 + j) * nb + b;
            // SAFETY: the caller checked `qs` holds n · nb · 32 codes and t0 + j < n.
            let a = unsafe { _mm256_loadu_si256(acts.qs.as_ptr().add(at * 32).cast()) };
            let s = _mm256_cvtepi32_ps(dot_i8(w, a));
            let f = _mm256_set1_ps(dw * acts.d[at]);
            acc[b & 1] = _mm256_fmadd_ps(s, f, acc[b & 1]);
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = hsum(_mm256_add_ps(acc[0], acc[1]));
    }
}
