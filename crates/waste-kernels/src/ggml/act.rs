//! ggml's activation blocks, what f32 activations become before they meet
//! ggml weights in an integer dot product (ggml's `vec_dot_type` pairing):
//! [`BlockQ8K`] (256 int8, an f32 scale and 16 exact block sums) for the
//! k- and i-quants, ggml's Q8_0 ([`BlockQ8_0`]: 32 int8 and an f16 scale)
//! for Q4_0, Q8_0 and IQ4_NL.
//!
//! The quantizers here are scalar transcriptions of ggml's rounding
//! (`quantize_row_q8_K_ref`, `quantize_row_q8_0_ref`): an activation row is
//! quantized once per matrix product and reused by every weight row; the
//! rows of a prefill are split over rayon. Both roundings are written with
//! plain float and integer operations (Q8_K's is ggml's own integer trick,
//! Q8_0's a truncation and a correction), loops the compiler vectorizes,
//! where `round` and `round_ties_even` would be libm calls per value
//! without SSE4.1. Q8_K, which every k-quant product of a prefill pays
//! for, also has AVX2 and AVX-512 versions in the kernel tables
//! (`dot::GgmlKernels::quantize_row_q8k`), bit for bit these.
//!
//! Owns no weights and no threading (see [`super::dot`]).

use half::f16;

use super::kquants::QK_K;
use super::legacy::{BlockQ8_0, QK};

/// Q8_K: `a = d · q`, 256 int8 codes with an f32 scale, plus the exact sum
/// of each 16 codes (the k-quant kernels take their offsets and mins from
/// these). 292 bytes per 256 activations; in memory only, never on disk.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ8K {
    /// Scale (`1 / iscale`; 0 for an all-zero block).
    pub d: f32,
    /// Codes, each in -127..=127.
    pub qs: [i8; QK_K],
    /// `Σ qs[16j..16j + 16]` for j < 16.
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

/// Which activation blocks a weight type's dot product takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// [`BlockQ8K`], per 256.
    Q8K,
    /// [`BlockQ8_0`], per 32.
    Q8_0,
}

/// ggml's `nearest_int`, as ggml computes it: add 1.5·2²³ and read the
/// mantissa, which rounds half to even for |v| < 2²² (the codes here stay
/// within ±127). Plain float and integer operations, so the loops calling
/// it vectorize (`round_ties_even` is a libm call without SSE4.1).
#[inline]
fn nearest_int(v: f32) -> i32 {
    let i = (v + 12_582_912.0).to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// `x` (a multiple of 256 long) as Q8_K blocks into `y`, as ggml's
/// `quantize_row_q8_K_ref`: the scale maps the value of largest magnitude
/// (the first, on ties) to -127, codes round half to even.
pub fn quantize_row_q8_k_ref(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(x.len(), y.len() * QK_K, "Q8_K row length");
    for (x, y) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        // The value of largest magnitude, the first on ties: the magnitude
        // first (a loop that vectorizes), then where it first occurs.
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
        if amax == 0.0 {
            *y = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, q) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = q.iter().map(|&q| i16::from(q)).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// `x` (a multiple of 32 long) as Q8_0 blocks into `y`, as ggml's
/// `quantize_row_q8_0_ref`: `d = amax / 127` (stored as f16), codes
/// `round(x / d)` with halves away from zero, using the f32 `d`.
#[inline(always)]
pub fn quantize_row_q8_0_ref(x: &[f32], y: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), y.len() * QK, "Q8_0 row length");
    for (x, y) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = f16::from_f32(d).to_bits().to_le_bytes();
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = round_half_away(v * id) as i8 as u8;
        }
    }
}

/// `v.round()` (halves away from zero) for |v| < 2³¹, NaN to 0, in
/// operations that vectorize: the truncation is exact, so is `v - t`, and
/// a distance of a half or more moves one step away from zero.
#[inline]
pub(crate) fn round_half_away(v: f32) -> i32 {
    let t = v as i32;
    let step = if v < 0.0 { -1 } else { 1 };
    t + if (v - t as f32).abs() >= 0.5 { step } else { 0 }
}

