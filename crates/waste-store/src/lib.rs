//! The expert store: serves the routed-expert records of one waste store
//! from local NVMe over gRPC (`waste.store.v1.ExpertStore`): `Info`,
//! `FetchExperts` (records streamed in chunks of at most 1 MiB as the disk
//! reads complete; also on the bulk channel), `ComputeExperts` (a layer's
//! experts run next to the disk) and `PrefetchExperts` (a node's guess of
//! the next layer's experts, read ahead for that generation's
//! ComputeExperts). Reads go through waste-format's IO engine (O_DIRECT,
//! reads in flight in disk order, bounded buffer bytes).
//!
//! [`run`] serves a [`Config`] on a bound listener until a
//! `CancellationToken` fires. Domain logic ([`Store`], [`fetch`],
//! [`compute`]) is plain and testable without gRPC; [`service`] is the thin
//! tonic layer, [`fetch_route`] serves FetchExperts below tonic's codec
//! (no copy of the records), [`bulk`] serves the same fetches on a plain
//! TCP stream (the bulk channel, on the same listener), and `status.rs` is
//! the one error-to-status map. [`synth`] writes benchmark stores and
//! [`bench`] measures served against raw bandwidth.

#![forbid(unsafe_code)]

pub mod bulk;
pub mod compute;
pub mod config;
pub mod error;
pub mod fetch;
pub mod fetch_route;
pub mod metrics;
pub mod server;
pub mod service;
mod staging;
mod status;
pub mod store;
pub mod synth;

pub use config::{Config, Limits};
pub use error::{Error, Result};
pub use server::{MAX_FRAME_SIZE, run, serve};
pub use store::Store;
