//! Weight formats and the hot kernels of waste.
//!
//! Owns how weights are laid out in memory and how they are multiplied: dense
//! f32/bf16 matrices ([`Matrix`]), named tensors handed over by a checkpoint
//! reader ([`Tensor`], [`TensorSource`]), the expert FFN interface
//! ([`ExpertFfn`]) and ggml's GGUF block types with their exact decoders
//! ([`ggml`]). Does no IO and knows nothing of async runtimes.

pub mod dense;
pub mod error;
pub mod expert;
pub mod ggml;
pub mod hadamard;
pub mod native;
pub mod par;
pub mod q3;
pub mod q3tcq;
pub mod q4;
pub mod q8;
pub mod quant;
pub mod record;
pub mod stash;
pub mod tensor;

pub use dense::{Matrix, Q8Products};
pub use error::{Error, Result};
pub use expert::{Activation, DenseExpert, ExpertFfn, Route, weighted_sum};
pub use quant::{
    Format, Isa, Kernels, PackedMatrix, Quantized, QuantizedActs, dequantize, kernels, quantize,
};
pub use record::{
    PackedExpert, Recipe, RecordHeader, build_record, build_record_raw, quantize_expert, record_len,
};
pub use tensor::{RowSource, Tensor, TensorData, TensorSource, TensorSourceError};