/// Activation values from which [`GgmlActs::quantize`] splits its rows
/// over rayon: a prefill's, not a decode step's.
const PAR_VALUES: usize = 1 << 16;

/// n activation rows quantized for one pairing, reused across calls.
#[derive(Debug, Default)]
pub struct GgmlActs {
    /// Rows.
    pub n: usize,
    /// Values per row.
    pub cols: usize,
    /// Q8_K blocks, (n, cols / 256); empty unless the pairing is Q8K.
    pub q8k: Vec<BlockQ8K>,
    /// Q8_0 blocks, (n, cols / 32); empty unless the pairing is Q8_0.
    pub q8_0: Vec<BlockQ8_0>,
}

impl GgmlActs {
    /// Quantizes x (n, cols) for `pairing`; `cols` must be a multiple of its
    /// block (the matrix's rows are whole weight blocks of the same size).
    pub fn quantize(&mut self, pairing: Pairing, x: &[f32], n: usize, cols: usize) {
        self.quantize_by(
            pairing,
            x,
            n,
            cols,
            quantize_row_q8_k_ref,
            quantize_row_q8_0_ref,
        );
    }

    /// As [`Self::quantize`], Q8_K rows by `q8k` and Q8_0 rows by `q8_0` (a
    /// kernel table's quantizers, bit for bit [`quantize_row_q8_k_ref`] and
    /// [`quantize_row_q8_0_ref`]).
    pub fn quantize_by(
        &mut self,
        pairing: Pairing,
        x: &[f32],
        n: usize,
        cols: usize,
        q8k: impl Fn(&[f32], &mut [BlockQ8K]) + Sync,
        q8_0: impl Fn(&[f32], &mut [BlockQ8_0]) + Sync,
    ) {
        assert_eq!(x.len(), n * cols, "activations are not (n, cols)");
        (self.n, self.cols) = (n, cols);
        match pairing {
            Pairing::Q8K => {
                assert!(cols.is_multiple_of(QK_K), "Q8_K needs whole blocks");
                self.q8k.resize(n * cols / QK_K, BlockQ8K::default());
                by_rows(x, &mut self.q8k, cols, q8k);
            }
            Pairing::Q8_0 => {
                assert!(cols.is_multiple_of(QK), "Q8_0 needs whole blocks");
                let zero = BlockQ8_0 {
                    d: [0; 2],
                    qs: [0; QK],
                };
                self.q8_0.resize(n * cols / QK, zero);
                by_rows(x, &mut self.q8_0, cols, q8_0);
            }
        }
    }

    /// Row t's Q8_K blocks.
    pub fn q8k_row(&self, t: usize) -> &[BlockQ8K] {
        let per = self.cols / QK_K;
        &self.q8k[t * per..(t + 1) * per]
    }

    /// Row t's Q8_0 blocks.
    pub fn q8_0_row(&self, t: usize) -> &[BlockQ8_0] {
        let per = self.cols / QK;
        &self.q8_0[t * per..(t + 1) * per]
    }
}

/// `quantize(x, y)` row by row (`cols` values each), the rows of a large
/// `x` split over rayon: every row quantizes on its own, so the blocks are
/// the same either way.
fn by_rows<B: Send>(
    x: &[f32],
    y: &mut [B],
    cols: usize,
    quantize: impl Fn(&[f32], &mut [B]) + Sync,
) {
    use rayon::prelude::*;
    let rows = x.len() / cols.max(1);
    if x.len() < PAR_VALUES || rows < 2 {
        quantize(x, y);
        return;
    }
    let per_row = y.len() / rows;
    x.par_chunks(cols)
        .zip(y.par_chunks_mut(per_row))
        .for_each(|(x, y)| quantize(x, y));
}

/// The values a Q8_K block stands for, `d · q`.
pub fn dequantize_q8k(b: &BlockQ8K, out: &mut [f32]) {
    for (o, &q) in out.iter_mut().zip(&b.qs) {
        *o = b.d * f32::from(q);
    }
}
