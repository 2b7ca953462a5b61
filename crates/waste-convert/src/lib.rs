//! Readers of released checkpoints: Hugging Face safetensors folders (one
//! file, shards with an index, or a cache snapshot), memory-mapped, with the
//! release formats decoded exactly into f32 (bf16 kept as bf16): FP8 E4M3
//! 128x128 blocks (DeepSeek-V3, Kimi-K2) and compressed-tensors int4
//! `pack-quantized` (Kimi-K2-Thinking). [`Checkpoint`] implements
//! [`waste_kernels::TensorSource`] so models load from it by HF name.
//! Later this crate also holds the store converter (quantizer driver,
//! streaming conversion with resume); GGUF readers are not here yet.

#![deny(unsafe_code)]

pub mod checkpoint;
pub mod decode;
pub mod error;

pub use checkpoint::{Checkpoint, RawTensor, Storage, TensorInfo};
pub use error::{Error, Result};
