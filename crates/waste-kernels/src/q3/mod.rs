//! `q3` and `q3-rtn`: 3-bit codes on an 8-level grid, one signed log scale byte
//! per group of 32 weights (13 bytes per 32 weights = 3.25 bits per weight,
//! every scale included; a packed matrix is its blocks and nothing else).
//!
//! Owns the block layout, the quantizer of a row and the `_ref` dot product;
//! the SIMD versions live in [`avx2`] and [`avx512`]. `q3` uses a non-uniform
//! grid with an error-minimising scale search; `q3-rtn` is the baseline: the
//! same block with a uniform grid and plain absmax round-to-nearest.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod reference;

use crate::quant::scale::{GroupSearch, scale_table};

/// One group of 32 weights.
///
/// `w[i] = d(scale) · GRID[c_i] / 16` with the 3-bit code
/// `c_i = lo_i | hi_i << 2`, `lo_i = (qs[i % 8] >> 2·(i / 8)) & 3` and
/// `hi_i = (H >> (8·(i % 4) + 7 - i / 4)) & 1`, `H = u32::from_le_bytes(qh)`;
/// `d` is the signed log scale of [`crate::quant::scale`] with top exponent
/// [`SCALE_TOP_EXP`], folded into [`SCALES`]. 32 weights, 13 bytes: 3.25 bits
/// per weight. (The bit orders are chosen so that AVX2 unpacks a block with
/// one variable shift per plane: see `q3/avx2.rs`.)
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockQ3 {
    /// Sign (bit 7) and eighth-octave step (bits 0..7) of the group scale.
    pub scale: u8,
    /// Low two bits of each code: weight `i` at byte `i % 8`, bits `2·(i / 8)`.
    pub qs: [u8; 8],
    /// High bit of each code: weight `i` at bit `8·(i % 4) + 7 - i / 4` of the little-endian u32.
    pub qh: [u8; 4],
}
const _: () = assert!(size_of::<BlockQ3>() == 13);

/// Weights per block.
pub const QK: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = size_of::<BlockQ3>();

/// `q3` grid in sixteenths: {-4, -2.6875, -1.625, -0.8125, 0, 0.8125, 1.625, 2.6875}.
/// Asymmetric with a zero level; the scale sign mirrors it per group.
/// Padded to 16 entries (a byte-shuffle table); codes 8..15 never occur.
pub const GRID_Q3: [i8; 16] = [-64, -43, -26, -13, 0, 13, 26, 43, 0, 0, 0, 0, 0, 0, 0, 0];
/// `q3-rtn` grid in sixteenths: the uniform {-4, ..., 3}.
pub const GRID_Q3_RTN: [i8; 16] = [-64, -48, -32, -16, 0, 16, 32, 48, 0, 0, 0, 0, 0, 0, 0, 0];
/// Grid index of the zero level (used for the absent weights of a tail group).
pub const ZERO_CODE: u8 = 4;

/// Top exponent of the scale: `|d| ≤ 2^3`, so with the grid's end at -4 a
/// group's largest weight may reach 32, and groups whose largest weight is
/// down to `4 · 2^(3 - 127/8)` ≈ 5.3e-4 keep full resolution.
pub const SCALE_TOP_EXP: i32 = 3;
/// Scale of each scale byte, divided by 16 (the grid's unit): `w = SCALES[s] · GRID[c]`.
pub static SCALES: [f32; 256] = sixteenths(scale_table(SCALE_TOP_EXP));

const fn sixteenths(mut t: [f32; 256]) -> [f32; 256] {
    let mut i = 0;
    while i < 256 {
        t[i] /= 16.0;
        i += 1;
    }
    t
}

/// The 3-bit code of weight `i` of a block.
#[inline]
pub fn code(b: &[u8], i: usize) -> usize {
    let lo = (b[1 + i % 8] >> (2 * (i / 8))) & 3;
    let hi = (b[9 + i % 4] >> (7 - i / 4)) & 1;
    usize::from(lo | (hi << 2))
}

/// Packs 32 codes (0..8) and a scale byte into `out` (13 bytes).
pub fn pack(scale: u8, codes: &[u8; QK], out: &mut [u8]) {
    let mut blk = BlockQ3 {
        scale,
        ..BlockQ3::default()
    };
    for (i, &c) in codes.iter().enumerate() {
        blk.qs[i % 8] |= (c & 3) << (2 * (i / 8));
        blk.qh[i % 4] |= ((c >> 2) & 1) << (7 - i / 4);
    }
    out[0] = blk.scale;
    out[1..9].copy_from_slice(&blk.qs);
    out[9..13].copy_from_slice(&blk.qh);
}

/// Quantizes one row (`w.len()` weights, the last group possibly partial)
/// into `out` (`ceil(len/32)` blocks); returns the squared error.
/// `window` 0 is plain round-to-nearest at the absmax scale.
pub fn quantize_row(grid: &[i8; 16], window: i32, w: &[f32], out: &mut [u8]) -> f64 {
    let levels: [f32; 8] = std::array::from_fn(|i| f32::from(grid[i]));
    let search = GroupSearch {
        grid: &levels,
        zero_index: ZERO_CODE,
        table: &SCALES,
        window,
    };
    let mut err = 0f64;
    for (g, blk) in w.chunks(QK).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        let mut codes = [ZERO_CODE; QK];
        let (scale, e) = search.run(g, &mut codes);
        err += e;
        pack(scale, &codes, blk);
    }
    err
}

/// Dequantizes one row of `out.len()` weights from its blocks.
pub fn dequantize_row(grid: &[i8; 16], row: &[u8], out: &mut [f32]) {
    for (g, blk) in out.chunks_mut(QK).zip(row.chunks_exact(BLOCK_BYTES)) {
        let d = SCALES[usize::from(blk[0])];
        for (i, o) in g.iter_mut().enumerate() {
            *o = d * f32::from(grid[code(blk, i)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_then_code_round_trips() {
        let codes: [u8; QK] = std::array::from_fn(|i| ((i * 5 + 3) % 8) as u8);
        let mut b = [0u8; BLOCK_BYTES];
        pack(0x85, &codes, &mut b);
        assert_eq!(b[0], 0x85);
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(code(&b, i), usize::from(c));
        }
    }
}
