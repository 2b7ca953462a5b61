//! The 32-weight ggml blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and
//! MXFP4 (ggml-common.h `block_q4_0` .. `block_mxfp4`). In all the 4- and
//! 5-bit ones, byte j of `qs` holds weight j in its low nibble and weight
//! j + 16 in its high nibble.

use super::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};
use super::{GgmlBlock, GgmlType, f16_le, pod_block};

/// Weights per block.
pub const QK: usize = 32;

/// Q4_0: `w = d * (q - 8)`, q the 4-bit code. 32 weights in 18 bytes: 4.5
/// bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4_0 {
    /// f16 scale.
    pub d: [u8; 2],
    /// Codes, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

/// Q4_1: `w = d * q + m`, q the 4-bit code. 32 weights in 20 bytes: 5 bits
/// per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4_1 {
    /// f16 scale.
    pub d: [u8; 2],
    /// f16 offset (the block minimum).
    pub m: [u8; 2],
    /// Codes, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

/// Q5_0: `w = d * (q - 16)`, q the 5-bit code whose fifth bit is bit j of
/// the little-endian u32 `qh` for weight j. 32 weights in 22 bytes: 5.5
/// bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5_0 {
    /// f16 scale.
    pub d: [u8; 2],
    /// Fifth bits, bit j for weight j (u32, little-endian).
    pub qh: [u8; 4],
    /// Low four bits, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

/// Q5_1: `w = d * q + m`, q the 5-bit code as in Q5_0. 32 weights in 24
/// bytes: 6 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5_1 {
    /// f16 scale.
    pub d: [u8; 2],
    /// f16 offset (the block minimum).
    pub m: [u8; 2],
    /// Fifth bits, bit j for weight j (u32, little-endian).
    pub qh: [u8; 4],
    /// Low four bits, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

/// Q8_0: `w = q * d`, q an i8. 32 weights in 34 bytes: 8.5 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ8_0 {
    /// f16 scale.
    pub d: [u8; 2],
    /// Codes (i8).
    pub qs: [u8; 32],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

/// IQ4_NL: `w = d * KVALUES_IQ4NL[q]`, q the 4-bit code (a non-uniform
/// grid). 32 weights in 18 bytes: 4.5 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq4Nl {
    /// f16 scale.
    pub d: [u8; 2],
    /// Codes, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockIq4Nl>() == 18);

/// MXFP4 (OCP microscaling FP4): `w = e2m1(q) * 2^(e - 127)`, computed as
/// `KVALUES_MXFP4[q] * 2^(e - 128)` (the table holds doubled values). 32
/// weights in 17 bytes: 4.25 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockMxfp4 {
    /// E8M0 shared exponent.
    pub e: [u8; 1],
    /// E2M1 codes, low nibble weight j, high nibble weight j + 16.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockMxfp4>() == 17);

pod_block!(
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockIq4Nl, BlockMxfp4
);

/// Weights j and j + 16 of a nibble-packed block: `(low, high)` codes.
#[inline]
fn nibbles(q: u8) -> (u8, u8) {
    (q & 0x0F, q >> 4)
}

impl GgmlBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (j, &q) in self.qs.iter().enumerate() {
            let (lo, hi) = nibbles(q);
            y[j] = f32::from(lo as i8 - 8) * d;
            y[j + 16] = f32::from(hi as i8 - 8) * d;
        }
    }
}

impl GgmlBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let (d, m) = (f16_le(self.d), f16_le(self.m));
        for (j, &q) in self.qs.iter().enumerate() {
            let (lo, hi) = nibbles(q);
            y[j] = d * f32::from(lo) + m;
            y[j + 16] = d * f32::from(hi) + m;
        }
    }
}

/// The 5-bit codes of weights j and j + 16 of a Q5 block.
#[inline]
pub(crate) fn q5_codes(qh: [u8; 4], qs: &[u8; 16], j: usize) -> (u8, u8) {
    let qh = u32::from_le_bytes(qh);
    let (lo, hi) = nibbles(qs[j]);
    let bit = |k: usize| ((qh >> k) & 1) as u8;
    (lo | bit(j) << 4, hi | bit(j + 16) << 4)
}

impl GgmlBlock for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for j in 0..16 {
            let (lo, hi) = q5_codes(self.qh, &self.qs, j);
            y[j] = f32::from(lo as i8 - 16) * d;
            y[j + 16] = f32::from(hi as i8 - 16) * d;
        }
    }
}

