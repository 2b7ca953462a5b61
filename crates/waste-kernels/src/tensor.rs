//! Named tensors as a checkpoint reader hands them over, and the trait a model
//! loads its weights through. The reader (waste-convert, later the store's
//! backbone files) decodes its formats; this module only carries the values.

use half::bf16;

use crate::ggml::GgmlType;
use crate::{Error, Format, Matrix, Result};

/// The values of a tensor, kept in a precision that represents them exactly.
#[derive(Debug, Clone)]
pub enum TensorData {
    F32(Vec<f32>),
    /// bf16 sources stay bf16: every bf16 is an exact f32, so kernels that
    /// widen on the fly compute what an f32 copy would, in half the memory.
    Bf16(Vec<bf16>),
    /// A matrix in [`crate::Format::Q8`] blocks, row by row, as an 8-bit
    /// backbone stores it: kept packed, so it stays 1.06 bytes per value in
    /// RAM. Only for 2-D shapes.
    Q8(Vec<u8>),
    /// A matrix in a ggml type's blocks, row by row, as a GGUF stores it
    /// (`--backbone native` on a GGUF): kept packed. Only for 2-D shapes.
    Ggml(GgmlType, Vec<u8>),
    /// A matrix in any block format's rows (`q4`, `q3`, and `q8` or ggml
    /// blocks as a store's `weight_blocks` keeps them): kept packed, held
    /// as [`Matrix::blocks`] holds that format. Only for 2-D shapes.
    Packed(Format, Vec<u8>),
}

/// A dense tensor, row-major, with its shape.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    /// Builds a tensor, checking that `data` fills `shape` exactly.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Self> {
        let (len, expected) = match &data {
            TensorData::F32(v) => (v.len(), shape.iter().product::<usize>()),
            TensorData::Bf16(v) => (v.len(), shape.iter().product::<usize>()),
            TensorData::Q8(v) => {
                let &[rows, cols] = &shape[..] else {
                    return Err(Error::NotAMatrix { shape });
                };
                let expected = Format::Q8.packed_size(rows, cols).unwrap_or(usize::MAX);
                (v.len(), expected)
            }
            TensorData::Ggml(ty, v) => {
                let &[rows, cols] = &shape[..] else {
                    return Err(Error::NotAMatrix { shape });
                };
                let expected = Format::Ggml(*ty)
                    .packed_size(rows, cols)
                    .unwrap_or(usize::MAX);
                (v.len(), expected)
            }
            TensorData::Packed(format, v) => {
                let &[rows, cols] = &shape[..] else {
                    return Err(Error::NotAMatrix { shape });
                };
                (
                    v.len(),
                    format.packed_size(rows, cols).unwrap_or(usize::MAX),
                )
            }
        };
        if len != expected {
            return Err(Error::ShapeMismatch {
                shape,
                len,
                expected,
            });
        }
        Ok(Self { shape, data })
    }

    pub fn from_f32(shape: Vec<usize>, data: Vec<f32>) -> Result<Self> {
        Self::new(shape, TensorData::F32(data))
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes the values occupy in memory, as held.
    pub fn size_bytes(&self) -> usize {
        match &self.data {
            TensorData::F32(v) => v.len() * 4,
            TensorData::Bf16(v) => v.len() * 2,
            TensorData::Q8(v) | TensorData::Ggml(_, v) | TensorData::Packed(_, v) => v.len(),
        }
    }

    /// The values widened to f32 (exact for every stored precision; q8
    /// and ggml blocks give their dequantized values).
    pub fn into_f32(self) -> Vec<f32> {
        let (format, v) = match self.data {
            TensorData::F32(v) => return v,
            TensorData::Bf16(v) => return v.into_iter().map(bf16::to_f32).collect(),
            TensorData::Q8(v) => (Format::Q8, v),
            TensorData::Ggml(ty, v) => (Format::Ggml(ty), v),
            TensorData::Packed(format, v) => (format, v),
        };
        crate::quant::dequantize(format, self.shape[0], self.shape[1], &v)
            .expect("block tensors are size-checked when built")
    }

    /// The tensor as a matrix of shape (shape[0], shape[1]), keeping its precision.
    pub fn into_matrix(self) -> Result<Matrix> {
        let [rows, cols] = self.shape[..] else {
            return Err(Error::NotAMatrix { shape: self.shape });
        };
        Ok(match self.data {
            TensorData::F32(v) => Matrix::f32(rows, cols, v)?,
            TensorData::Bf16(v) => Matrix::bf16(rows, cols, v)?,
            TensorData::Q8(v) => Matrix::q8(rows, cols, v)?,
            TensorData::Ggml(ty, v) => Matrix::ggml(ty, rows, cols, v)?,
            TensorData::Packed(format, v) => Matrix::blocks(format, rows, cols, v)?,
        })
    }
}

/// The error a [`TensorSource`] reports; it should name the file and tensor.
pub type TensorSourceError = Box<dyn std::error::Error + Send + Sync>;

/// Where a model's weights come from, by Hugging Face state-dict name
/// (`model.layers.0.self_attn.q_proj.weight`). Implementations decode their
/// storage format exactly; quantized sources expose the logical weight name.
pub trait TensorSource: Sync {
    fn contains(&self, name: &str) -> bool;
    fn load(&self, name: &str) -> std::result::Result<Tensor, TensorSourceError>;

    /// The rows of matrix `name` read one at a time when needed, instead of
    /// the whole matrix held in RAM; `None` when this source only loads
    /// whole tensors (the default). A model asks for its token embeddings
    /// this way when no other weight needs the whole table.
    fn rows(
        &self,
        name: &str,
    ) -> Option<std::result::Result<Box<dyn RowSource>, TensorSourceError>> {
        let _ = name;
        None
    }
}

/// A (rows, cols) matrix whose rows are read on demand (the token
/// embeddings of a store, from its backbone file). Each row widens to
/// exactly the f32 values [`Matrix::row_f32_into`] gives for the same
/// stored row.
pub trait RowSource: Send + Sync + std::fmt::Debug {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// Row `r` widened to f32 into `buf` (len = cols); errors name the file
    /// and tensor.
    fn row_f32_into(&self, r: usize, buf: &mut [f32])
    -> std::result::Result<(), TensorSourceError>;
    /// The most bytes it holds in RAM (its cache of recent rows).
    fn resident_bytes(&self) -> usize;
}
