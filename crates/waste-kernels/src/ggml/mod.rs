//! ggml's tensor types as GGUF files store them, and exact scalar decoders
//! for every type llama.cpp's quantizer writes: the 32-element blocks in
//! [`legacy`], the 256-element k-quants in [`kquants`], the grid-based
//! i-quants in [`iquants`] (tables in [`grids`]) and the ternary types in
//! [`ternary`], plus the plain F32/F16/BF16.
//!
//! Each block is a `#[repr(C)]` struct of byte arrays (align 1, every bit
//! pattern valid), so a tensor's bytes are viewed in place as `&[Block]`
//! ([`blocks`]) and the kernels that later run on ggml weights read the
//! same structs. The scalar `dequantize_ref` of each block is the
//! specification: it computes what gguf-py's `quants.py` computes (ggml's
//! `dequantize_row_*`), in the same float32 operation order, so results are
//! bit-identical. Rust never contracts `a * b + c` into a fused multiply-add,
//! which keeps that order honest.
//!
//! The integer products llama.cpp computes on these blocks (activations
//! quantized to Q8_K or Q8_0, per-type SIMD dot products) are in [`dot`],
//! their activation blocks in [`act`].
//!
//! Owns byte layouts and products; tensor shapes and names belong to the caller.

pub mod act;
pub mod dot;
pub mod grids;
pub mod iquants;
pub mod kquants;
pub mod layout;
pub mod legacy;
pub mod ternary;
mod types;

use half::f16;

pub use types::GgmlType;

/// A ggml quantization block: plain bytes with a fixed number of weights.
pub trait GgmlBlock: bytemuck::Pod {
    /// The tensor type whose data is a sequence of these blocks.
    const TYPE: GgmlType;
    /// Weights per block.
    const QK: usize;

    /// Writes the block's `QK` weights to `y`. `y.len()` must be `QK`: the
    /// callers here guarantee it, and a wrong length is a bug (it panics).
    fn dequantize_ref(&self, y: &mut [f32]);
}

/// Implements `bytemuck`'s marker traits for a block struct.
macro_rules! pod_block {
    ($($block:ty),* $(,)?) => {$(
        // SAFETY: the block is `#[repr(C)]` with only `u8` array fields, so
        // it has align 1, no padding, and every bit pattern (zero included)
        // is a valid value.
        unsafe impl bytemuck::Zeroable for $block {}
        // SAFETY: as above; the struct is also `Copy + 'static`.
        unsafe impl bytemuck::Pod for $block {}
    )*};
}
pub(crate) use pod_block;

/// The little-endian f16 `b`, widened (exactly) to f32; a signalling NaN
/// comes back quiet, as from ggml's C conversion.
#[inline]
pub(crate) fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

/// `bytes` viewed as blocks, or `None` unless it is a whole number of them.
pub fn blocks<B: GgmlBlock>(bytes: &[u8]) -> Option<&[B]> {
    bytemuck::try_cast_slice(bytes).ok()
}

/// Number of weights in `bytes` of type `ty`, or `None` when `ty` is unknown
/// or `bytes` is not a whole number of blocks.
pub fn element_count(ty: GgmlType, bytes: usize) -> Option<usize> {
    let (qk, size) = ty.block()?;
    bytes.is_multiple_of(size).then(|| bytes / size * qk)
}

/// Decodes whole blocks of `ty` into a new vector. `None` when `ty` is not
/// decodable ([`GgmlType::is_decodable`]) or `bytes` is not a whole number
/// of blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    if !ty.is_decodable() {
        return None;
    }
    let mut out = vec![0f32; element_count(ty, bytes.len())?];
    dequantize_into(ty, bytes, &mut out)?;
    Some(out)
}

