//! compressed-tensors `pack-quantized` int4, as in Kimi-K2-Thinking's routed
//! experts: `weight_packed` int32 [rows, ceil(cols/8)], `weight_scale`
//! [rows, ceil(cols/group)] (bf16 in releases), `weight_shape` = [rows, cols].
//! Symmetric int4 `q` in [-8, 7] is stored as `q + 8`; element `j` of a row sits
//! in int32 word `j / 8` at bits `4 * (j % 8)` .. `+3` (lowest nibble first).
//! `w[r][j] = f32(q) * f32(scale[r][j / group])`: the exact f32 product, not
//! the library's product rounded to the scale dtype. Owns the bit layout only.

use rayon::prelude::*;

/// Dequantizes a packed int4 weight of `[rows, cols]` into f32. `packed` is
/// the little-endian bytes of the int32 words; `scale` is already widened.
/// Returns `None` if `group` is zero or a slice does not match the layout.
pub fn dequantize_int4_packed(
    packed: &[u8],
    rows: usize,
    cols: usize,
    scale: &[f32],
    group: usize,
) -> Option<Vec<f32>> {
    if group == 0 {
        return None;
    }
    let row_bytes = cols.div_ceil(8).checked_mul(4)?;
    let row_groups = cols.div_ceil(group);
    if packed.len() != rows.checked_mul(row_bytes)?
        || scale.len() != rows.checked_mul(row_groups)?
    {
        return None;
    }
    let mut out = vec![0.0f32; rows.checked_mul(cols)?];
    if out.is_empty() {
        return Some(out);
    }
    out.par_chunks_mut(cols)
        .zip(packed.par_chunks(row_bytes))
        .zip(scale.par_chunks(row_groups))
        .with_min_len(16)
        .for_each(|((out_row, p_row), s_row)| {
            for (w, (o8, word)) in out_row.chunks_mut(8).zip(p_row.chunks_exact(4)).enumerate() {
                let word = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                for (k, o) in o8.iter_mut().enumerate() {
                    let q = ((word >> (4 * k)) & 0xF) as i32 - 8;
                    // q is in [-8, 7]: exact in f32.
                    *o = q as f32 * s_row[(w * 8 + k) / group];
                }
            }
        });
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(row: &[i32]) -> Vec<u8> {
        row.chunks(8)
            .flat_map(|c| {
                let word = c
                    .iter()
                    .enumerate()
                    .fold(0u32, |w, (k, &q)| w | (((q + 8) as u32) << (4 * k)));
                word.to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn lowest_nibble_first_and_offset_eight() {
        let q: Vec<i32> = (0..12).map(|j| j % 16 - 8).collect(); // -8 .. 3
        let packed = pack(&q);
        assert_eq!(packed.len(), 8); // 2 words, the second half-filled
        let out = dequantize_int4_packed(&packed, 1, 12, &[0.5, 2.0], 8).unwrap();
        let want: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(j, &q)| q as f32 * if j < 8 { 0.5 } else { 2.0 })
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn product_is_exact_f32_not_rounded_to_bf16() {
        // 7 * 1.0078125 (a bf16 value, 1 + 2^-7) = 903/128 has 10 significant
        // bits; bf16 keeps 8.
        let s = half::bf16::from_f32(1.007_812_5).to_f32();
        let out = dequantize_int4_packed(&pack(&[7; 8]), 1, 8, &[s], 32).unwrap();
        assert_eq!(out[0], 7.0 * s);
        assert_ne!(out[0], half::bf16::from_f32(7.0 * s).to_f32());
    }

    #[test]
    fn inconsistent_lengths_are_rejected() {
        let packed = pack(&[0; 16]);
        assert!(dequantize_int4_packed(&packed, 2, 8, &[1.0, 1.0], 32).is_some());
        assert!(dequantize_int4_packed(&packed, 1, 8, &[1.0], 32).is_none());
        assert!(dequantize_int4_packed(&packed, 2, 8, &[1.0], 32).is_none());
        assert!(dequantize_int4_packed(&packed, 2, 8, &[1.0, 1.0], 0).is_none());
    }
}
