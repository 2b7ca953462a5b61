//! The `backbone/` folder is a Hugging Face checkpoint folder without the
//! routed experts: `config.json`, tokenizer files, safetensors shards and
//! `model.safetensors.index.json` (its own index). Any safetensors reader
//! loads it; waste-convert's does, with its fp8/int4 decoding.
//!
//! This module writes shards in a streaming way: the header is written from
//! the list of tensors first, then each tensor's bytes as they are produced,
//! so converting a large backbone never holds more than one tensor.
//!
//! [`BackboneMeta`] (`waste-backbone.json`, store format 1.1) records what
//! the Hugging Face index cannot: the sha256 of the `experts/index.json`
//! converted with this backbone (the identity a node checks its experts
//! against) and an xxh3-64 of every shard file, checked at load.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Version;
use crate::error::{Error, Result, io};
use crate::manifest::{commit, tmp_path, write_atomic};

/// The index file of the backbone folder.
pub const BACKBONE_INDEX: &str = "model.safetensors.index.json";
/// waste's metadata of the backbone folder ([`BackboneMeta`]).
pub const BACKBONE_META: &str = "waste-backbone.json";

/// A weight `<p>.weight` stored in waste's 8-bit group format
/// (`--backbone q8`) is `<p>` + this (U8 [rows, ceil(cols/32)·34], the
/// waste-kernels `q8` blocks of each row) plus `<p>` + [`SHAPE_SUFFIX`]
/// (I64 [2] = [rows, cols]). [`crate::Checkpoint`] loads it still packed.
pub const Q8_SUFFIX: &str = ".weight_q8";
/// The logical shape companion of a packed weight.
pub const SHAPE_SUFFIX: &str = ".weight_shape";
/// A weight `<p>.weight` kept as a GGUF stores it (`--backbone native` on a
/// GGUF) is `<p>` + this (U8 [rows, row bytes], each row the ggml blocks of
/// that row), `<p>` + [`SHAPE_SUFFIX`] and `<p>` + [`GGML_TYPE_SUFFIX`].
/// [`crate::Checkpoint`] loads it still packed.
pub const GGML_SUFFIX: &str = ".weight_ggml";
/// The ggml type companion of a [`GGML_SUFFIX`] weight: I64 [1], ggml's id.
pub const GGML_TYPE_SUFFIX: &str = ".weight_ggml_type";
/// A weight `<p>.weight` kept as the rows of a block format (store format
/// 1.3; `--backbone q8|q4|q3|auto`, a GGUF's blocks under `native`) is
/// `<p>` with this suffix (U8 [rows, row bytes], each row that format's
/// blocks), its [`SHAPE_SUFFIX`] and its [`FORMAT_SUFFIX`] companions. One
/// layout for every block format; [`Q8_SUFFIX`] and [`GGML_SUFFIX`] (1.2
/// and older) stay readable. [`crate::Checkpoint`] loads it still packed.
pub const BLOCKS_SUFFIX: &str = ".weight_blocks";
/// The format companion of a [`BLOCKS_SUFFIX`] weight: I64 [1], the
/// waste-kernels format id (`q3` 1, `q4` 3, `q8` 4, ggml type t 256 + t).
pub const FORMAT_SUFFIX: &str = ".weight_format";

/// The bytes of a [`FORMAT_SUFFIX`] tensor: I64 [1], little-endian.
pub fn format_id_bytes(format: waste_kernels::Format) -> Vec<u8> {
    i64::from(format.id()).to_le_bytes().to_vec()
}

/// The bytes of a [`GGML_TYPE_SUFFIX`] tensor: I64 [1], little-endian.
pub fn ggml_type_bytes(ty: waste_kernels::ggml::GgmlType) -> Vec<u8> {
    i64::from(ty.0).to_le_bytes().to_vec()
}

/// The bytes of a [`SHAPE_SUFFIX`] tensor: I64 [2] = [rows, cols], little-endian.
pub fn shape_bytes(rows: usize, cols: usize) -> Vec<u8> {
    [rows as i64, cols as i64]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// One tensor of a shard: its name, safetensors dtype (`BF16`, `F32`,
/// `F8_E4M3`, `U8`, ...), shape and byte length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: usize,
}

/// Streams one safetensors file: tensors must be written in spec order.
#[derive(Debug)]
pub struct SafetensorsWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: std::io::BufWriter<fs_err::File>,
    specs: Vec<TensorSpec>,
    next: usize,
}