/// Decodes whole blocks of `ty` into `out`, which must hold exactly their
/// weights. `None` (with `out` unspecified) when `ty` is not decodable,
/// `bytes` is not a whole number of blocks, or `out` has the wrong length.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Option<()> {
    if element_count(ty, bytes.len())? != out.len() {
        return None;
    }
    use iquants::*;
    use kquants::*;
    use legacy::*;
    use ternary::*;
    match ty {
        GgmlType::F32 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = f16_le([b[0], b[1]]);
            }
        }
        // ggml widens bf16 by a plain shift (NaN payloads kept as they are);
        // `half::bf16::to_f32` would set the quiet bit of a signalling NaN.
        GgmlType::BF16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
        }
        GgmlType::Q4_0 => run::<BlockQ4_0>(bytes, out)?,
        GgmlType::Q4_1 => run::<BlockQ4_1>(bytes, out)?,
        GgmlType::Q5_0 => run::<BlockQ5_0>(bytes, out)?,
        GgmlType::Q5_1 => run::<BlockQ5_1>(bytes, out)?,
        GgmlType::Q8_0 => run::<BlockQ8_0>(bytes, out)?,
        GgmlType::IQ4_NL => run::<BlockIq4Nl>(bytes, out)?,
        GgmlType::MXFP4 => run::<BlockMxfp4>(bytes, out)?,
        GgmlType::Q2_K => run::<BlockQ2K>(bytes, out)?,
        GgmlType::Q3_K => run::<BlockQ3K>(bytes, out)?,
        GgmlType::Q4_K => run::<BlockQ4K>(bytes, out)?,
        GgmlType::Q5_K => run::<BlockQ5K>(bytes, out)?,
        GgmlType::Q6_K => run::<BlockQ6K>(bytes, out)?,
        GgmlType::IQ1_S => run::<BlockIq1S>(bytes, out)?,
        GgmlType::IQ1_M => run::<BlockIq1M>(bytes, out)?,
        GgmlType::IQ2_XXS => run::<BlockIq2Xxs>(bytes, out)?,
        GgmlType::IQ2_XS => run::<BlockIq2Xs>(bytes, out)?,
        GgmlType::IQ2_S => run::<BlockIq2S>(bytes, out)?,
        GgmlType::IQ3_XXS => run::<BlockIq3Xxs>(bytes, out)?,
        GgmlType::IQ3_S => run::<BlockIq3S>(bytes, out)?,
        GgmlType::IQ4_XS => run::<BlockIq4Xs>(bytes, out)?,
        GgmlType::TQ1_0 => run::<BlockTq1_0>(bytes, out)?,
        GgmlType::TQ2_0 => run::<BlockTq2_0>(bytes, out)?,
        _ => return None,
    }
    Some(())
}

/// Decodes every block of `bytes` into consecutive `QK`-runs of `out`.
fn run<B: GgmlBlock>(bytes: &[u8], out: &mut [f32]) -> Option<()> {
    let blocks = blocks::<B>(bytes)?;
    if blocks.len() * B::QK != out.len() {
        return None;
    }
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(B::QK)) {
        b.dequantize_ref(y);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_geometry_matches_the_structs() {
        fn check<B: GgmlBlock>() {
            assert_eq!(
                B::TYPE.block(),
                Some((B::QK, size_of::<B>())),
                "{}",
                B::TYPE
            );
        }
        check::<legacy::BlockQ4_0>();
        check::<legacy::BlockQ4_1>();
        check::<legacy::BlockQ5_0>();
        check::<legacy::BlockQ5_1>();
        check::<legacy::BlockQ8_0>();
        check::<legacy::BlockIq4Nl>();
        check::<legacy::BlockMxfp4>();
        check::<kquants::BlockQ2K>();
        check::<kquants::BlockQ3K>();
        check::<kquants::BlockQ4K>();
        check::<kquants::BlockQ5K>();
        check::<kquants::BlockQ6K>();
        check::<iquants::BlockIq1S>();
        check::<iquants::BlockIq1M>();
        check::<iquants::BlockIq2Xxs>();
        check::<iquants::BlockIq2Xs>();
        check::<iquants::BlockIq2S>();
        check::<iquants::BlockIq3Xxs>();
        check::<iquants::BlockIq3S>();
        check::<iquants::BlockIq4Xs>();
        check::<ternary::BlockTq1_0>();
        check::<ternary::BlockTq2_0>();
    }

    #[test]
    fn plain_floats() {
        let b: Vec<u8> = [1.5f32, -0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(dequantize(GgmlType::F32, &b).unwrap(), [1.5, -0.0]);
        let h = f16::from_f32(0.333).to_bits().to_le_bytes();
        let b = [h, half::bf16::from_f32(-3.0).to_bits().to_le_bytes()].concat();
        assert_eq!(
            dequantize(GgmlType::F16, &b).unwrap()[0],
            f16::from_f32(0.333).to_f32()
        );
        assert_eq!(dequantize(GgmlType::BF16, &b).unwrap()[1], -3.0);
        // a signalling bf16 NaN keeps its payload; an f16 one is quieted, as
        // ggml's C and F16C conversions do
        let y = dequantize(GgmlType::BF16, &0x7f81u16.to_le_bytes()).unwrap();
        assert_eq!(y[0].to_bits(), 0x7f81_0000);
        let y = dequantize(GgmlType::F16, &0x7c01u16.to_le_bytes()).unwrap();
        assert_eq!(y[0].to_bits(), 0x7fc0_2000);
    }

    #[test]
    fn refuses_partial_blocks_wrong_outputs_and_undecodable_types() {
        assert!(dequantize(GgmlType::Q8_0, &[0; 33]).is_none());
        assert!(dequantize(GgmlType::Q8_K, &[0; 292]).is_none());
        assert!(dequantize(GgmlType(4), &[0; 20]).is_none());
        assert_eq!(dequantize(GgmlType::Q4_K, &[]), Some(vec![]));
        let mut out = [0f32; 31];
        assert!(dequantize_into(GgmlType::Q4_0, &[0; 18], &mut out).is_none());
    }
}
