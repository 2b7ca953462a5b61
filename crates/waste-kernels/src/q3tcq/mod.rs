//! `q3-tcq`: trellis-coded weights at 3.25 bits per weight. Each row is
//! rotated by a seeded orthogonal transform that mixes the whole row
//! ([`Rotation`]: random signs, a Walsh-Hadamard transform over blocks of the
//! largest power of two dividing the width, a DCT across the blocks), so its
//! weights are near-Gaussian with one variance whatever their tails or
//! per-head scales, then coded by
//! trellis-coded quantization (Marcellin–Fischer, Ungerboeck's four
//! subsets, [`STATES`] states) along the whole row, with one log scale byte
//! per superblock of up to [`SB`] weights. The bits the scales do not use go
//! to finer steps: a superblock of `k` blocks of 32 has `8·(k − 1)` "wide"
//! steps that choose among 32 levels instead of 16. A row of `cols` weights
//! is `ceil(cols/32)` · [`BLOCK_BYTES`] bytes: exactly 3.25 bits per weight,
//! every scale included; the codebooks, the tap masks and the rotation's
//! sign pattern are fixed in the code.
//!
//! Owns the layout, the quantizer (a Viterbi search, [`viterbi`]), the
//! scalar decoder and the products ([`dot`]): activations rotated by the
//! same transform and quantized to int8 per 32, each block's levels decoded
//! from its branch bits and the previous block's. docs/FORMAT.md has the
//! byte layout, docs/QUANT.md the measurements behind every constant.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub mod dot;
pub mod viterbi;

use std::cell::RefCell;

use crate::hadamard;

/// Weights per block (the unit a row pads to).
pub const QK: usize = 32;
/// Bytes per block of 32 weights: 3.25 bits per weight.
pub const BLOCK_BYTES: usize = 13;
/// Blocks per full superblock (one scale byte each).
pub const SB_BLOCKS: usize = 6;
/// Weights per full superblock.
pub const SB: usize = QK * SB_BLOCKS;
/// Bits of trellis state: the last `NU` branch bits of the row.
pub const NU: u32 = 6;
/// Trellis states.
pub const STATES: usize = 1 << NU;
/// Taps of the subset parities over the newer `NU - 1` state bits.
pub const P_TAPS: u32 = 0b10011;
/// Taps of the branch parity over the newer `NU - 1` state bits.
pub const R_TAPS: u32 = 0b01010;
/// Seed of the rotation's per-column signs ([`hadamard::signs`]).
pub const ROTATION_SEED: u64 = 0x5eed;

/// The 16 levels of a 3-bit step: `round(58 · Φ⁻¹((i + ½)/16))`, the unit
/// Gaussian's quantiles in units of 1/58. Subset `j` is levels `4q + j`.
pub const LEVELS_3: [i8; 16] = [
    -108, -76, -59, -45, -34, -23, -14, -5, 5, 14, 23, 34, 45, 59, 76, 108,
];
/// The 32 levels of a wide (4-bit) step: `round(58 · Φ⁻¹((i + ½)/32))`.
pub const LEVELS_4: [i8; 32] = [
    -125, -97, -82, -71, -62, -55, -48, -42, -36, -31, -26, -21, -16, -11, -7, -2, 2, 7, 11, 16,
    21, 26, 31, 36, 42, 48, 55, 62, 71, 82, 97, 125,
];
/// Units of the levels per standard deviation.
const UNIT: f32 = 58.0;

/// Top exponent of the scale: `d = 2^(SCALE_TOP_EXP − s/16)`, so the
/// largest level (125) reaches ±31 and a superblock's RMS keeps
/// sixteenth-octave resolution down to about 2e-4.
pub const SCALE_TOP_EXP: i32 = -2;
/// `SCALES[s]`: the scale of byte `s`, exact powers of two times the 16
/// sixteenth-octave fractions.
pub static SCALES: [f32; 256] = scale_table();

