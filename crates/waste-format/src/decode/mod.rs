//! Exact decoding of stored tensor bytes into values: plain floats here,
//! block-scaled FP8 in [`fp8`], compressed-tensors int4 in [`int4`] and
//! MXFP4 in [`mxfp4`].
//! Owns byte-level layouts only; which tensors go together, and shape checks
//! against the checkpoint, belong to `checkpoint`. Everything is little endian
//! and makes no alignment assumption (safetensors data may sit at any offset).

pub mod fp8;
pub mod int4;
pub mod mxfp4;

use half::{bf16, f16};
use safetensors::Dtype;

/// bf16 values from little-endian bytes (an odd trailing byte is ignored;
/// callers pass validated tensor data).
pub fn bf16_from_le(bytes: &[u8]) -> Vec<bf16> {
    bytes
        .chunks_exact(2)
        .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
        .collect()
}

/// f32 values from little-endian bytes.
pub fn f32_from_le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// f16 values from little-endian bytes, widened to f32 (exact).
pub fn f16_from_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
        .collect()
}

/// Any float dtype that widens to f32 exactly (F32, BF16, F16); `None` for
/// other dtypes. Used for scales, which releases store in any of the three.
pub fn float_to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    match dtype {
        Dtype::F32 => Some(f32_from_le(bytes)),
        Dtype::BF16 => Some(bf16_from_le(bytes).into_iter().map(bf16::to_f32).collect()),
        Dtype::F16 => Some(f16_from_le_to_f32(bytes)),
        _ => None,
    }
}

/// Integer values of an I64 or I32 tensor (used for `weight_shape`).
pub fn int_values(dtype: Dtype, bytes: &[u8]) -> Option<Vec<i64>> {
    match dtype {
        Dtype::I64 => Some(
            bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
        ),
        Dtype::I32 => Some(
            bytes
                .chunks_exact(4)
                .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_floats_decode_little_endian() {
        let v = [1.5f32, -2.0, f32::MIN_POSITIVE];
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(f32_from_le(&bytes), v);

        let h = [
            f16::from_f32(0.333),
            f16::from_f32(-65504.0),
            f16::from_bits(1),
        ];
        let bytes: Vec<u8> = h.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
        let got = f16_from_le_to_f32(&bytes);
        assert_eq!(got[0], f16::from_f32(0.333).to_f32());
        assert_eq!(got[1], -65504.0);
        assert_eq!(got[2], 2f32.powi(-24));

        let b = [bf16::from_f32(3.25), bf16::from_f32(-1e-30)];
        let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
        assert_eq!(bf16_from_le(&bytes), b);
        assert_eq!(float_to_f32(Dtype::BF16, &bytes).unwrap()[0], 3.25);
        assert!(float_to_f32(Dtype::I32, &bytes).is_none());
    }

    #[test]
    fn int_values_read_i64_and_i32() {
        let bytes: Vec<u8> = [7i64, -3].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(int_values(Dtype::I64, &bytes).unwrap(), [7, -3]);
        let bytes: Vec<u8> = [5i32, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(int_values(Dtype::I32, &bytes).unwrap(), [5, 9]);
        assert!(int_values(Dtype::F32, &bytes).is_none());
    }
}
