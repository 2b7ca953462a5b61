//! Scalar reference of the native formats (the specification): exact row
//! decoders and the f32 dot product built on them. Never deleted. Each
//! decoder computes what the release's reference dequantizer computes in
//! f32 (DeepSeek's `weight_dequant` in f32, compressed-tensors with the
//! scale upcast first), value for value. The FP8, e2m1 and E8M0 value
//! decoders here are the workspace's only copy (`waste_format::decode`
//! re-exports them).

use half::bf16;

use crate::dense::dot_f32;
use crate::quant::PackedMatrix;

/// `E4M3FN_TO_F32[b]`: the value of FP8 E4M3FN byte `b` (bias 7, no
/// infinities, 0x7F/0xFF NaN, subnormals `m · 2^-9`).
pub static E4M3FN_TO_F32: [f32; 256] = e4m3fn_table();

const fn e4m3fn_table() -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        let sign = ((b as u32) >> 7) << 31;
        let e = ((b >> 3) & 0xF) as u32;
        let m = (b & 7) as u32;
        let magnitude = if e == 15 && m == 7 {
            f32::NAN
        } else if e == 0 {
            // m · 2^-9, exact: 2^-9 is 118 << 23 in f32.
            m as f32 * f32::from_bits(118 << 23)
        } else {
            f32::from_bits(((e + 127 - 7) << 23) | (m << 20))
        };
        t[b] = f32::from_bits(magnitude.to_bits() | sign);
        b += 1;
    }
    t
}

/// The e2m1 code values, sign bit clear (OCP MX).
pub const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// The value of one 4-bit e2m1 code (bit 3 the sign).
#[inline]
pub fn e2m1_to_f32(code: u8) -> f32 {
    let v = E2M1[usize::from(code & 7)];
    if code & 8 != 0 { -v } else { v }
}

/// `2^(e − 127)` for an E8M0 scale byte; 255 is NaN (OCP).
#[inline]
pub fn e8m0_to_f32(e: u8) -> f32 {
    match e {
        255 => f32::NAN,
        // 2^-127 is the subnormal with only bit 22 set.
        0 => f32::from_bits(1 << 22),
        e => f32::from_bits(u32::from(e) << 23),
    }
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// `bf16`: each pair of bytes is one LE bf16, widened (exact).
pub fn decode_row_bf16_ref(codes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(codes.chunks_exact(2)) {
        *o = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

/// `f32`: LE f32 values.
pub fn decode_row_f32_ref(codes: &[u8], out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = f32_at(codes, i);
    }
}

/// `fp8-b128`: `w[j] = E4M3FN(codes[j]) · scale_inv[j / 128]`, one f32
/// product (`scales` = the row's block row of the grid).
pub fn decode_row_fp8_ref(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    for (j, (o, &b)) in out.iter_mut().zip(codes).enumerate() {
        *o = E4M3FN_TO_F32[usize::from(b)] * f32_at(scales, j / super::FP8_BLOCK);
    }
}

/// `int4-g32`: element `j` is nibble `j % 8` (lowest first) of LE u32 word
/// `j / 8`, stored `q + 8`; `w[j] = f32(q) · f32(scale[j / 32])`, the exact
/// f32 product (not rounded to the scale's bf16).
pub fn decode_row_int4_ref(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        let w = &codes[4 * (j / 8)..][..4];
        let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let q = ((word >> (4 * (j % 8))) & 0xF) as i32 - 8;
        let s = &scales[2 * (j / super::INT4_GROUP)..][..2];
        // q is in [-8, 7] and the scale a bf16: both exact in f32.
        *o = q as f32 * bf16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
    }
}

/// `mxfp4`: byte `j / 2` holds column `j` in its low (even `j`) or high
/// (odd `j`) nibble; `w[j] = e2m1(code) · 2^(scale[j / 32] − 127)`.
pub fn decode_row_mxfp4_ref(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        let byte = codes[j / 2];
        let code = if j % 2 == 0 { byte & 0xF } else { byte >> 4 };
        *o = e2m1_to_f32(code) * e8m0_to_f32(scales[j / super::MXFP4_GROUP]);
    }
}

