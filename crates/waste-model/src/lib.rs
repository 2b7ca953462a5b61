//! The synchronous forward pass of waste: Hugging Face configs of every
//! supported family, the layers, the KV cache and the step API that routes
//! experts without fetching them (the caller supplies them).
//!
//! Also the text side: the tokenizer (tokenizer.json), the checkpoint's chat
//! template and the sampler. No async runtime, no gRPC, no file formats
//! beyond config.json and tokenizer files: weights arrive through
//! [`waste_kernels::TensorSource`].

#![forbid(unsafe_code)]

pub mod arch;
pub mod cache;
pub mod chat;
pub mod config;
pub mod error;
pub mod experts;
pub mod generate;
pub mod layers;
pub mod limits;
pub mod model;
pub mod ops;
pub mod sampling;
pub mod tensors;
pub mod token_loop;
pub mod tokenizer;
pub mod trace;

pub use cache::KvCache;
pub use chat::{ChatTemplate, ChatTemplateError, Message};
pub use config::ModelConfig;
pub use error::{Error, Result};
pub use experts::{ExpertProvider, SourceExperts};
pub use generate::{Generation, GenerationStats, Piece};
pub use layers::moe::Routing;
pub use model::{Activations, LogitsFor, Model};
pub use sampling::{Sampler, SamplingError, SamplingParams, StopMatcher};
pub use token_loop::{FinishReason, GenerateJob, SessionState, TokenLoop};
pub use tokenizer::{DecodeStream, Tokenizer, TokenizerError};
pub use trace::{NoTrace, Trace};
