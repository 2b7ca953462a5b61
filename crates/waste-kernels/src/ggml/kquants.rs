//! The ggml k-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: super-blocks of 256
//! weights with an f16 scale and per-16 or per-32 sub-block integer scales
//! (ggml-common.h `block_q2_K` .. `block_q6_K`). The sub-block scale is
//! formed in f32 first (`d * sc`), then multiplied by the quant, as ggml's
//! `dequantize_row_*` and gguf-py do.

use super::{GgmlBlock, GgmlType, f16_le, pod_block};

/// Weights per super-block.
pub const QK_K: usize = 256;

/// Q2_K: `w = d * (sc & 15) * q - dmin * (sc >> 4)`, q the 2-bit code and
/// `sc` the byte of its 16-weight sub-block. 256 weights in 84 bytes: 2.625
/// bits per weight. Weight `128h + 32s + l` (h < 2, s < 4, l < 32) is bits
/// `2s..2s+2` of `qs[32h + l]`, in sub-block `8h + 2s + l / 16`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ2K {
    /// Sub-block scale (low nibble) and min (high nibble), one byte each.
    pub scales: [u8; 16],
    /// 2-bit codes.
    pub qs: [u8; 64],
    /// f16 super-block scale of the scales.
    pub d: [u8; 2],
    /// f16 super-block scale of the mins.
    pub dmin: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ2K>() == 84);

/// Q3_K: `w = d * (sc - 32) * (low - (high bit set ? 0 : 4))`, with a 6-bit
/// scale per 16 weights. 256 weights in 110 bytes: 3.4375 bits per weight.
/// Weight `128h + 32s + l` has its low 2 bits at bits `2s..2s+2` of
/// `qs[32h + l]` and its high bit at bit `4h + s` of `hmask[l]`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ3K {
    /// High bits (set means no offset of -4).
    pub hmask: [u8; 32],
    /// Low 2 bits.
    pub qs: [u8; 64],
    /// Sixteen 6-bit scales biased by 32 (see [`scale_k3`]).
    pub scales: [u8; 12],
    /// f16 super-block scale.
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ3K>() == 110);

/// Q4_K: `w = d * sc_j * q - dmin * m_j`, q the 4-bit code and (sc_j, m_j)
/// the 6-bit scale and min of 32-weight sub-block j. 256 weights in 144
/// bytes: 4.5 bits per weight. Each 32-byte run k of `qs` holds sub-block
/// 2k in its low and 2k + 1 in its high nibbles.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4K {
    /// f16 super-block scale of the scales.
    pub d: [u8; 2],
    /// f16 super-block scale of the mins.
    pub dmin: [u8; 2],
    /// Eight 6-bit (scale, min) pairs (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// 4-bit codes.
    pub qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ4K>() == 144);

/// Q5_K: as Q4_K with a fifth bit: weight `32j + l` has bit 4 at bit j of
/// `qh[l]`. 256 weights in 176 bytes: 5.5 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5K {
    /// f16 super-block scale of the scales.
    pub d: [u8; 2],
    /// f16 super-block scale of the mins.
    pub dmin: [u8; 2],
    /// Eight 6-bit (scale, min) pairs (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; 32],
    /// Low 4 bits, laid out as Q4_K's codes.
    pub qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ5K>() == 176);

/// Q6_K: `w = d * sc * (q - 32)`, q the 6-bit code and `sc` the i8 scale
/// of its 16 weights. 256 weights in 210 bytes: 6.5625 bits per weight.
/// Weight `128h + 32s + l` has its low nibble in `ql[64h + l + 32 (s & 1)]`
/// (high nibble when s >= 2) and its top 2 bits at bits `2s..2s+2` of
/// `qh[32h + l]`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ6K {
    /// Low 4 bits.
    pub ql: [u8; 128],
    /// High 2 bits.
    pub qh: [u8; 64],
    /// i8 scale per 16 weights.
    pub scales: [u8; 16],
    /// f16 super-block scale.
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ6K>() == 210);

pod_block!(BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K);

impl GgmlBlock for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        for (i, y) in y.iter_mut().enumerate() {
            let (h, s, l) = (i / 128, (i / 32) % 4, i % 32);
            let sc = self.scales[i / 16];
            let dl = d * f32::from(sc & 0x0F);
            let ml = dmin * f32::from(sc >> 4);
            let q = (self.qs[32 * h + l] >> (2 * s)) & 3;
            *y = dl * f32::from(q) - ml;
        }
    }
}

impl GgmlBlock for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (i, y) in y.iter_mut().enumerate() {
            let (h, s, l) = (i / 128, (i / 32) % 4, i % 32);
            let dl = d * f32::from(scale_k3(i / 16, &self.scales));
            let low = ((self.qs[32 * h + l] >> (2 * s)) & 3) as i8;
            let high_set = (self.hmask[l] >> (4 * h + s)) & 1 == 1;
            *y = dl * f32::from(low - if high_set { 0 } else { 4 });
        }
    }
}

/// Scale `s` (0..16) of a Q3_K block, unbiased: its low nibble is in byte
/// `s % 8` (low nibble for s < 8, high for s >= 8), its top 2 bits in byte
/// `8 + s % 4` at bit `2 * (s / 4)`.
pub fn scale_k3(s: usize, b: &[u8; 12]) -> i8 {
    let low = if s < 8 { b[s] & 0x0F } else { b[s - 8] >> 4 };
    let high = (b[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | high << 4) as i8 - 32
}

/// Scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block. Bytes 0..4
/// hold scales 0..4 and bytes 4..8 mins 0..4 in their low 6 bits; scales and
/// mins 4..8 keep their low nibbles in bytes 8..12 and their top 2 bits in
/// the spare top bits of bytes 0..4 (scales) and 4..8 (mins).
pub fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

impl GgmlBlock for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(j, &self.scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            let qs = &self.qs[32 * (j / 2)..][..32];
            for (y, &q) in y.iter_mut().zip(qs) {
                *y = dl * f32::from((q >> (4 * (j % 2))) & 0x0F) - ml;
            }
        }
    }
}