/// First scale of a superblock: its RMS times `RHO` (over the unit).
/// Measured best with the refit that follows (docs/QUANT.md).
const RHO: f32 = 1.33;
/// Rounds of (Viterbi at the current scales, least-squares refit).
const PASSES: usize = 1;

const fn scale_table() -> [f32; 256] {
    // 2^(-i/16), i = 0..16, rounded to f32.
    const FRAC: [f32; 16] = [
        1.0,
        0.957_603_3,
        0.917_004_05,
        0.878_126_1,
        0.840_896_4,
        0.805_245_16,
        0.771_105_4,
        0.738_413_1,
        0.707_106_77,
        0.677_127_8,
        0.648_419_8,
        0.620_928_9,
        0.594_603_54,
        0.569_394_3,
        0.545_253_9,
        0.522_136_87,
    ];
    let mut t = [0f32; 256];
    let mut s = 0;
    while s < 256 {
        // 2^(SCALE_TOP_EXP - s/16) = FRAC[s % 16] · 2^(SCALE_TOP_EXP - s/16 whole).
        let mut p = 1f32;
        let mut e = SCALE_TOP_EXP - (s / 16) as i32;
        while e < 0 {
            p *= 0.5;
            e += 1;
        }
        while e > 0 {
            p *= 2.0;
            e -= 1;
        }
        t[s] = FRAC[s % 16] * p;
        s += 1;
    }
    t
}

/// The scale byte nearest `d` (in level units); 255 (the smallest) for
/// zero, negative or NaN.
fn scale_byte(d: f32) -> u8 {
    let s = (16.0 * (SCALE_TOP_EXP as f32 - d.log2())).round();
    if s.is_nan() {
        255
    } else {
        s.clamp(0.0, 255.0) as u8
    }
}

/// The subset (0..4) of branch `b` leaving `state` (the last [`NU`] branch
/// bits, the newest in bit 0): `2·(b ⊕ r) + p`, `p` the parity of the newer
/// bits under [`P_TAPS`], `r` the oldest bit ⊕ their parity under [`R_TAPS`].
/// The two branches leaving a state take subsets `p` and `p + 2`; the two
/// merging into one share `p` and differ in `r` (Ungerboeck's rules).
pub const fn subset(state: u32, b: u32) -> u32 {
    let newer = state & ((1 << (NU - 1)) - 1);
    let oldest = (state >> (NU - 1)) & 1;
    let p = (newer & P_TAPS).count_ones() & 1;
    let r = oldest ^ ((newer & R_TAPS).count_ones() & 1);
    2 * (b ^ r) + p
}

/// Bytes of one packed row of `cols` weights.
pub fn row_bytes(cols: usize) -> usize {
    cols.div_ceil(QK) * BLOCK_BYTES
}

/// Wide (32-level) steps in a superblock of `k` blocks.
pub fn wide_steps(k: usize) -> usize {
    8 * k.saturating_sub(1)
}

/// Whether step `t` (0..32·k) of a superblock of `k` blocks is wide: the
/// [`wide_steps`] of them spread evenly, `⌊(t+1)·m/32k⌋ > ⌊t·m/32k⌋`.
#[inline]
pub fn is_wide(k: usize, t: usize) -> bool {
    (WIDE[k][t / QK] >> (t % QK)) & 1 == 1
}

/// Bit `i` set if step `32·blk + i` of a superblock of `k` blocks is wide.
#[inline]
pub fn wide_mask(k: usize, blk: usize) -> u32 {
    WIDE[k][blk]
}

/// Where block `blk` of a superblock of `k` blocks finds its wide bits, for
/// the SIMD decoders: `start`, the superblock's wide steps before the
/// block (its first wide bit's index in the superblock's wide bytes);
/// `bit[i]`, `1 << j` at the block's `j`-th wide step `i` and 0 elsewhere
/// (a broadcast of the block's wide byte, masked by it, shows each wide
/// step its own bit); `mask[i]`, `0xFF` at the wide steps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WidePlaces {
    pub start: u32,
    pub bit: [u8; QK],
    pub mask: [u8; QK],
}