impl SafetensorsWriter {
    pub fn create(
        path: &Path,
        specs: Vec<TensorSpec>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Self> {
        let mut header = serde_json::Map::new();
        if !metadata.is_empty() {
            header.insert("__metadata__".into(), json!(metadata));
        }
        let mut offset = 0usize;
        for s in &specs {
            header.insert(
                s.name.clone(),
                json!({"dtype": s.dtype, "shape": s.shape, "data_offsets": [offset, offset + s.bytes]}),
            );
            offset += s.bytes;
        }
        let mut text = Value::Object(header).to_string().into_bytes();
        // Pad the header with spaces to 8 bytes, as the safetensors library does.
        text.resize(text.len().next_multiple_of(8), b' ');
        let tmp = tmp_path(path);
        let file = fs_err::File::create(&tmp).map_err(io(&tmp))?;
        let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
        out.write_all(&(text.len() as u64).to_le_bytes())
            .map_err(io(&tmp))?;
        out.write_all(&text).map_err(io(&tmp))?;
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
            out,
            specs,
            next: 0,
        })
    }

    /// Writes the next tensor's bytes.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.write_pieces(name, std::iter::once(bytes))
    }

    /// Writes the next tensor's bytes as consecutive pieces, so a tensor
    /// larger than RAM allows (a real vocabulary's embeddings) can be
    /// produced and written a piece at a time.
    pub fn write_pieces<P: AsRef<[u8]>>(
        &mut self,
        name: &str,
        pieces: impl IntoIterator<Item = P>,
    ) -> Result<()> {
        let spec = self
            .specs
            .get(self.next)
            .ok_or_else(|| Error::Inconsistent {
                path: self.tmp.clone(),
                reason: format!("tensor {name} written after the last declared tensor"),
            })?;
        if spec.name != name {
            return Err(Error::Inconsistent {
                path: self.tmp.clone(),
                reason: format!("expected tensor {} next, got {name}", spec.name),
            });
        }
        let expected = spec.bytes;
        let mut written = 0usize;
        for piece in pieces {
            let piece = piece.as_ref();
            written += piece.len();
            if written > expected {
                break;
            }
            self.out.write_all(piece).map_err(io(&self.tmp))?;
        }
        if written != expected {
            return Err(Error::Inconsistent {
                path: self.tmp.clone(),
                reason: format!("tensor {name} is {expected} bytes, got {written} or more"),
            });
        }
        self.next += 1;
        Ok(())
    }

    /// Syncs and moves the file into place.
    pub fn finish(self) -> Result<()> {
        if self.next != self.specs.len() {
            return Err(Error::Inconsistent {
                path: self.tmp,
                reason: format!("{} of {} tensors written", self.next, self.specs.len()),
            });
        }
        commit(self.out, &self.tmp, &self.path)
    }
}

/// Writes `dir/model.safetensors.index.json` mapping each tensor to its shard.
pub fn write_index(
    dir: &Path,
    weight_map: &BTreeMap<String, String>,
    total_bytes: u64,
) -> Result<()> {
    let json = json!({"metadata": {"total_size": total_bytes}, "weight_map": weight_map});
    let path = dir.join(BACKBONE_INDEX);
    let bytes = serde_json::to_vec_pretty(&json).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    write_atomic(&path, &bytes)
}

/// Size and checksum of one shard file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardSum {
    pub bytes: u64,
    /// xxh3-64 of the whole file, 16 lowercase hex digits.
    pub xxh3: String,
}

/// `backbone/waste-backbone.json`: what ties a backbone to its experts and
/// lets a reader check its shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackboneMeta {
    pub format_version: Version,
    /// Lowercase hex sha256 of the bytes of the `experts/index.json`
    /// converted with this backbone: the store's identity.
    pub experts_index_sha256: String,
    /// Every shard file of the folder by name.
    pub shards: BTreeMap<String, ShardSum>,
}

