//! Errors of the store format. Every variant names the file, and where it
//! applies the layer and expert, so a damaged store can be pinpointed.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// No manifest: the store was never finished (or is not a store).
    #[error("{}: no manifest.json; the store is incomplete (conversion did not finish) or this is not a waste store", root.display())]
    MissingManifest { root: PathBuf },
    /// A format version this build cannot read.
    #[error("{}: store format {found} is not readable by this build (reads {supported})", path.display())]
    Version {
        path: PathBuf,
        found: String,
        supported: String,
    },
    /// An index file does not hash to what the manifest recorded.
    #[error("{}: sha256 {found} differs from the manifest's {expected}", path.display())]
    IndexHash {
        path: PathBuf,
        expected: String,
        found: String,
    },
    /// A malformed layer-file header.
    #[error("{}: bad header: {reason}", path.display())]
    BadHeader { path: PathBuf, reason: String },
    /// The index and a file (or the request) disagree.
    #[error("{}: {reason}", path.display())]
    Inconsistent { path: PathBuf, reason: String },
    #[error("layer {layer} has no experts in this store")]
    LayerNotFound { layer: u32 },
    #[error("layer {layer} expert {expert} is out of range (the layer has {n_experts})")]
    ExpertOutOfRange {
        layer: u32,
        expert: u32,
        n_experts: u32,
    },
    /// A record whose bytes do not match its checksum.
    #[error("{}: layer {layer} expert {expert} at offset {offset}: checksum {found:016x} differs from the index's {expected:016x} (corrupted record)", path.display())]
    ChecksumMismatch {
        path: PathBuf,
        layer: u32,
        expert: u32,
        offset: u64,
        expected: u64,
        found: u64,
    },
    /// A record chunk streamed by a store that does not fit the request or
    /// the chunks before it (see `waste_format::io::Reassembler`).
    #[error("layer {layer} expert {expert}: bad record chunk from the store: {reason}")]
    BadChunk {
        layer: u32,
        expert: u32,
        reason: String,
    },
    /// A backbone shard whose bytes do not match the checksum recorded at conversion.
    #[error("{}: backbone shard xxh3 {found} differs from the recorded {expected} (corrupted shard)", path.display())]
    ShardChecksum {
        path: PathBuf,
        expected: String,
        found: String,
    },
    /// A folder whose conversion did not finish (no completion marker).
    #[error("the conversion into {} did not finish ({reason}): rerun waste convert with the same arguments to resume", root.display())]
    Unfinished { root: PathBuf, reason: String },
    /// A file shorter than the index says.
    #[error("{}: layer {layer} expert {expert}: read {got} of {expected} bytes at offset {offset} (truncated file)", path.display())]
    ShortRead {
        path: PathBuf,
        layer: u32,
        expert: u32,
        offset: u64,
        expected: usize,
        got: usize,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The file this error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Io { path, .. }
            | Error::Json { path, .. }
            | Error::Version { path, .. }
            | Error::IndexHash { path, .. }
            | Error::BadHeader { path, .. }
            | Error::Inconsistent { path, .. }
            | Error::ChecksumMismatch { path, .. }
            | Error::ShardChecksum { path, .. }
            | Error::ShortRead { path, .. } => Some(path),
            Error::MissingManifest { root } | Error::Unfinished { root, .. } => Some(root),
            Error::LayerNotFound { .. }
            | Error::ExpertOutOfRange { .. }
            | Error::BadChunk { .. } => None,
        }
    }

    /// The message for a remote client: as [`std::fmt::Display`], with the
    /// file's path cut to its last three components (`STORE/experts/layer-003.experts`),
    /// which name the store and the file but not where the server keeps them.
    pub fn redacted(&self) -> String {
        let msg = self.to_string();
        match self.path() {
            Some(p) => msg.replace(&p.display().to_string(), &short_path(p)),
            None => msg,
        }
    }
}

/// The last three components of `path`, never absolute.
pub fn short_path(path: &Path) -> String {
    let parts: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy()),
            _ => None,
        })
        .collect();
    parts[parts.len().saturating_sub(3)..].join("/")
}

pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_message_keeps_the_layer_expert_and_store_but_no_absolute_path() {
        let e = Error::ChecksumMismatch {
            path: "/srv/disk0/stores/qwen3/experts/layer-003.experts".into(),
            layer: 3,
            expert: 5,
            offset: 4096,
            expected: 1,
            found: 2,
        };
        let msg = e.redacted();
        assert!(
            msg.starts_with("qwen3/experts/layer-003.experts: layer 3 expert 5"),
            "{msg}"
        );
        assert!(!msg.contains("/srv"), "{msg}");
        assert_eq!(short_path(Path::new("/a")), "a");
    }
}
