//! The ggml ternary types TQ1_0 and TQ2_0 (ggml-common.h `block_tq1_0`,
//! `block_tq2_0`): 256 weights in {-d, 0, d}.

use super::kquants::QK_K;
use super::{GgmlBlock, GgmlType, f16_le, pod_block};

/// TQ1_0: `w = d * (t - 1)`, t a trit in {0, 1, 2}, five trits per byte
/// (four in `qh`) stored as a base-3 fraction: byte `b` holds trits
/// `t_n = ((b * 3^n) mod 256) * 3 >> 8` (n = 0 the most significant). 256
/// weights in 54 bytes: 1.6875 bits per weight. Weight order: `qs[0..32]`
/// gives weights `32n + m`, `qs[32..48]` weights `160 + 16n + m`, `qh`
/// weights `240 + 4n + m` (m the byte, n the trit).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockTq1_0 {
    /// Five trits per byte.
    pub qs: [u8; 48],
    /// Four trits per byte.
    pub qh: [u8; 4],
    /// f16 scale.
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockTq1_0>() == 54);

/// TQ2_0: `w = d * (q - 1)`, q a 2-bit code (3 is read as 2d, as in ggml).
/// Weight `128h + 32s + m` is bits `2s..2s+2` of `qs[32h + m]`. 256 weights
/// in 66 bytes: 2.0625 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockTq2_0 {
    /// 2-bit codes.
    pub qs: [u8; 64],
    /// f16 scale.
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockTq2_0>() == 66);

pod_block!(BlockTq1_0, BlockTq2_0);

/// Powers of three that shift trit n of a TQ1_0 byte to the top.
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` of a TQ1_0 byte, minus one.
#[inline]
fn trit(b: u8, n: usize) -> i8 {
    let q = b.wrapping_mul(POW3[n]);
    ((u16::from(q) * 3) >> 8) as i8 - 1
}

impl GgmlBlock for BlockTq1_0 {
    const TYPE: GgmlType = GgmlType::TQ1_0;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        let runs: [(&[u8], usize, usize); 3] = [
            (&self.qs[..32], 0, 5),
            (&self.qs[32..], 160, 5),
            (&self.qh, 240, 4),
        ];
        for (bytes, start, trits) in runs {
            for n in 0..trits {
                for (m, &b) in bytes.iter().enumerate() {
                    y[start + bytes.len() * n + m] = f32::from(trit(b, n)) * d;
                }
            }
        }
    }
}

impl GgmlBlock for BlockTq2_0 {
    const TYPE: GgmlType = GgmlType::TQ2_0;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (i, y) in y.iter_mut().enumerate() {
            let (h, s, m) = (i / 128, (i / 32) % 4, i % 32);
            let q = (self.qs[32 * h + m] >> (2 * s)) & 3;
            *y = f32::from(q as i8 - 1) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tq1_0_trits_of_a_byte() {
        // ggml packs trits t0..t5 as ceil((sum t_n 3^(4-n)) * 256 / 243)
        for packed in 0..243u16 {
            let t: Vec<i8> = (0..5)
                .map(|n| ((packed / 3u16.pow(4 - n)) % 3) as i8 - 1)
                .collect();
            let b = ((packed * 256).div_ceil(243)) as u8;
            let got: Vec<i8> = (0..5).map(|n| trit(b, n)).collect();
            assert_eq!(got, t, "packed {packed}");
        }
    }
}
