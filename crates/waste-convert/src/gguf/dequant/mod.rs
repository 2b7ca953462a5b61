//! Exact dequantization of ggml tensor data to f32: plain floats and the
//! 32-element block formats here, the 256-element k-quants in [`kquants`].
//! Each function takes whole blocks of little-endian bytes and computes what
//! ggml's `dequantize_row_*` and gguf-py's `quants.py` compute, in the same
//! operation order (separate multiply and add, never fused), so results are
//! bit-identical to gguf-py's. Layouts follow ggml-common.h.
//!
//! Owns byte layouts only; tensor shapes and names belong to the caller.

pub mod kquants;

use half::{bf16, f16};

use super::types::GgmlType;

/// A little-endian f16 at `b[i..i + 2]`, widened (exactly) to f32.
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Dequantizes whole blocks of `ty`. `None` when this module does not
/// decode `ty` or `bytes` is not a whole number of blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    let (_, block_bytes) = ty.block()?;
    if !bytes.len().is_multiple_of(block_bytes) {
        return None;
    }
    Some(match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(|b| f16_at(b, 0)).collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        GgmlType::Q4_0 => dequantize_q4_0(bytes),
        GgmlType::Q4_1 => dequantize_q4_1(bytes),
        GgmlType::Q8_0 => dequantize_q8_0(bytes),
        GgmlType::MXFP4 => dequantize_mxfp4(bytes),
        GgmlType::Q3_K => kquants::dequantize_q3_k(bytes),
        GgmlType::Q4_K => kquants::dequantize_q4_k(bytes),
        GgmlType::Q6_K => kquants::dequantize_q6_k(bytes),
        _ => return None,
    })
}

/// Q4_0, 18 bytes per 32 weights (4.5 bpw): f16 `d`, then 16 bytes whose
/// low nibbles are weights 0..16 and high nibbles weights 16..32;
/// `w = d * (q - 8)`.
pub fn dequantize_q4_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 18 * 32);
    for b in bytes.chunks_exact(18) {
        let d = f16_at(b, 0);
        let qs = &b[2..18];
        out.extend(qs.iter().map(|&q| ((q & 0x0F) as i32 - 8) as f32 * d));
        out.extend(qs.iter().map(|&q| ((q >> 4) as i32 - 8) as f32 * d));
    }
    out
}

/// Q4_1, 20 bytes per 32 weights (5 bpw): f16 `d`, f16 `m`, then nibbles
/// as in Q4_0; `w = d * q + m`.
pub fn dequantize_q4_1(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 20 * 32);
    for b in bytes.chunks_exact(20) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qs = &b[4..20];
        out.extend(qs.iter().map(|&q| (q & 0x0F) as f32 * d + m));
        out.extend(qs.iter().map(|&q| (q >> 4) as f32 * d + m));
    }
    out
}

/// Q8_0, 34 bytes per 32 weights (8.5 bpw): f16 `d`, 32 i8 `q`; `w = q * d`.
pub fn dequantize_q8_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 34 * 32);
    for b in bytes.chunks_exact(34) {
        let d = f16_at(b, 0);
        out.extend(b[2..34].iter().map(|&q| (q as i8) as f32 * d));
    }
    out
}

/// E2M1 values doubled (ggml's `kvalues_mxfp4`): the nibble is sign bit +
/// 3-bit magnitude code {0, 0.5, 1, 1.5, 2, 3, 4, 6}, times 2 to stay integral.
const MXFP4_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The E8M0 block scale halved, `2^(e - 128)`, built from its bits so that
/// e = 0 and 1 give the exact subnormals 2^-128 and 2^-127 (as ggml does);
/// halving undoes the doubling of [`MXFP4_DOUBLED`].
fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(u32::from(e - 1) << 23)
    }
}

/// MXFP4 (OCP microscaling FP4), 17 bytes per 32 weights (4.25 bpw): one
/// E8M0 exponent byte `e`, then 16 bytes whose low nibbles are weights
/// 0..16 and high nibbles 16..32; `w = e2m1(q) * 2^(e - 127)`.
pub fn dequantize_mxfp4(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 17 * 32);
    for b in bytes.chunks_exact(17) {
        let d = e8m0_half(b[0]);
        let qs = &b[1..17];
        out.extend(
            qs.iter()
                .map(|&q| MXFP4_DOUBLED[(q & 0x0F) as usize] as f32 * d),
        );
        out.extend(
            qs.iter()
                .map(|&q| MXFP4_DOUBLED[(q >> 4) as usize] as f32 * d),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_bits().to_le_bytes()
    }

    /// 16 nibble bytes holding `lo[j]` in the low and `hi[j]` in the high nibble.
    fn nibbles(lo: impl Fn(usize) -> u8, hi: impl Fn(usize) -> u8) -> Vec<u8> {
        (0..16).map(|j| lo(j) | (hi(j) << 4)).collect()
    }

    #[test]
    fn q4_0_block() {
        let mut b = f16_bytes(0.5).to_vec();
        b.extend(nibbles(|j| j as u8, |j| 15 - j as u8));
        let got = dequantize(GgmlType::Q4_0, &b).unwrap();
        for j in 0..16 {
            assert_eq!(got[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(got[16 + j], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn q4_1_block() {
        let mut b = [f16_bytes(0.25), f16_bytes(-1.0)].concat();
        b.extend(nibbles(|j| j as u8, |_| 3));
        let got = dequantize(GgmlType::Q4_1, &b).unwrap();
        assert_eq!(got.len(), 32);
        assert_eq!(got[0], -1.0);
        assert_eq!(got[15], 15.0 * 0.25 - 1.0);
        assert!(got[16..].iter().all(|&v| v == -0.25));
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
        assert!(dequantize(GgmlType::Q8_0, &b[..33]).is_none());
    }

    #[test]
    fn mxfp4_block_every_code_and_extreme_scales() {
        let qs = nibbles(|j| j as u8, |j| j as u8);
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

    #[test]
    fn plain_floats() {
        let b: Vec<u8> = [1.5f32, -0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(dequantize(GgmlType::F32, &b).unwrap(), [1.5, -0.0]);
        let b = [
            f16_bytes(0.333),
            bf16::from_f32(-3.0).to_bits().to_le_bytes(),
        ]
        .concat();
        assert_eq!(
            dequantize(GgmlType::F16, &b).unwrap()[0],
            f16::from_f32(0.333).to_f32()
        );
        assert_eq!(dequantize(GgmlType::BF16, &b).unwrap()[1], -3.0);
        assert!(dequantize(GgmlType(6), &[0; 22]).is_none());
    }
}
