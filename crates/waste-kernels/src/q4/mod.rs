//! `q4`: 4-bit codes on a 16-level non-uniform grid (llama.cpp's IQ4_NL
//! values), one signed log scale byte per group of 32 weights: 17 bytes per
//! 32 weights = 4.25 bits per weight. For tensors too sensitive for `q3`.
//!
//! Owns the block layout, the row quantizer and the `_ref` dot product; the
//! SIMD versions are in [`avx2`] and [`avx512`].

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod reference;

use crate::quant::scale::{GroupSearch, SEARCH_WINDOW, scale_table};

/// One group of 32 weights.
///
/// `w[i] = d(scale) · GRID_Q4[c_i] / 32` with `c_i = qs[i] & 15` for `i < 16`
/// and `qs[i - 16] >> 4` for `i ≥ 16`; `d` the signed log scale of
/// [`crate::quant::scale`] with top exponent [`SCALE_TOP_EXP`], folded into
/// [`SCALES`]. 32 weights, 17 bytes: 4.25 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockQ4 {
    /// Sign (bit 7) and eighth-octave step (bits 0..7) of the group scale.
    pub scale: u8,
    /// Codes: weight `i < 16` in the low nibble of byte `i`, `i ≥ 16` in the high nibble of byte `i - 16`.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4>() == 17);

/// Weights per block.
pub const QK: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = size_of::<BlockQ4>();
/// The grid in 32nds (IQ4_NL's `kvalues_iq4nl`), ascending.
pub const GRID_Q4: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];
/// Grid index written for the absent weights of a tail group (value 1/32: they meet zero activations).
pub const ZERO_CODE: u8 = 8;
/// Top exponent of the scale: a group's largest weight may reach `2^3 · 127/32 ≈ 32`.
pub const SCALE_TOP_EXP: i32 = 3;
/// Scale of each scale byte, divided by 32 (the grid's unit): `w = SCALES[s] · GRID_Q4[c]`.
pub static SCALES: [f32; 256] = thirty_seconds(scale_table(SCALE_TOP_EXP));

const fn thirty_seconds(mut t: [f32; 256]) -> [f32; 256] {
    let mut i = 0;
    while i < 256 {
        t[i] /= 32.0;
        i += 1;
    }
    t
}

/// The 4-bit code of weight `i` of a block.
#[inline]
pub fn code(b: &[u8], i: usize) -> usize {
    usize::from((b[1 + i % 16] >> (4 * (i / 16))) & 15)
}

/// Quantizes one row into `out` (`ceil(len/32)` blocks); returns the squared error.
pub fn quantize_row(w: &[f32], out: &mut [u8]) -> f64 {
    let levels: [f32; 16] = GRID_Q4.map(f32::from);
    let search = GroupSearch {
        grid: &levels,
        zero_index: ZERO_CODE,
        table: &SCALES,
        window: SEARCH_WINDOW,
    };
    let mut err = 0f64;
    for (g, blk) in w.chunks(QK).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        let mut codes = [ZERO_CODE; QK];
        let (scale, e) = search.run(g, &mut codes);
        err += e;
        blk[0] = scale;
        for i in 0..16 {
            blk[1 + i] = codes[i] | (codes[i + 16] << 4);
        }
    }
    err
}

/// Dequantizes one row of `out.len()` weights from its blocks.
pub fn dequantize_row(row: &[u8], out: &mut [f32]) {
    for (g, blk) in out.chunks_mut(QK).zip(row.chunks_exact(BLOCK_BYTES)) {
        let d = SCALES[usize::from(blk[0])];
        for (i, o) in g.iter_mut().enumerate() {
            *o = d * f32::from(GRID_Q4[code(blk, i)]);
        }
    }
}