impl GgmlBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let (d, m) = (f16_le(self.d), f16_le(self.m));
        for j in 0..16 {
            let (lo, hi) = q5_codes(self.qh, &self.qs, j);
            y[j] = d * f32::from(lo) + m;
            y[j + 16] = d * f32::from(hi) + m;
        }
    }
}

impl GgmlBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = f32::from(q as i8) * d;
        }
    }
}

impl GgmlBlock for BlockIq4Nl {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (j, &q) in self.qs.iter().enumerate() {
            let (lo, hi) = nibbles(q);
            y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(lo)]);
            y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(hi)]);
        }
    }
}

/// The E8M0 scale halved, `2^(e - 128)`, built from its bits so that e = 0
/// and 1 give the exact subnormals 2^-128 and 2^-127, as ggml's
/// `GGML_E8M0_TO_FP32_HALF` does; halving undoes the doubling of
/// [`KVALUES_MXFP4`].
pub fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(E8M0_HALF_BITS[usize::from(e)])
}

/// [`e8m0_half`]'s bits for every exponent: one load where a kernel
/// would otherwise branch per block.
static E8M0_HALF_BITS: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut e = 0;
    while e < 256 {
        t[e] = if e < 2 {
            0x0020_0000 << e
        } else {
            ((e - 1) as u32) << 23
        };
        e += 1;
    }
    t
};

impl GgmlBlock for BlockMxfp4 {
    const TYPE: GgmlType = GgmlType::MXFP4;
    const QK: usize = QK;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = e8m0_half(self.e[0]);
        for (j, &q) in self.qs.iter().enumerate() {
            let (lo, hi) = nibbles(q);
            y[j] = f32::from(KVALUES_MXFP4[usize::from(lo)]) * d;
            y[j + 16] = f32::from(KVALUES_MXFP4[usize::from(hi)]) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::super::dequantize;
    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_bits().to_le_bytes()
    }

    /// 16 nibble bytes holding `lo[j]` in the low and `hi[j]` in the high nibble.
    fn nibble_bytes(lo: impl Fn(usize) -> u8, hi: impl Fn(usize) -> u8) -> Vec<u8> {
        (0..16).map(|j| lo(j) | (hi(j) << 4)).collect()
    }

    #[test]
    fn q4_0_block() {
        let mut b = f16_bytes(0.5).to_vec();
        b.extend(nibble_bytes(|j| j as u8, |j| 15 - j as u8));
        let got = dequantize(GgmlType::Q4_0, &b).unwrap();
        for j in 0..16 {
            assert_eq!(got[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(got[16 + j], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn q5_1_block_uses_the_fifth_bits() {
        let mut b = [f16_bytes(0.25), f16_bytes(-1.0)].concat();
        b.extend(0x8000_0001u32.to_le_bytes()); // weights 0 and 31 get bit 4
        b.extend(nibble_bytes(|_| 3, |_| 15));
        let got = dequantize(GgmlType::Q5_1, &b).unwrap();
        assert_eq!(got[0], 19.0 * 0.25 - 1.0);
        assert_eq!(got[1], 3.0 * 0.25 - 1.0);
        assert_eq!(got[30], 15.0 * 0.25 - 1.0);
        assert_eq!(got[31], 31.0 * 0.25 - 1.0);
    }

    #[test]
    fn q8_0_blocks() {
        let mut b = f16_bytes(2.0).to_vec();
        b.extend((0..32).map(|j| (j as i8 - 16) as u8));
        b.extend(f16_bytes(-0.125));
        b.extend([0x80u8; 32]); // -128
        let got = dequantize(GgmlType::Q8_0, &b).unwrap();
        assert_eq!(got[0], -32.0);
        assert_eq!(got[31], 30.0);
        assert!(got[32..].iter().all(|&v| v == 16.0));
    }

    #[test]
    fn mxfp4_block_every_code_and_extreme_scales() {
        let qs = nibble_bytes(|j| j as u8, |j| j as u8);
        let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for e in [0u8, 1, 2, 127, 130, 254, 255] {
            let mut b = vec![e];
            b.extend(&qs);
            let got = dequantize(GgmlType::MXFP4, &b).unwrap();
            let scale = 2f64.powi(i32::from(e) - 127);
            for j in 0..16 {
                let sign = if j >= 8 { -1.0 } else { 1.0 };
                let want = (sign * e2m1[j % 8] * scale) as f32;
                assert_eq!(got[j], want, "e={e} j={j}");
                assert_eq!(got[16 + j], want, "e={e} j={j}");
            }
        }
        assert_eq!(e8m0_half(0), 2f32.powi(-64) * 2f32.powi(-64));
    }
}
