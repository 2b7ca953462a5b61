//! Tensor sources that hand over another source's tensors changed the way
//! a converted backbone would hold them: [`Dequantized`] (every tensor as
//! f32 values) and [`Quantized`] (every matrix in a block format, as
//! `waste convert --backbone q8|q4|q3` stores a dense model's).

use waste_kernels::{Format, Tensor, TensorData, TensorSource, TensorSourceError, quantize};

/// A checkpoint whose tensors are all handed over as f32 values.
#[allow(missing_debug_implementations)]
pub struct Dequantized<'a>(pub &'a dyn TensorSource);

impl TensorSource for Dequantized<'_> {
    fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    fn load(&self, name: &str) -> Result<Tensor, TensorSourceError> {
        let t = self.0.load(name)?;
        Ok(Tensor::from_f32(t.shape.clone(), t.into_f32())?)
    }
}

/// A source whose matrices (2-D `.weight`s) are quantized to a block
/// format on load.
#[allow(missing_debug_implementations)]
pub struct Quantized<'a>(pub &'a dyn TensorSource, pub Format);

impl TensorSource for Quantized<'_> {
    fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    fn load(&self, name: &str) -> Result<Tensor, TensorSourceError> {
        let t = self.0.load(name)?;
        let &[rows, cols] = &t.shape[..] else {
            return Ok(t);
        };
        if !name.ends_with(".weight") {
            return Ok(t);
        }
        let shape = t.shape.clone();
        let q = quantize(self.1, rows, cols, &t.into_f32())?;
        let data = match self.1 {
            Format::Q8 => TensorData::Q8(q.bytes),
            format => TensorData::Packed(format, q.bytes),
        };
        Ok(Tensor::new(shape, data)?)
    }
}