/// [`WidePlaces`] of every block of every superblock size (`[k][blk]`).
pub(crate) static WIDE_PLACES: [[WidePlaces; SB_BLOCKS]; SB_BLOCKS + 1] = wide_places();

const fn wide_places() -> [[WidePlaces; SB_BLOCKS]; SB_BLOCKS + 1] {
    let masks = wide_masks();
    let none = WidePlaces {
        start: 0,
        bit: [0; QK],
        mask: [0; QK],
    };
    let mut t = [[none; SB_BLOCKS]; SB_BLOCKS + 1];
    let mut k = 1;
    while k <= SB_BLOCKS {
        let mut start = 0u32;
        let mut b = 0;
        while b < k {
            let mut places = WidePlaces { start, ..none };
            let mut j = 0u32;
            let mut i = 0;
            while i < QK {
                if (masks[k][b] >> i) & 1 == 1 {
                    places.bit[i] = 1u8 << j;
                    places.mask[i] = 0xFF;
                    j += 1;
                }
                i += 1;
            }
            t[k][b] = places;
            start += j;
            b += 1;
        }
        k += 1;
    }
    t
}

/// `WIDE[k][b]`: bit `i` set if step `32b + i` of a superblock of `k`
/// blocks is wide.
static WIDE: [[u32; SB_BLOCKS]; SB_BLOCKS + 1] = wide_masks();

pub(crate) const fn wide_masks() -> [[u32; SB_BLOCKS]; SB_BLOCKS + 1] {
    let mut t = [[0u32; SB_BLOCKS]; SB_BLOCKS + 1];
    let mut k = 1;
    while k <= SB_BLOCKS {
        let (n, m) = (QK * k, 8 * (k - 1));
        let mut i = 0;
        while i < n {
            if (i + 1) * m / n > i * m / n {
                t[k][i / QK] |= 1 << (i % QK);
            }
            i += 1;
        }
        k += 1;
    }
    t
}

/// The superblocks of a row of `nb` blocks: `(first block, blocks)`.
fn superblocks(nb: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..nb)
        .step_by(SB_BLOCKS)
        .map(move |b0| (b0, (nb - b0).min(SB_BLOCKS)))
}

/// Largest odd factor of a width that the DCT stage of [`Rotation`] mixes;
/// rows with a larger one are rotated within their power-of-two blocks only.
pub const MAX_DCT: usize = 64;

/// The orthogonal transform of rows of `cols` weights, `x = C·H·(s ⊙ w)`:
/// `s` the seeded signs [`hadamard::signs`]`(cols, ROTATION_SEED)`, `H` the
/// orthonormal Walsh-Hadamard transform over consecutive blocks of `p`
/// weights (`p` the largest power of two dividing `cols`), `C` the
/// orthonormal DCT-II of size `m = cols / p` across the blocks (applied to
/// the `m` weights at each offset within the blocks; the identity when
/// `m = 1` or `m >` [`MAX_DCT`]). A plain block Hadamard keeps, for
/// example, the per-head scales of an attention output projection whose
/// heads are the blocks; the DCT mixes them.
#[derive(Debug, Clone)]
pub struct Rotation {
    cols: usize,
    p: usize,
    m: usize,
    signs: Vec<f32>,
    /// `dct[k·m + i] = c_k · cos(π·(i + ½)·k / m)`, orthonormal rows.
    dct: Vec<f32>,
}

impl Rotation {
    /// The rotation of rows of `cols ≥ 1` weights.
    pub fn new(cols: usize) -> Self {
        let p = 1usize << cols.max(1).trailing_zeros();
        let m = cols / p;
        let dct = if m > 1 && m <= MAX_DCT {
            (0..m * m)
                .map(|ki| {
                    let (k, i) = (ki / m, ki % m);
                    let c = if k == 0 {
                        (1.0 / m as f64).sqrt()
                    } else {
                        (2.0 / m as f64).sqrt()
                    };
                    (c * (std::f64::consts::PI * (i as f64 + 0.5) * k as f64 / m as f64).cos())
                        as f32
                })
                .collect()
        } else {
            Vec::new()
        };
        Self {
            cols,
            p,
            m,
            signs: hadamard::signs(cols, ROTATION_SEED),
            dct,
        }
    }