impl GgmlBlock for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(j, &self.scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            let qs = &self.qs[32 * (j / 2)..][..32];
            for (l, y) in y.iter_mut().enumerate() {
                let low = (qs[l] >> (4 * (j % 2))) & 0x0F;
                let high = (self.qh[l] >> j) & 1;
                *y = dl * f32::from(low | high << 4) - ml;
            }
        }
    }
}

impl GgmlBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (i, y) in y.iter_mut().enumerate() {
            let (h, s, l) = (i / 128, (i / 32) % 4, i % 32);
            let low = (self.ql[64 * h + l + 32 * (s & 1)] >> (4 * (s / 2))) & 0x0F;
            let high = (self.qh[32 * h + l] >> (2 * s)) & 3;
            let scale = d * f32::from(self.scales[i / 16] as i8);
            *y = scale * f32::from((low | high << 4) as i8 - 32);
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

    /// Packs eight 6-bit (scale, min) pairs the way Q4_K stores them.
    fn pack_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = sc[j] | (sc[j + 4] >> 4) << 6;
            s[j + 4] = m[j] | (m[j + 4] >> 4) << 6;
            s[j + 8] = (sc[j + 4] & 0x0F) | (m[j + 4] & 0x0F) << 4;
        }
        s
    }

    #[test]
    fn q4_k_hand_built_block() {
        let sc = [1, 2, 3, 63, 17, 40, 5, 33];
        let m = [0, 7, 62, 1, 48, 9, 16, 31];
        let mut b = [f16_bytes(0.5), f16_bytes(0.25)].concat();
        b.extend(pack_k4(sc, m));
        // weight i of sub-block j has quant (i + j) % 16
        for k in 0..4 {
            b.extend(
                (0..32).map(|i| ((i + 2 * k) % 16) as u8 | (((i + 2 * k + 1) % 16) as u8) << 4),
            );
        }
        let got = dequantize(GgmlType::Q4_K, &b).unwrap();
        for j in 0..8 {
            for i in 0..32 {
                let q = ((i + j) % 16) as f32;
                let want = 0.5 * f32::from(sc[j]) * q - 0.25 * f32::from(m[j]);
                assert_eq!(got[32 * j + i], want, "sub-block {j} weight {i}");
            }
        }
    }

    #[test]
    fn q6_k_hand_built_block() {
        // weight w has 6-bit quant (w * 7) % 64 and scale index w / 16
        let quant = |w: usize| ((w * 7) % 64) as u8;
        let scales: [i8; 16] = [
            1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 11, 0, 13, -14, 15, -16,
        ];
        let mut b = vec![0u8; 210];
        for w in 0..256 {
            let (half, r) = (w / 128, w % 128);
            let (quarter, l) = (r / 32, r % 32);
            let low_byte = 64 * half + l + if quarter % 2 == 1 { 32 } else { 0 };
            let nibble_shift = if quarter >= 2 { 4 } else { 0 };
            b[low_byte] |= (quant(w) & 0x0F) << nibble_shift;
            b[128 + 32 * half + l] |= (quant(w) >> 4) << (2 * quarter);
        }
        for (i, s) in scales.iter().enumerate() {
            b[192 + i] = *s as u8;
        }
        b[208..210].copy_from_slice(&f16_bytes(0.125));
        let got = dequantize(GgmlType::Q6_K, &b).unwrap();
        for (w, &got) in got.iter().enumerate() {
            let want = 0.125 * f32::from(scales[w / 16]) * (f32::from(quant(w)) - 32.0);
            assert_eq!(got, want, "weight {w}");
        }
    }

    #[test]
    fn q3_k_hand_built_block() {
        // weight w has 3-bit quant (w * 5) % 8 (stored as low 2 bits plus an
        // inverted high bit) and 6-bit scale index w / 16
        let quant = |w: usize| ((w * 5) % 8) as i8;
        let scale = |s: usize| (s * 4 + 1) as u8; // 1..61, biased values
        let mut b = vec![0u8; 110];
        for w in 0..256 {
            let (half, r) = (w / 128, w % 128);
            let (shift, l) = (r / 32, r % 32);
            let q = quant(w) - 4; // -4..3
            let (low, high_set) = if q < 0 { (q + 4, false) } else { (q, true) };
            b[32 + 32 * half + l] |= (low as u8) << (2 * shift);
            if high_set {
                b[l] |= 1 << (4 * half + shift);
            }
        }
        for s in 0..16 {
            let v = scale(s);
            b[96 + s % 8] |= (v & 0x0F) << if s < 8 { 0 } else { 4 };
            b[96 + 8 + s % 4] |= (v >> 4) << (2 * (s / 4));
        }
        b[108..110].copy_from_slice(&f16_bytes(-0.75));
        let got = dequantize(GgmlType::Q3_K, &b).unwrap();
        for (w, &got) in got.iter().enumerate() {
            let sc = f32::from(scale(w / 16) as i8 - 32);
            let want = -0.75 * sc * f32::from(quant(w) - 4);
            assert_eq!(got, want, "weight {w}");
        }
    }
}
