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
use tonic::transport::Endpoint;
pub use wire::{ChunkDecoder, ChunkHead, ChunkParts};

/// The HTTP/2 path of the call.
pub const PATH: &str = "/waste.store.v1.ExpertStore/FetchExperts";

/// HTTP/2 frame size both ends of a store connection allow: a client
/// advertises it in its settings, and the store sends frames no larger.
/// HTTP/2's 16 KiB default halves loopback bulk throughput
/// (DEPENDENCIES.md); 1 MiB frames are read into buffers above glibc's mmap
/// threshold (128 KiB, which the node fixes), each a fresh mapping whose
/// pages the kernel faults in and zeroes, while frames of 96 KiB land in
/// reused heap memory: loopback FetchExperts 1.16 -> 0.72-0.78 CPU s/GB
/// (docs/BENCH.md).
pub const MAX_FRAME_SIZE: u32 = 96 << 10;
/// Receive window a fetching client gives each stream: a K3 record and
/// more in flight (HTTP/2's 64 KiB default caps a stream at one window per
/// round trip).
pub const CLIENT_STREAM_WINDOW: u32 = 16 << 20;
/// Receive window a fetching client gives its connection.
pub const CLIENT_CONNECTION_WINDOW: u32 = 64 << 20;

/// `endpoint` with the transport settings a client of the store's bulk
/// calls needs: [`MAX_FRAME_SIZE`], the receive windows above and no
/// Nagle delay. The node and `waste bench store` both connect through it,
/// so the benchmark measures the transport the node runs (its client once
/// kept HTTP/2's default frames and smaller windows: 0.87 against 0.97-1.19
/// GB/s over loopback, docs/BENCH.md).
pub fn client_endpoint(endpoint: Endpoint) -> Endpoint {
    endpoint
        .max_frame_size(Some(MAX_FRAME_SIZE))
        .initial_stream_window_size(Some(CLIENT_STREAM_WINDOW))
        .initial_connection_window_size(Some(CLIENT_CONNECTION_WINDOW))
        .tcp_nodelay(true)
}