    /// `x ← C·H·(s ⊙ x)` (`x.len()` = cols).
    pub fn apply(&self, x: &mut [f32]) {
        x.iter_mut().zip(&self.signs).for_each(|(v, s)| *v *= s);
        x.chunks_mut(self.p).for_each(hadamard::fwht);
        self.mix(x, false);
    }

    /// `x ← s ⊙ H·Cᵀ·x`: the inverse of [`Rotation::apply`].
    pub fn undo(&self, x: &mut [f32]) {
        self.mix(x, true);
        x.chunks_mut(self.p).for_each(hadamard::fwht);
        x.iter_mut().zip(&self.signs).for_each(|(v, s)| *v *= s);
    }

    /// The DCT stage (or its transpose) at every offset within the blocks:
    /// output block `k` is `Σ_i c(k, i) · block i`, whole blocks at a time.
    fn mix(&self, x: &mut [f32], transpose: bool) {
        if self.dct.is_empty() {
            return;
        }
        let (m, p) = (self.m, self.p);
        let src = x.to_vec();
        for (k, out) in x.chunks_exact_mut(p).enumerate() {
            out.fill(0.0);
            for (i, block) in src.chunks_exact(p).enumerate() {
                let c = if transpose {
                    self.dct[i * m + k]
                } else {
                    self.dct[k * m + i]
                };
                out.iter_mut().zip(block).for_each(|(o, &v)| *o += c * v);
            }
        }
    }
}

/// Widths whose rotations a thread keeps: an expert's products alternate
/// between its input width (gate, up) and its hidden width (down); a
/// backbone's add the attention's and the head's.
const KEPT_ROTATIONS: usize = 8;

thread_local! {
    /// The rotations of the widths this thread used last, newest first.
    static ROTATIONS: RefCell<Vec<Rotation>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with the rotation of rows of `cols ≥ 1` weights.
fn with_rotation<R>(cols: usize, f: impl FnOnce(&Rotation) -> R) -> R {
    ROTATIONS.with(|c| {
        let mut kept = c.borrow_mut();
        match kept.iter().position(|r| r.cols == cols) {
            Some(i) => kept[..=i].rotate_right(1),
            None => {
                kept.insert(0, Rotation::new(cols));
                kept.truncate(KEPT_ROTATIONS);
            }
        }
        f(&kept[0])
    })
}

/// `x ← R·x` for the rotation of rows of `x.len()` weights: the basis a
/// row's levels live in (`dequantize_row` ends with its inverse).
pub fn rotate(x: &mut [f32]) {
    if !x.is_empty() {
        with_rotation(x.len(), |r| r.apply(x));
    }
}

/// `x` (n, cols) through the rows' rotation, quantized to int8 per 32 with
/// one scale per superblock ([`QuantizedActs::shared`]): the activations
/// of a `q3-tcq` product.
///
/// [`QuantizedActs::shared`]: crate::quant::QuantizedActs::shared
pub fn rotated_acts(x: &[f32], n: usize, cols: usize) -> crate::quant::QuantizedActs {
    let mut r = x.to_vec();
    if cols > 0 {
        with_rotation(cols, |rot| {
            r.chunks_exact_mut(cols).for_each(|row| rot.apply(row));
        });
    }
    let mut acts = crate::quant::QuantizedActs::default();
    acts.quantize_shared(&r, n, cols, SB_BLOCKS);
    acts
}

/// One weight's code: its branch bit and its level index (`4q + subset`,
/// 0..16, or 0..32 on a wide step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Code {
    pub branch: u8,
    pub level: u8,
}

