//! `ExpertStore.FetchExperts` without copying the payload, on both ends.
//!
//! The records are the bulk of what the store sends (megabytes per expert,
//! gigabytes per token), and tonic's codec copies every message once on
//! each side: into its encode buffer on the server, into its decode buffer
//! on the client. On a 2-core box those copies, the kernel's socket copies
//! and the checksums took the cores before the disk was busy
//! (docs/BENCH.md). This bulk RPC is therefore sent and read here at the
//! HTTP/2 level, with the wire format unchanged, so any gRPC peer (tonic's
//! generated client and server, grpcurl) interoperates:
//!
//! - [`server`]: each chunk goes out as two DATA frames, its fields
//!   ([`wire::chunk_prefix`]) and then its data straight from the store's
//!   read buffer;
//! - [`client`]: the response's DATA frames are cut into chunks whose data
//!   stay slices of the frames as received ([`wire::ChunkDecoder`]), so the
//!   one copy left on the node is the one into the record buffer.
//!
//! Transport glue like [`crate::auth`], kept here because the store and
//! the node, which may not depend on each other, both need it.

pub mod client;
pub mod server;
pub mod wire;

pub use client::{ChunkStream, fetch_experts};
pub use wire::{ChunkDecoder, ChunkHead, ChunkParts};

/// The HTTP/2 path of the call.
pub const PATH: &str = "/waste.store.v1.ExpertStore/FetchExperts";
