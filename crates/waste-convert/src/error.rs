//! Errors of the converter and the GGUF reader. Every variant names the
//! file and, where one is involved, the tensor, so that a failure on a 600 GB release points
//! at the shard and key to look at. Owns no recovery policy: callers decide.

use std::path::PathBuf;

/// What can go wrong while reading a GGUF file or converting a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Hugging Face safetensors folder could not be read.
    #[error(transparent)]
    Checkpoint(#[from] waste_format::checkpoint::Error),
    /// The store being written could not be.
    #[error(transparent)]
    Store(#[from] waste_format::Error),
    /// A file-system call failed. The source comes from `fs_err`, whose
    /// message already names the path.
    #[error("{source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No tensor of that (logical) name.
    #[error("tensor `{name}` is not in the checkpoint")]
    MissingTensor { name: String },
    /// A stored tensor whose content is invalid (a negative `weight_shape`, ...).
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    BadTensor {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// A storage dtype or quantization scheme this reader does not decode.
    #[error("{}: tensor `{tensor}`: unsupported storage {dtype}", path.display())]
    Unsupported {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },
    /// A GGUF file whose header, metadata or tensor table is malformed
    /// (truncated, counts past the end, bad magic or version, ...).
    #[error("{}: bad GGUF at byte {offset}: {reason}", path.display())]
    Gguf {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A GGUF metadata key is missing, mistyped or holds a value waste cannot use.
    #[error("{}: GGUF metadata `{key}`: {reason}", path.display())]
    GgufMetadata {
        path: PathBuf,
        key: String,
        reason: String,
    },
    /// A config.json (or a file the converter writes) says something the
    /// converter cannot use.
    #[error("{}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    /// An expert record that its checksum vouches for but whose header the
    /// kernels refuse (an unknown format id, say: a newer writer's).
    #[error("{}: layer {layer} expert {expert}: {source}", path.display())]
    Record {
        path: PathBuf,
        layer: u32,
        expert: u32,
        source: waste_kernels::Error,
    },
    /// The output folder cannot take this conversion.
    #[error("{}: {reason}", path.display())]
    Output { path: PathBuf, reason: String },
    /// The destination's file system lacks room for the store.
    #[error("{}: the store needs {needed} more bytes but the file system has {available} free; free some space or pick another folder", path.display())]
    NoSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },
    /// A well-formed GGUF of an architecture this reader does not map to a
    /// Hugging Face model.
    #[error("{}: GGUF architecture `{architecture}` is not supported: {reason}", path.display())]
    UnsupportedGguf {
        path: PathBuf,
        architecture: String,
        reason: String,
    },
    /// The conversion stopped on request (SIGINT, SIGTERM) before it
    /// finished; what it finished is journaled.
    #[error("{}: interrupted with {layers_done} of {layers} expert layers written; run the same command again to resume", path.display())]
    Interrupted {
        path: PathBuf,
        layers_done: usize,
        layers: usize,
    },
    /// A part of a split GGUF model is not beside the part that was opened.
    #[error("{}: missing: part {part} of {count} of a split GGUF model (llama.cpp names the parts PREFIX-0000i-of-0000n.gguf and reads them from one folder)", path.display())]
    MissingGgufPart {
        path: PathBuf,
        part: u64,
        count: u64,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an `fs_err` error (its message names the path).
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