/// Packs one superblock: `scale`, then the codes of its `32·k` steps
/// (`codes.len()`), into `out` (`13·k` bytes).
pub fn pack_superblock(scale: u8, codes: &[Code], out: &mut [u8]) {
    let k = codes.len() / QK;
    debug_assert_eq!(out.len(), BLOCK_BYTES * k);
    out.fill(0);
    out[0] = scale;
    let mut wide = 0;
    for (t, c) in codes.iter().enumerate() {
        let (blk, i) = (t / QK, t % QK);
        out[1 + 4 * blk + i / 8] |= (c.branch & 1) << (i % 8);
        let q = c.level >> 2;
        out[1 + 4 * k + 8 * blk + i % 8] |= (q & 3) << (2 * (i / 8));
        if is_wide(k, t) {
            out[1 + 12 * k + wide / 8] |= ((q >> 2) & 1) << (wide % 8);
            wide += 1;
        }
    }
}

/// The 32 level values of block `blk` of the superblock `sb` (`k` blocks):
/// the scalar decoder of the layout. `state` is the trellis state before
/// the block's first step and `wide` the superblock's wide steps before it;
/// both are advanced past the block.
fn block_levels(
    sb: &[u8],
    k: usize,
    blk: usize,
    state: &mut u32,
    wide: &mut usize,
    out: &mut [i8; QK],
) {
    for (i, o) in out.iter_mut().enumerate() {
        let b = u32::from(sb[1 + 4 * blk + i / 8] >> (i % 8)) & 1;
        let mut q = u32::from(sb[1 + 4 * k + 8 * blk + i % 8] >> (2 * (i / 8))) & 3;
        let j = subset(*state, b);
        *o = if is_wide(k, blk * QK + i) {
            q |= (u32::from(sb[1 + 12 * k + *wide / 8] >> (*wide % 8)) & 1) << 2;
            *wide += 1;
            LEVELS_4[(4 * q + j) as usize]
        } else {
            LEVELS_3[(4 * q + j) as usize]
        };
        *state = ((*state << 1) | b) & (STATES as u32 - 1);
    }
}

/// Calls `f(b, d, levels)` for each block `b` of a row of `nb` blocks in
/// order, with its superblock's scale and its 32 levels: the scalar decoder
/// of a row ([`block_levels`] with the state carried along).
pub(crate) fn each_block(row: &[u8], nb: usize, mut f: impl FnMut(usize, f32, &[i8; QK])) {
    let mut state = 0u32;
    let mut levels = [0i8; QK];
    for (b0, k) in superblocks(nb) {
        let sb = &row[b0 * BLOCK_BYTES..(b0 + k) * BLOCK_BYTES];
        let d = SCALES[usize::from(sb[0])];
        let mut wide = 0;
        for blk in 0..k {
            block_levels(sb, k, blk, &mut state, &mut wide, &mut levels);
            f(b0 + blk, d, &levels);
        }
    }
}

/// Decodes one row (`out.len()` = cols weights) from its packed bytes:
/// each block's levels in the rotated basis, scaled, then the rotation
/// undone.
pub fn dequantize_row(row: &[u8], out: &mut [f32]) {
    let cols = out.len();
    let nb = cols.div_ceil(QK);
    let mut y = vec![0f32; nb * QK];
    each_block(row, nb, |b, d, levels| {
        for (o, &l) in y[b * QK..(b + 1) * QK].iter_mut().zip(levels) {
            *o = d * f32::from(l);
        }
    });
    let y = &mut y[..cols];
    if cols > 0 {
        with_rotation(cols, |r| r.undo(y));
    }
    out.copy_from_slice(y);
}

