//! Errors of the Hugging Face checkpoint reader. Every variant names the file and, where
//! one is involved, the tensor, so that a failure on a 600 GB release points
//! at the shard and key to look at. Owns no recovery policy: callers decide.

use std::path::PathBuf;

/// What can go wrong while reading a released checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file-system call failed. The source comes from `fs_err`, whose
    /// message already names the path.
    #[error("{source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Memory-mapping a shard failed.
    #[error("memory-map {}: {source}", path.display())]
    Mmap {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The path is neither a checkpoint folder, a Hugging Face cache entry nor
    /// a safetensors file.
    #[error("{}: not a checkpoint: {reason}", path.display())]
    NotACheckpoint { path: PathBuf, reason: String },
    /// A safetensors file whose header cannot be trusted (truncated file,
    /// invalid JSON, offsets that do not tile the data section, ...).
    #[error("{}: bad safetensors header: {source}", path.display())]
    Header {
        path: PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// `*.safetensors.index.json` is malformed.
    #[error("{}: bad index: {reason}", path.display())]
    Index { path: PathBuf, reason: String },
    /// The index names a shard file that does not exist.
    #[error("{}: shard named in the index for tensor `{tensor}` does not exist", path.display())]
    MissingShard { path: PathBuf, tensor: String },
    /// The index maps a tensor to a shard whose header does not hold it.
    #[error("{}: the index maps tensor `{tensor}` to this shard, but its header lacks it", path.display())]
    IndexMismatch { path: PathBuf, tensor: String },
    /// Two files of an index-less folder hold the same tensor.
    #[error("tensor `{name}` is stored twice: in {} and in {}", first.display(), second.display())]
    DuplicateTensor {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// `config.json` is unreadable JSON, or its `quantization_config` is malformed.
    #[error("{}: bad config: {reason}", path.display())]
    BadConfig { path: PathBuf, reason: String },
    /// No tensor of that (logical) name.
    #[error("tensor `{name}` is not in the checkpoint")]
    MissingTensor { name: String },
    /// A quantized tensor lacks one of the tensors it is stored with
    /// (`weight_scale_inv` of an fp8 weight, `weight_shape` of a packed one).
    #[error("{}: tensor `{tensor}` needs `{companion}`, which the checkpoint lacks", path.display())]
    MissingCompanion {
        path: PathBuf,
        tensor: String,
        companion: String,
    },
    /// A stored tensor's shape disagrees with the shape its role implies.
    #[error("{}: tensor `{tensor}` has shape {found:?}, expected {expected:?} ({what})", path.display())]
    ShapeMismatch {
        path: PathBuf,
        tensor: String,
        what: &'static str,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A stored tensor whose content is invalid (a negative `weight_shape`, ...).
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    BadTensor {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// Reading one row of a tensor read by row (the token embeddings of a
    /// store) failed: a short or failed read of the shard.
    #[error("{}: tensor `{tensor}`: read row {row} at byte {offset}: {source}", path.display())]
    RowRead {
        path: PathBuf,
        tensor: String,
        row: usize,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    /// A storage dtype or quantization scheme this reader does not decode.
    #[error("{}: tensor `{tensor}`: unsupported storage {dtype}", path.display())]
    Unsupported {
        path: PathBuf,
        tensor: String,
        dtype: String,
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
