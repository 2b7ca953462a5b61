//! Conversion of released checkpoints into waste stores, and the readers of
//! source formats only the converter needs. Hugging Face safetensors folders
//! are read by `waste_format::Checkpoint` (the store's backbone is one);
//! [`GgufCheckpoint`] reads a GGUF file (our own parser, exact
//! ggml dequantization, HF names, a synthesised config.json and the
//! tokenizer rebuilt from its metadata).
//! [`convert`] is the store converter (plan, estimate, streaming
//! conversion with resume, sparse upcycling).

#![deny(unsafe_code)]

pub mod convert;
pub mod error;
pub mod gguf;
pub mod inspect;
pub mod memory;
pub mod quality;
pub mod synth;

pub use error::{Error, Result};
pub use gguf::{GgufCheckpoint, GgufFile};
