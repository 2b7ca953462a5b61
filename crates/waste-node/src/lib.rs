//! The compute node: holds the backbone in RAM, runs the model layer by
//! layer, and gets each MoE layer's routed contribution from an
//! [`ExpertSource`] — local files, records fetched from an expert store, or
//! the store computing next to its disk — through one RAM cache with
//! prefetch. Serves Generate (streaming), Tokenize and Info over gRPC, and
//! the OpenAI-compatible HTTP API with `/metrics` on the same port.
//!
//! Async (tokio) at the edges; the forward pass runs on a dedicated rayon
//! pool bridged with oneshot channels. Never depends on the store crate:
//! they share only `waste-proto`.

#![forbid(unsafe_code)]

pub mod cache;
pub mod compute;
pub mod config;
mod dispatch;
pub mod engine;
pub mod error;
pub mod generate;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod open;
pub mod plan;
pub mod progress;
pub mod request;
pub mod server;
pub mod service;
pub mod session;
pub mod source;
mod status;

pub use config::{Config, ExpertMode, ModelSource, StoreExperts, parse_size};
pub use error::{Error, Result};
pub use node::Node;
pub use server::serve;
pub use source::ExpertSource;
