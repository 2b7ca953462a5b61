//! The store's root `manifest.json`: format version, where the store came
//! from, how it was quantized, and the sha256 of both indexes. It is written
//! last and atomically (temporary file, fsync, rename, fsync of the folder),
//! so a store with a manifest is complete, and one without is refused.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::FORMAT_VERSION;
use crate::error::{Error, Result, io};

pub const MANIFEST: &str = "manifest.json";

/// A format version: readers accept the same major and a minor no newer than theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Version {
    /// Errors unless this build can read a store of version `self`.
    pub fn check_readable(self, path: &Path) -> Result<()> {
        if self.major != FORMAT_VERSION.major || self.minor > FORMAT_VERSION.minor {
            return Err(Error::Version {
                path: path.to_path_buf(),
                found: self.to_string(),
                supported: format!("{}.0 to {FORMAT_VERSION}", FORMAT_VERSION.major),
            });
        }
        Ok(())
    }
}

/// One input file of the conversion, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    pub name: String,
    pub bytes: u64,
}

/// What the store was converted from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The path given to the converter.
    pub path: String,
    /// `huggingface` or `gguf`.
    pub kind: String,
    /// sha256 of the source's config (config.json, or the GGUF metadata as JSON).
    pub config_sha256: String,
    pub files: Vec<SourceFile>,
}

/// An index file and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRef {
    /// Relative to the store root.
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format_version: Version,
    /// The program that wrote the store (`waste 0.1.0`).
    pub created_by: String,
    pub source: Source,
    /// Expert format name (`q3`, `native`, ...) and backbone format (`native`, `bf16`, `q8`).
    pub experts_format: String,
    pub backbone_format: String,
    pub backbone_index: IndexRef,
    pub experts_index: IndexRef,
}

impl Manifest {
    /// Writes `root/manifest.json` atomically.
    pub fn write_atomic(&self, root: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(|source| Error::Json {
            path: root.join(MANIFEST),
            source,
        })?;
        write_atomic(&root.join(MANIFEST), &json)
    }

    /// Reads the manifest of `root`, checks its version and that both
    /// indexes hash to what it recorded.
    pub fn load_verified(root: &Path) -> Result<Self> {
        let path = root.join(MANIFEST);
        if !path.exists() {
            return Err(Error::MissingManifest {
                root: root.to_path_buf(),
            });
        }
        let bytes = fs_err::read(&path).map_err(io(&path))?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        m.format_version.check_readable(&path)?;
        for index in [&m.backbone_index, &m.experts_index] {
            let p = root.join(&index.path);
            let found = sha256_file(&p)?;
            if found != index.sha256 {
                return Err(Error::IndexHash {
                    path: p,
                    expected: index.sha256.clone(),
                    found,
                });
            }
        }
        Ok(m)
    }
}

/// Whether `path` is (meant to be) a store: it has a manifest, or the two
/// folders a conversion writes (an unfinished one is then refused, saying so).
pub fn is_store(path: &Path) -> bool {
    path.join(MANIFEST).is_file()
        || (path.join("backbone").is_dir() && path.join("experts").is_dir())
}

/// What a finished store was made from and how.
#[derive(Debug, Clone)]
pub struct Finish<'a> {
    /// The program writing the store (`waste 0.1.0`).
    pub created_by: &'a str,
    pub source: Source,
    pub experts_format: &'a str,
    pub backbone_format: &'a str,
}

/// Seals the store at `root` once `experts/` (its index saved) and the
/// backbone's `shards` are written, in the order a reader relies on: the
/// experts' completion marker; the backbone's metadata (its shards'
/// checksums and the experts index's sha256) and then its marker; the
/// manifest last, so a store with a manifest is a whole one.
pub fn finish_store<'a>(
    root: &Path,
    shards: impl IntoIterator<Item = &'a str>,
    how: Finish<'_>,
) -> Result<Manifest> {
    use crate::backbone::{BACKBONE_INDEX, BackboneMeta};
    use crate::experts::INDEX;
    let (experts, backbone) = (root.join("experts"), root.join("backbone"));
    let experts_sha256 = sha256_file(&experts.join(INDEX))?;
    crate::completion::mark_complete(&experts, how.created_by)?;
    // The shards are hashed from their files, so resumed ones are covered
    // too (one more read of the backbone, at disk speed).
    BackboneMeta::compute(&backbone, shards, &experts_sha256)?.save(&backbone)?;
    crate::completion::mark_complete(&backbone, how.created_by)?;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        created_by: how.created_by.to_string(),
        source: how.source,
        experts_format: how.experts_format.to_string(),
        backbone_format: how.backbone_format.to_string(),
        backbone_index: IndexRef {
            path: format!("backbone/{BACKBONE_INDEX}"),
            sha256: sha256_file(&backbone.join(BACKBONE_INDEX))?,
        },
        experts_index: IndexRef {
            path: format!("experts/{INDEX}"),
            sha256: experts_sha256,
        },
    };
    manifest.write_atomic(root)?;
    Ok(manifest)
}

/// Hex sha256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = fs_err::read(path).map_err(io(path))?;
    Ok(sha256_hex(&bytes))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `path` so that readers see the old file or the whole new one:
/// a temporary sibling, fsync, rename over, fsync of the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let mut f = std::io::BufWriter::new(fs_err::File::create(&tmp).map_err(io(&tmp))?);
    f.write_all(bytes).map_err(io(&tmp))?;
    commit(f, &tmp, path)
}

/// Makes the file written through `out` at `tmp` durable as `path`:
/// flushed, synced, renamed, and the rename synced.
pub fn commit(out: std::io::BufWriter<fs_err::File>, tmp: &Path, path: &Path) -> Result<()> {
    let file = out.into_inner().map_err(|e| Error::Io {
        path: tmp.to_path_buf(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(io(tmp))?;
    drop(file);
    fs_err::rename(tmp, path).map_err(io(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// `path` with `.tmp` appended to its file name.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// fsync of a directory, so a rename in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let f = fs_err::File::open(dir).map_err(io(dir))?;
    f.sync_all().map_err(io(dir))
}