/// Quantizes one row (`w.len()` weights) into `out` ([`row_bytes`]);
/// returns the squared error (f64), measured in the rotated basis (the
/// rotation is orthogonal: the same up to its f32 rounding). A non-finite
/// weight is coded as 0 and makes the error NaN.
pub fn quantize_row(w: &[f32], out: &mut [u8]) -> f64 {
    let cols = w.len();
    let nb = cols.div_ceil(QK);
    let n = nb * QK;
    let mut x = vec![0f32; n];
    for (o, &v) in x.iter_mut().zip(w) {
        *o = if v.is_finite() { v } else { 0.0 };
    }
    if cols == 0 {
        return 0.0;
    }
    with_rotation(cols, |r| r.apply(&mut x[..cols]));

    let sbs: Vec<(usize, usize)> = superblocks(nb).collect();
    let mut wide = vec![false; n];
    for &(b0, k) in &sbs {
        for t in 0..QK * k {
            wide[b0 * QK + t] = is_wide(k, t);
        }
    }
    let live = |b0: usize, k: usize| (b0 * QK)..((b0 + k) * QK).min(cols);
    let mut scales: Vec<u8> = sbs
        .iter()
        .map(|&(b0, k)| {
            let g = &x[live(b0, k)];
            let ms = g.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / g.len() as f64;
            scale_byte(ms.sqrt() as f32 * RHO / UNIT)
        })
        .collect();

    let mut dpos = vec![0f32; n];
    let mut err = 0f64;
    let mut back = vec![0u64; n];
    let mut codes = vec![Code::default(); n];
    for _ in 0..PASSES {
        for (&(b0, k), &s) in sbs.iter().zip(&scales) {
            dpos[b0 * QK..(b0 + k) * QK].fill(SCALES[usize::from(s)]);
        }
        let search = viterbi::Search {
            x: &x,
            d: &dpos,
            wide: &wide,
            live: cols,
        };
        let end = search.forward(&mut back);
        search.traceback(end, &back, &mut codes);
        err = 0.0;
        for (&(b0, k), s) in sbs.iter().zip(scales.iter_mut()) {
            let r = live(b0, k);
            let (best, e) = refit(&x[r.clone()], &codes[r.clone()], &wide[r], *s);
            *s = best;
            err += e;
        }
    }
    for (&(b0, k), &s) in sbs.iter().zip(&scales) {
        pack_superblock(
            s,
            &codes[b0 * QK..(b0 + k) * QK],
            &mut out[b0 * BLOCK_BYTES..(b0 + k) * BLOCK_BYTES],
        );
    }
    if w.iter().all(|v| v.is_finite()) {
        err
    } else {
        f64::NAN
    }
}

/// The level value of `code` on a step of the given width.
fn level_value(code: Code, wide: bool) -> f32 {
    let i = usize::from(code.level);
    f32::from(if wide { LEVELS_4[i] } else { LEVELS_3[i] })
}

