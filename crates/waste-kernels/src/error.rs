//! Errors of the kernels crate: shape mismatches between a weight and its use,
//! unknown formats and malformed packed bytes.

/// What can go wrong when a weight is built or applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor's element count does not match the shape it is given.
    #[error("tensor holds {len} values but its shape {shape:?} needs {expected}")]
    ShapeMismatch {
        shape: Vec<usize>,
        len: usize,
        expected: usize,
    },
    /// A tensor that must be a matrix has another rank.
    #[error("expected a 2-D tensor, got shape {shape:?}")]
    NotAMatrix { shape: Vec<usize> },
    /// Operands whose inner dimensions disagree.
    #[error("{what}: expected {expected} columns, got {got}")]
    DimMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A format name or id this build does not know.
    #[error("unknown weight format {what}")]
    UnknownFormat { what: String },
    /// Packed bytes whose length does not fit the format and shape.
    #[error("{format} matrix {rows}x{cols} needs {expected} packed bytes, got {got}")]
    PackedSize {
        format: &'static str,
        rows: usize,
        cols: usize,
        expected: usize,
        got: usize,
    },
    /// A native format asked to quantize: its bytes only come from a release.
    #[error("{format} has no quantizer: its bytes are kept as a release stores them")]
    NoQuantizer { format: &'static str },
    /// A native format given int8-quantized activations: it multiplies f32 ones.
    #[error("{format} is a native format: its products take f32 activations, not int8")]
    ExactFormat { format: &'static str },
    /// A packed expert record that fails validation (bytes from disk or network).
    #[error("bad expert record at byte {offset}: {what}")]
    BadRecord { what: String, offset: usize },
}

pub type Result<T> = std::result::Result<T, Error>;
