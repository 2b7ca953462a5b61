//! Readers of released checkpoints: Hugging Face safetensors folders (one
//! file, shards with an index, or a cache snapshot), memory-mapped, with the
//! release formats decoded exactly into f32 (bf16 kept as bf16): FP8 E4M3
//! 128x128 blocks (DeepSeek-V3, Kimi-K2) and compressed-tensors int4
//! `pack-quantized` (Kimi-K2-Thinking). [`Checkpoint`] implements
//! [`waste_kernels::TensorSource`] so models load from it by HF name.
//! [`GgufCheckpoint`] does the same for a GGUF file (our own parser, exact
//! ggml dequantization, HF names, a synthesised config.json and the
//! tokenizer rebuilt from its metadata).
//! Later this crate also holds the store converter (quantizer driver,
//! streaming conversion with resume).

#![deny(unsafe_code)]

pub mod checkpoint;
pub mod decode;
pub mod error;
pub mod gguf;

pub use checkpoint::{Checkpoint, RawTensor, Storage, TensorInfo};
pub use error::{Error, Result};
pub use gguf::{GgufCheckpoint, GgufFile};
