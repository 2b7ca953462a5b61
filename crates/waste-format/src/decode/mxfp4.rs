//! MXFP4 (OCP microscaling FP4) as compressed-tensors `mxfp4-pack-quantized`
//! stores Kimi K3's routed experts: `weight_packed` uint8 [rows, cols/2], two
//! e2m1 codes per byte (low nibble = even column, high nibble = odd column;
//! bit 3 is the sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}), and
//! `weight_scale` uint8 [rows, cols/group], an E8M0 exponent per `group`
//! consecutive inputs: `w = code · 2^(scale − 127)`. Exact in f32 (the
//! release is quantisation-aware trained: these are the true weights).
//! GGUF's MXFP4 blocks use the same code and scale semantics.

use rayon::prelude::*;

/// The e2m1 code and E8M0 scale values: the kernels' decoders, one copy.
pub use waste_kernels::native::reference::{E2M1, e2m1_to_f32, e8m0_to_f32};

/// Dequantizes a packed MXFP4 weight of `[rows, cols]` into f32. Returns
/// `None` if `cols` is odd, `group` is zero or even, or a slice does not
/// match the layout.
pub fn dequantize_mxfp4_packed(
    packed: &[u8],
    scale: &[u8],
    rows: usize,
    cols: usize,
    group: usize,
) -> Option<Vec<f32>> {
    if group == 0 || !cols.is_multiple_of(2) || !group.is_multiple_of(2) {
        return None;
    }
    let row_groups = cols.div_ceil(group);
    if packed.len() != rows.checked_mul(cols / 2)? || scale.len() != rows.checked_mul(row_groups)? {
        return None;
    }
    let mut out = vec![0f32; rows.checked_mul(cols)?];
    if out.is_empty() {
        return Some(out);
    }
    out.par_chunks_mut(cols)
        .zip(packed.par_chunks(cols / 2))
        .zip(scale.par_chunks(row_groups))
        .with_min_len(16)
        .for_each(|((o, p), s)| {
            for (j, byte) in p.iter().enumerate() {
                let sc = e8m0_to_f32(s[2 * j / group]);
                o[2 * j] = e2m1_to_f32(byte & 0xF) * sc;
                o[2 * j + 1] = e2m1_to_f32(byte >> 4) * sc;
            }
        });
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_order_is_low_even_high_odd() {
        // One row of 4 columns, group 2: scales 2^0 then 2^1.
        let packed = [0x21, 0xF3]; // cols: 0.5, 1.0 | 1.5, -6.0
        let out = dequantize_mxfp4_packed(&packed, &[127, 128], 1, 4, 2).unwrap();
        assert_eq!(out, vec![0.5, 1.0, 3.0, -12.0]);
        assert!(dequantize_mxfp4_packed(&packed, &[127], 1, 4, 2).is_none());
    }
}
