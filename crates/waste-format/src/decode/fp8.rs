//! FP8 E4M3FN and the 128x128 block quantization of the DeepSeek-V3 and
//! Kimi-K2 releases: `weight` float8_e4m3fn [rows, cols] and `weight_scale_inv`
//! f32 [ceil(rows/br), ceil(cols/bc)], with
//! `w[r][c] = f32(fp8[r][c]) * scale_inv[r / br][c / bc]` (one f32 product,
//! fixed blocks, partial blocks at the right and bottom edges; this is
//! DeepSeek's `weight_dequant`, not transformers' `rows // scale_rows` rule).
//! Owns the block-scaled dequantization; the byte's value is the kernels'
//! table (one copy, `waste_kernels::native::reference`), and pairing a
//! weight with its scale is the checkpoint's job.

use rayon::prelude::*;

/// Every E4M3FN byte decoded to f32 (exact): the kernels' table, one copy.
pub use waste_kernels::native::reference::E4M3FN_TO_F32;

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
