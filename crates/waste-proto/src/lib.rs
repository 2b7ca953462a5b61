//! Code generated from the workspace's `proto/` directory, plus re-exports of the tonic and
//! prost types its users need, so that store, node and tests pin a single version of each.
//! No protocol logic lives here: the `.proto` files are the protocol specification, with a
//! comment on every message and field (units, limits, byte order, status codes).
//!
//! - [`store::v1`]: `waste.store.v1.ExpertStore`, served by the expert store: `Info`,
//!   `FetchExperts` (server-streaming record chunks of at most 1 MiB), `ComputeExperts`
//!   (the routed experts of one layer, run next to the disk) and `PrefetchExperts` (records
//!   read ahead for a later ComputeExperts).
//! - [`node::v1`]: `waste.node.v1.Node`, served by the compute node: `Generate`
//!   (server-streaming tokens, then stats), `Tokenize` and `Info`.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors of both packages, for gRPC reflection.
//! - [`auth`], [`fetch`] and [`bulk`]: transport glue both daemons need (bearer tokens;
//!   FetchExperts sent and read without copying the records; the bulk channel, which
//!   carries the same records on a plain TCP stream).
//! - [`codec`]: the node protocol's codec (an undecodable request is INVALID_ARGUMENT).
//!
//! Payload fields (`bytes` in the `.proto`) are [`Bytes`], which decode without a copy.
#![forbid(unsafe_code)]

pub mod auth;
pub mod bulk;
pub mod codec;
pub mod fetch;

/// The expert store protocol.
pub mod store {
    /// Version 1 of `waste.store.v1` (generated).
    #[allow(
        clippy::all,
        clippy::pedantic,
        rustdoc::broken_intra_doc_links,
        rustdoc::invalid_html_tags,
        rustdoc::bare_urls
    )]
    pub mod v1 {
        tonic::include_proto!("waste.store.v1");
    }
}

/// The compute node protocol.
pub mod node {
    /// Version 1 of `waste.node.v1` (generated).
    #[allow(
        clippy::all,
        clippy::pedantic,
        rustdoc::broken_intra_doc_links,
        rustdoc::invalid_html_tags,
        rustdoc::bare_urls
    )]
    pub mod v1 {
        tonic::include_proto!("waste.node.v1");
    }
}

/// Encoded `google.protobuf.FileDescriptorSet` of every package above, with source info
/// (comments), for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/waste_descriptor.bin"));

pub use prost;
pub use prost::bytes::Bytes;
pub use tonic;
pub use tonic::{Code, Request, Response, Status, Streaming, transport};
