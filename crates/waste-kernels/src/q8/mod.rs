//! `q8`: int8 codes with one f16 scale per group of 32 weights (llama.cpp's
//! Q8_0 block): 34 bytes per 32 weights = 8.5 bits per weight. The backbone
//! format: near-lossless, wide range, no grid.
//!
//! Owns the block layout, the row quantizer and the `_ref` dot product; the
//! SIMD versions are in [`avx2`] and [`avx512`].

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod reference;

use half::f16;

/// One group of 32 weights: `w[i] = d · qs[i]`, `qs[i] ∈ [-127, 127]`,
/// `d = f16(max|w| / 127)`. 32 weights, 34 bytes: 8.5 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockQ8 {
    /// The scale, IEEE f16 bits, little-endian.
    pub d: [u8; 2],
    /// Codes.
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8>() == 34);

/// Weights per block.
pub const QK: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = size_of::<BlockQ8>();

/// The f32 scale of a block.
#[inline]
pub fn scale(blk: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32()
}

/// Quantizes one row into `out` (`ceil(len/32)` blocks); returns the squared error.
pub fn quantize_row(w: &[f32], out: &mut [u8]) -> f64 {
    let mut err = 0f64;
    for (g, blk) in w.chunks(QK).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        let amax = g.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = f16::from_f32(amax / 127.0);
        let df = d.to_f32();
        let inv = if df > 0.0 { 1.0 / df } else { 0.0 };
        blk[..2].copy_from_slice(&d.to_bits().to_le_bytes());
        blk[2..].fill(0);
        for (i, &x) in g.iter().enumerate() {
            let q = (x * inv).round().clamp(-127.0, 127.0) as i8;
            blk[2 + i] = q as u8;
            let e = f64::from(x - df * f32::from(q));
            err += e * e;
        }
    }
    err
}

/// Dequantizes one row of `out.len()` weights from its blocks.
pub fn dequantize_row(row: &[u8], out: &mut [f32]) {
    for (g, blk) in out.chunks_mut(QK).zip(row.chunks_exact(BLOCK_BYTES)) {
        let d = scale(blk);
        for (i, o) in g.iter_mut().enumerate() {
            *o = d * f32::from(blk[2 + i] as i8);
        }
    }
}
