//! Errors of the store library. Variants are nouns with the layer and
//! expert where one is involved; `status.rs` maps each to one gRPC code.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (ids, sizes, weights, batch size).
    #[error("bad request: {reason}")]
    BadRequest { reason: String },
    /// A stored record failed its checksum or came back short. The
    /// message shows the record's file by its store-relative path only
    /// (`STORE/experts/layer-003.experts`): clients see it.
    #[error("checksum mismatch: layer {layer} expert {expert}: {}", source.redacted())]
    ChecksumMismatch {
        layer: u32,
        expert: u32,
        source: waste_format::Error,
    },
    /// A record passed its checksum but its contents are not a valid
    /// expert of this layer (the store was written wrong).
    #[error("layer {layer} expert {expert}: stored record is unusable: {reason}")]
    BadRecord {
        layer: u32,
        expert: u32,
        reason: String,
    },
    /// The client expects another store (this one was restarted on a
    /// different model).
    #[error(
        "wrong store: this store's experts index sha256 is {found}, the client expects {expected}"
    )]
    WrongStore { expected: String, found: String },
    /// Too many requests in flight; retry after `retry_after_secs`.
    #[error("overloaded: {what}; retry after {retry_after_secs} s")]
    Overloaded { what: String, retry_after_secs: u32 },
    /// The store is draining for shutdown.
    #[error("the store is shutting down")]
    ShuttingDown,
    /// The store's files (opening, reading).
    #[error(transparent)]
    Format(waste_format::Error),
    /// A configuration value (before anything is bound).
    #[error("config: {reason}")]
    Config { reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("grpc transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A blocking task failed to complete (a panic in a kernel: a bug).
    #[error("internal: {what}")]
    Internal { what: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<waste_format::Error> for Error {
    /// Sorts format errors by who is at fault: ids from the client are bad
    /// requests, damaged records are data loss, the rest is the store's.
    fn from(e: waste_format::Error) -> Self {
        use waste_format::Error as F;
        match e {
            F::LayerNotFound { .. } | F::ExpertOutOfRange { .. } => Error::BadRequest {
                reason: e.to_string(),
            },
            F::ChecksumMismatch { layer, expert, .. } | F::ShortRead { layer, expert, .. } => {
                Error::ChecksumMismatch {
                    layer,
                    expert,
                    source: e,
                }
            }
            other => Error::Format(other),
        }
    }
}