/// With a superblock's codes fixed, the scale byte of least squared error
/// among the current one and the least-squares scale's byte and its
/// neighbours (the first of equals, in that order), with its error.
fn refit(x: &[f32], codes: &[Code], wide: &[bool], current: u8) -> (u8, f64) {
    let (mut xx, mut xl, mut ll) = (0f64, 0f64, 0f64);
    for ((&v, &c), &w) in x.iter().zip(codes).zip(wide) {
        let (v, l) = (f64::from(v), f64::from(level_value(c, w)));
        xx += v * v;
        xl += v * l;
        ll += l * l;
    }
    // Σ (x − d·l)² expanded: one pass over the weights for every candidate.
    let err = |s: u8| -> f64 {
        let d = f64::from(SCALES[usize::from(s)]);
        (xx - 2.0 * d * xl + d * d * ll).max(0.0)
    };
    let mut best = (current, err(current));
    if ll > 0.0 && xl > 0.0 {
        let s = scale_byte((xl / ll) as f32);
        for cand in [s, s.saturating_sub(1), s.saturating_add(1)] {
            let e = err(cand);
            if e < best.1 {
                best = (cand, e);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_is_orthogonal_and_undone() {
        // Widths with odd factors 1, 3, 9, 7, 45 and one above MAX_DCT.
        for cols in [256usize, 384, 576, 7168, 2880, 134] {
            let r = Rotation::new(cols);
            let w: Vec<f32> = (0..cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let mut x = w.clone();
            r.apply(&mut x);
            let norm = |v: &[f32]| v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>();
            assert!((norm(&x) / norm(&w) - 1.0).abs() < 1e-5, "{cols}: norm");
            r.undo(&mut x);
            for (a, b) in x.iter().zip(&w) {
                assert!((a - b).abs() < 1e-4 * (1.0 + b.abs()), "{cols}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn levels_are_the_gaussian_quantiles() {
        for (n, levels) in [(16, &LEVELS_3[..]), (32, &LEVELS_4[..])] {
            for (i, &l) in levels.iter().enumerate() {
                let q = crate::quant::trellis::inv_normal_cdf((i as f64 + 0.5) / n as f64);
                assert_eq!(
                    f64::from(l),
                    (f64::from(UNIT) * q).round(),
                    "level {i} of {n}"
                );
            }
        }
    }

    #[test]
    fn scales_are_sixteenth_octaves() {
        for (s, &d) in SCALES.iter().enumerate() {
            let want = 2f64.powf(f64::from(SCALE_TOP_EXP) - s as f64 / 16.0);
            assert!(
                (f64::from(d) / want - 1.0).abs() < 1e-7,
                "scale {s}: {d} vs {want}"
            );
            assert_eq!(scale_byte(d), s as u8);
        }
    }

    #[test]
    fn superblocks_cost_exactly_13_bytes_per_32_weights() {
        for k in 1..=SB_BLOCKS {
            let bits = 8 + 32 * k + 2 * 32 * k + wide_steps(k);
            assert_eq!(bits, 8 * BLOCK_BYTES * k, "superblock of {k} blocks");
            assert_eq!(
                (0..QK * k).filter(|&t| is_wide(k, t)).count(),
                wide_steps(k)
            );
        }
    }

    #[test]
    fn branches_follow_ungerboecks_rules() {
        for s in 0..STATES as u32 {
            // The two branches leaving a state take D_p and D_p+2.
            let (a, b) = (subset(s, 0), subset(s, 1));
            assert_eq!(a % 2, b % 2);
            assert_ne!(a, b);
            // The two branches merging into a state share p and differ in r.
            let ns = s;
            let (p0, p1) = (ns >> 1, (ns >> 1) | 1 << (NU - 1));
            let (c0, c1) = (subset(p0, ns & 1), subset(p1, ns & 1));
            assert_eq!(c0 % 2, c1 % 2);
            assert_ne!(c0, c1);
        }
    }

    #[test]
    fn pack_then_decode_reads_the_codes_back() {
        // Codes whose levels are distinct per position decode to d · level
        // in the rotated basis: check through a row with a unit scale.
        for k in 1..=SB_BLOCKS {
            let mut state = 0u32;
            let mut codes = vec![Code::default(); QK * k];
            for (t, c) in codes.iter_mut().enumerate() {
                let b = ((t * 7 + k) % 3 == 0) as u32;
                let q = ((t * 5 + 1) % if is_wide(k, t) { 8 } else { 4 }) as u32;
                *c = Code {
                    branch: b as u8,
                    level: (4 * q + subset(state, b)) as u8,
                };
                state = ((state << 1) | b) & (STATES as u32 - 1);
            }
            let mut bytes = vec![0u8; BLOCK_BYTES * k];
            pack_superblock(32, &codes, &mut bytes);
            let mut y = vec![0f32; QK * k];
            dequantize_row(&bytes, &mut y);
            Rotation::new(QK * k).apply(&mut y);
            for (t, (&v, &c)) in y.iter().zip(&codes).enumerate() {
                let want = SCALES[32] * level_value(c, is_wide(k, t));
                assert!(
                    (v - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "k {k} t {t}: {v} vs {want}"
                );
            }
        }
    }
}