/// `out[i·n + t] = decode(row r0 + i) · x[t]` for the `out.len() / n` rows
/// from `r0` of a native matrix: x is (n, cols) f32, `buf` a scratch row of
/// `cols`. The dot is `dense::dot_f32`, the exact path's.
pub fn rows_dot_native_f32_ref(
    m: &PackedMatrix<'_>,
    r0: usize,
    x: &[f32],
    n: usize,
    buf: &mut [f32],
    out: &mut [f32],
) {
    let cols = m.cols();
    for (i, o) in out.chunks_mut(n.max(1)).enumerate() {
        super::decode_row(m, r0 + i, buf);
        for (t, v) in o.iter_mut().enumerate() {
            *v = dot_f32(buf, &x[t * cols..(t + 1) * cols]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent decode from the definition, with `powi`.
    fn e4m3_reference(bits: u8) -> f32 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = i32::from((bits >> 3) & 0xF);
        let m = f32::from(bits & 7);
        if e == 15 && m == 7.0 {
            return f32::NAN;
        }
        if e == 0 {
            sign * (m / 8.0) * 2f32.powi(-6)
        } else {
            sign * (1.0 + m / 8.0) * 2f32.powi(e - 7)
        }
    }

    #[test]
    fn e4m3_table_matches_the_definition_for_every_byte() {
        for b in 0..=255u8 {
            let (got, want) = (E4M3FN_TO_F32[usize::from(b)], e4m3_reference(b));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#04x}: {got} vs {want}"
            );
        }
        assert_eq!(E4M3FN_TO_F32[0x7E], 448.0);
        assert_eq!(E4M3FN_TO_F32[0x01], 2f32.powi(-9));
    }

    #[test]
    fn e4m3_known_values() {
        assert_eq!(E4M3FN_TO_F32[0x00].to_bits(), 0.0f32.to_bits());
        assert_eq!(E4M3FN_TO_F32[0x80].to_bits(), (-0.0f32).to_bits());
        assert_eq!(E4M3FN_TO_F32[0x38], 1.0);
        assert_eq!(E4M3FN_TO_F32[0xB8], -1.0);
        assert_eq!(E4M3FN_TO_F32[0x3C], 1.5);
        assert_eq!(E4M3FN_TO_F32[0xFE], -448.0);
        assert_eq!(E4M3FN_TO_F32[0x78], 256.0);
        assert_eq!(E4M3FN_TO_F32[0x08], 2f32.powi(-6));
        assert_eq!(E4M3FN_TO_F32.iter().filter(|v| v.is_nan()).count(), 2);
    }

    #[test]
    fn codes_and_scales_decode_exactly() {
        assert_eq!(e2m1_to_f32(0b0111), 6.0);
        assert_eq!(e2m1_to_f32(0b1011), -1.5);
        assert_eq!(e2m1_to_f32(0b1000), -0.0);
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(120), 2f32.powi(-7));
        assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
        assert!(e8m0_to_f32(255).is_nan());
    }

    #[test]
    fn int4_and_mxfp4_nibble_orders() {
        // int4: words of q+8, lowest nibble first; q = -8..=3 over 12 columns.
        let q: Vec<i32> = (0..12).map(|j| j - 8).collect();
        let mut codes = vec![0u8; 8];
        for (j, &v) in q.iter().enumerate() {
            let word = j / 8;
            let mut w = u32::from_le_bytes(codes[4 * word..4 * word + 4].try_into().unwrap());
            w |= ((v + 8) as u32) << (4 * (j % 8));
            codes[4 * word..4 * word + 4].copy_from_slice(&w.to_le_bytes());
        }
        let scale = bf16::from_f32(0.5).to_bits().to_le_bytes();
        let mut out = vec![0f32; 12];
        decode_row_int4_ref(&codes, &scale, &mut out);
        let want: Vec<f32> = q.iter().map(|&v| v as f32 * 0.5).collect();
        assert_eq!(out, want);
        // mxfp4: 0x21 = (0.5, 1.0), 0xF3 = (1.5, -6.0), scale 2^1.
        let mut out = vec![0f32; 4];
        decode_row_mxfp4_ref(&[0x21, 0xF3], &[128], &mut out);
        assert_eq!(out, [1.0, 2.0, 3.0, -12.0]);
    }
}
