//! FP8 E4M3FN and the 128x128 block quantization of the DeepSeek-V3 and
//! Kimi-K2 releases: `weight` float8_e4m3fn [rows, cols] and `weight_scale_inv`
//! f32 [ceil(rows/br), ceil(cols/bc)], with
//! `w[r][c] = f32(fp8[r][c]) * scale_inv[r / br][c / bc]` (one f32 product,
//! fixed blocks, partial blocks at the right and bottom edges; this is
//! DeepSeek's `weight_dequant`, not transformers' `rows // scale_rows` rule).
//! Owns the bit-level decode; pairing a weight with its scale is the
//! checkpoint's job.

use rayon::prelude::*;

/// E4M3FN (the "FN" variant: no infinities, only 0x7F/0xFF are NaN):
/// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits.
/// Normal: `2^(e-7) * (1 + m/8)`; subnormal (e = 0): `m * 2^-9`;
/// largest finite 0x7E = 448.
pub const fn e4m3fn_to_f32(bits: u8) -> f32 {
    let exp = (bits >> 3) & 0x0F;
    let man = bits & 0x07;
    let magnitude = if exp == 0x0F && man == 0x07 {
        f32::NAN
    } else if exp == 0 {
        man as f32 * (1.0 / 512.0)
    } else {
        // Re-bias the exponent from 7 to 127 and left-align the mantissa.
        f32::from_bits(((exp as u32 + 120) << 23) | ((man as u32) << 20))
    };
    if bits & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

const fn e4m3fn_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = e4m3fn_to_f32(i as u8);
        i += 1;
    }
    table
}

/// Every E4M3FN byte decoded to f32 (exact).
pub static E4M3FN_TO_F32: [f32; 256] = e4m3fn_table();

/// The scale grid `[ceil(rows/br), ceil(cols/bc)]` for a weight of
/// `[rows, cols]` in blocks of `[br, bc]` (both non-zero).
pub fn scale_grid(rows: usize, cols: usize, block: [usize; 2]) -> [usize; 2] {
    [rows.div_ceil(block[0]), cols.div_ceil(block[1])]
}

/// Dequantizes a block-scaled FP8 weight of `[rows, cols]` into f32.
/// Returns `None` if a block dimension is zero or the slices do not match
/// `rows * cols` and the scale grid of [`scale_grid`].
pub fn dequantize_fp8_block(
    weight: &[u8],
    rows: usize,
    cols: usize,
    scale_inv: &[f32],
    block: [usize; 2],
) -> Option<Vec<f32>> {
    let [br, bc] = block;
    if br == 0 || bc == 0 {
        return None;
    }
    let [_, scale_cols] = scale_grid(rows, cols, block);
    let scale_len = scale_grid(rows, cols, block)[0].checked_mul(scale_cols)?;
    if weight.len() != rows.checked_mul(cols)? || scale_inv.len() != scale_len {
        return None;
    }
    let mut out = vec![0.0f32; weight.len()];
    if out.is_empty() {
        return Some(out);
    }
    out.par_chunks_mut(cols)
        .zip(weight.par_chunks(cols))
        .enumerate()
        .with_min_len(16)
        .for_each(|(r, (out_row, w_row))| {
            let s_row = &scale_inv[(r / br) * scale_cols..][..scale_cols];
            for ((o, w), &s) in out_row.chunks_mut(bc).zip(w_row.chunks(bc)).zip(s_row) {
                for (o, &b) in o.iter_mut().zip(w) {
                    *o = E4M3FN_TO_F32[usize::from(b)] * s;
                }
            }
        });
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent decode: value from the definition with `powi`.
    fn reference(bits: u8) -> f32 {
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
    fn known_values() {
        assert_eq!(E4M3FN_TO_F32[0x00].to_bits(), 0.0f32.to_bits());
        assert_eq!(E4M3FN_TO_F32[0x80].to_bits(), (-0.0f32).to_bits());
        assert_eq!(E4M3FN_TO_F32[0x38], 1.0);
        assert_eq!(E4M3FN_TO_F32[0xB8], -1.0);
        assert_eq!(E4M3FN_TO_F32[0x40], 2.0);
        assert_eq!(E4M3FN_TO_F32[0x3C], 1.5);
        assert_eq!(E4M3FN_TO_F32[0x7E], 448.0);
        assert_eq!(E4M3FN_TO_F32[0xFE], -448.0);
        assert_eq!(E4M3FN_TO_F32[0x78], 256.0);
        assert_eq!(E4M3FN_TO_F32[0x01], 2f32.powi(-9));
        assert_eq!(E4M3FN_TO_F32[0x07], 7.0 * 2f32.powi(-9));
        assert_eq!(E4M3FN_TO_F32[0x08], 2f32.powi(-6));
        assert!(E4M3FN_TO_F32[0x7F].is_nan());
        assert!(E4M3FN_TO_F32[0xFF].is_nan());
        assert_eq!(E4M3FN_TO_F32.iter().filter(|v| v.is_nan()).count(), 2);
    }

    #[test]
    fn table_matches_reference_for_every_byte() {
        for b in 0..=255u8 {
            let (got, want) = (E4M3FN_TO_F32[usize::from(b)], reference(b));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#04x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn partial_edge_blocks_use_fixed_block_size() {
        // 3 x 5 in blocks of 2 x 2: scale grid 2 x 3.
        let weight = vec![0x38u8; 15]; // all 1.0
        let scale = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let out = dequantize_fp8_block(&weight, 3, 5, &scale, [2, 2]).unwrap();
        let want = [
            1.0, 1.0, 2.0, 2.0, 3.0, //
            1.0, 1.0, 2.0, 2.0, 3.0, //
            4.0, 4.0, 5.0, 5.0, 6.0,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn inconsistent_lengths_are_rejected() {
        assert!(dequantize_fp8_block(&[0; 6], 2, 3, &[1.0], [128, 128]).is_some());
        assert!(dequantize_fp8_block(&[0; 5], 2, 3, &[1.0], [128, 128]).is_none());
        assert!(dequantize_fp8_block(&[0; 6], 2, 3, &[1.0, 1.0], [128, 128]).is_none());
        assert!(dequantize_fp8_block(&[0; 6], 2, 3, &[1.0], [0, 128]).is_none());
        assert!(
            dequantize_fp8_block(&[], 0, 3, &[], [128, 128])
                .unwrap()
                .is_empty()
        );
    }
}