impl BackboneMeta {
    /// Hashes the shard files `shards` of `dir`.
    pub fn compute<'a>(
        dir: &Path,
        shards: impl IntoIterator<Item = &'a str>,
        experts_index_sha256: &str,
    ) -> Result<Self> {
        let shards = shards
            .into_iter()
            .map(|name| {
                let (bytes, sum) = shard_checksum(&dir.join(name))?;
                Ok((
                    name.to_string(),
                    ShardSum {
                        bytes,
                        xxh3: format!("{sum:016x}"),
                    },
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            format_version: crate::FORMAT_VERSION,
            experts_index_sha256: experts_index_sha256.to_string(),
            shards,
        })
    }

    /// Writes `dir/waste-backbone.json` atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(BACKBONE_META);
        let json = serde_json::to_vec_pretty(self).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        write_atomic(&path, &json)
    }

    /// Reads `dir/waste-backbone.json`; None for a backbone written before it existed.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(BACKBONE_META);
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = fs_err::read(&path).map_err(io(&path))?;
        let meta: Self = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        meta.format_version.check_readable(&path)?;
        Ok(Some(meta))
    }

    /// Re-hashes every recorded shard and errors naming the first that
    /// differs; the recorded shards must be exactly the ones the backbone's
    /// index maps tensors to, so a shard left out of the record is not
    /// loaded unchecked.
    pub fn verify(&self, dir: &Path) -> Result<()> {
        // A single-file backbone has no index: then the record is the list.
        let indexed = if dir.join(BACKBONE_INDEX).is_file() {
            shard_files(dir)?
        } else {
            self.shards.keys().cloned().collect()
        };
        if !indexed.iter().eq(self.shards.keys()) {
            return Err(Error::Inconsistent {
                path: dir.join(BACKBONE_META),
                reason: format!(
                    "records checksums of the shards {:?}, but the backbone's index maps tensors to {indexed:?}",
                    self.shards.keys().collect::<Vec<_>>()
                ),
            });
        }
        for (name, want) in &self.shards {
            let path = dir.join(name);
            if name.contains('/') || name.contains("..") {
                return Err(Error::Inconsistent {
                    path,
                    reason: "shard names must be plain names".into(),
                });
            }
            let (bytes, sum) = shard_checksum(&path)?;
            let found = format!("{sum:016x}");
            if found != want.xxh3 || bytes != want.bytes {
                return Err(Error::ShardChecksum {
                    path,
                    expected: format!("{} ({} bytes)", want.xxh3, want.bytes),
                    found: format!("{found} ({bytes} bytes)"),
                });
            }
        }
        Ok(())
    }
}

/// What every reader of a `backbone/` checks before loading it: its
/// completion marker (an unfinished conversion is an error; a backbone
/// written before markers existed passes as [`Completeness::Unmarked`], for
/// the caller to warn about) and, when `verify`, every shard against the
/// checksum recorded at conversion. Returns the recorded metadata, None for
/// a backbone written before store format 1.1.
///
/// [`Completeness::Unmarked`]: crate::completion::Completeness::Unmarked
pub fn check(
    dir: &Path,
    verify: bool,
) -> Result<(crate::completion::Completeness, Option<BackboneMeta>)> {
    let done = crate::completion::check_backbone(dir)?;
    let meta = BackboneMeta::load(dir)?;
    if verify && let Some(m) = &meta {
        m.verify(dir)?;
    }
    Ok((done, meta))
}

/// The shard files `dir/model.safetensors.index.json` maps tensors to, sorted.
pub fn shard_files(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join(BACKBONE_INDEX);
    let bytes = fs_err::read(&path).map_err(io(&path))?;
    let index: Value = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    let mut files: Vec<String> = index["weight_map"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values().filter_map(|v| v.as_str().map(str::to_string)))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Length and xxh3-64 of a file, read in 8 MiB pieces.
pub fn shard_checksum(path: &Path) -> Result<(u64, u64)> {
    use std::hash::Hasher;
    use std::io::Read;
    let mut f = fs_err::File::open(path).map_err(io(path))?;
    let mut h = crate::checksum::Running::new();
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.write(&buf[..n]);
        total += n as u64;
    }
    Ok((total, h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_checksums_catch_a_flipped_byte_and_name_the_shard() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs_err::write(
            dir.join("model-00001-of-00001.safetensors"),
            vec![7u8; 100_000],
        )
        .unwrap();
        let meta = BackboneMeta::compute(dir, ["model-00001-of-00001.safetensors"], "ab").unwrap();
        meta.save(dir).unwrap();
        let loaded = BackboneMeta::load(dir).unwrap().unwrap();
        assert_eq!(loaded, meta);
        loaded.verify(dir).unwrap();
        let mut bytes = fs_err::read(dir.join("model-00001-of-00001.safetensors")).unwrap();
        bytes[54_321] ^= 1;
        fs_err::write(dir.join("model-00001-of-00001.safetensors"), bytes).unwrap();
        let e = loaded.verify(dir).unwrap_err();
        assert!(matches!(e, Error::ShardChecksum { .. }), "{e}");
        assert!(
            e.to_string().contains("model-00001-of-00001.safetensors"),
            "{e}"
        );
        assert!(BackboneMeta::load(&dir.join("none")).unwrap().is_none());
    }
}
