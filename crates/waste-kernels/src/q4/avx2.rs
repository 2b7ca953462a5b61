//! AVX2 `q4` dot product: nibbles to 32 codes, grid by one byte shuffle.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, SCALE_TOP_EXP};
use crate::ggml::dot::avx2::{Avx2Mac, AvxVnniMac, Mac};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{
    Avx2Block, check, dot_i8, nibbles2, store_rows8, sum_rows8, table_bits, vec_dot,
};
use crate::quant::scale::scale_table;

/// The f32 bits of [`super::SCALES`], for scalar copies.
pub(crate) static SCALE_BITS: [u32; 256] =
    table_bits(super::thirty_seconds(scale_table(SCALE_TOP_EXP)));

/// The `q4` block as the shared AVX2 kernel sees it.
#[derive(Debug)]
pub(crate) struct Q4;

impl Avx2Block for Q4 {
    const BYTES: usize = BLOCK_BYTES;
    const OFFSET: i8 = 0;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn decode(blk: *const u8, lut: [__m256i; 2]) -> __m256i {
        // SAFETY: the caller guarantees 17 readable bytes at `blk`.
        let q = unsafe { _mm_loadu_si128(blk.add(1).cast()) };
        let m = _mm_set1_epi8(15);
        let c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
        _mm256_shuffle_epi8(lut[0], c)
    }

    #[inline]
    unsafe fn scale_raw(blk: *const u8) -> u32 {
        // SAFETY: the caller guarantees a readable block at `blk`.
        SCALE_BITS[usize::from(unsafe { *blk })]
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales8(raw: __m256i) -> __m256 {
        _mm256_castsi256_ps(raw)
    }
}

/// AVX2 version of [`super::reference::vec_dot_q4_q8_ref`], over `out.len() / acts.n` rows.
/// One activation row (decode): rows eight at a time ([`rows8`]), the rest
/// through the shared stream.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { q4_dot::<Avx2Mac>(rows, row_bytes, grid, acts, out) }
}

/// [`vec_dot_q4_q8`] with AVX-VNNI's `vpdpbusd` for the int8 products.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn vec_dot_q4_q8_avx_vnni(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { q4_dot::<AvxVnniMac>(rows, row_bytes, grid, acts, out) }
}

/// The body of both entries, the int8 products through `M`.
///
/// # Safety
/// AVX2, FMA, F16C and `M`'s ISA enabled in the (inlined-into) caller.
#[inline(always)]
unsafe fn q4_dot<M: Mac>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let mut done = 0;
    if acts.n == 1 {
        let nrows = check(rows, row_bytes, BLOCK_BYTES, acts, out);
        // SAFETY: `grid` is 16 bytes.
        let lut = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(grid.as_ptr().cast())) };
        while done + 8 <= nrows {
            // SAFETY: `check` checked that rows done..done + 8 and the
            // activation row hold `acts.blocks` blocks.
            unsafe {
                rows8::<M>(
                    rows.as_ptr().add(done * row_bytes),
                    row_bytes,
                    lut,
                    acts,
                    &mut out[done..],
                );
            };
            done += 8;
        }
    }
    let n = acts.n.max(1);
    // SAFETY: same contract.
    unsafe {
        vec_dot::<Q4, M>(
            &rows[(done * row_bytes).min(rows.len())..],
            row_bytes,
            grid,
            acts,
            &mut out[done * n..],
        );
    }
}

/// Eight rows at `w` (`row_bytes` apart) against the one activation row,
/// two rows to a register as ggml's `nibble_rows8`: each block's eight
/// integer sums reduced to one vector, then the eight rows' scales
/// (`SCALES[s] · d_a`) applied in one multiply and one FMA. Lane `l` of the
/// accumulator holds row [`crate::quant::avx2::ROWS8_LANE`]`[l]`.
///
/// # Safety
/// AVX2/FMA and `M`'s ISA enabled in the (inlined-into) caller; eight rows
/// of `acts.blocks` blocks at `w`; `out` holds at least 8 values.
#[inline(always)]
unsafe fn rows8<M: Mac>(
    w: *const u8,
    row_bytes: usize,
    lut: __m256i,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // Two groups of eight rows ahead (a prefetch never faults).
    let ahead = 16 * row_bytes;
    // SAFETY: AVX is this function's contract.
    let mut acc = unsafe { _mm256_setzero_ps() };
    // SAFETY (whole loop): blocks b < acts.blocks of the eight rows and of
    // the activation row lie in their slices (the caller's contract).
    unsafe {
        for b in 0..acts.blocks {
            let a = acts.qs.as_ptr().add(32 * b);
            let alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.cast()));
            let ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.add(16).cast()));
            let blk = |r: usize| w.add(r * row_bytes + b * BLOCK_BYTES);
            let mut s = [_mm256_setzero_si256(); 4];
            for (p, s) in s.iter_mut().enumerate() {
                let (b0, b1) = (blk(2 * p), blk(2 * p + 1));
                _mm_prefetch::<_MM_HINT_T0>(b0.wrapping_add(ahead).cast());
                _mm_prefetch::<_MM_HINT_T0>(b1.wrapping_add(ahead).cast());
                let (lo, hi) = nibbles2(b0.add(1), b1.add(1));
                let (lo, hi) = (_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
                *s = dot_i8::<M, true>(dot_i8::<M, true>(_mm256_setzero_si256(), lo, alo), hi, ahi);
            }
            let h = sum_rows8(s);
            let sc = |r: usize| f32::from_bits(SCALE_BITS[usize::from(*blk(r))]);
            let dw = _mm256_setr_ps(sc(0), sc(2), sc(4), sc(6), sc(1), sc(3), sc(5), sc(7));
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*acts.d.as_ptr().add(b)));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(h), acc);
        }
        store_rows8(acc, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_bits_are_the_table() {
        for (b, s) in SCALE_BITS.iter().zip(super::super::SCALES.iter()) {
            assert_eq!(*b, s.to_bits());
        }
    }
}
