//! The `backbone/` folder is a Hugging Face checkpoint folder without the
//! routed experts: `config.json`, tokenizer files, safetensors shards and
//! `model.safetensors.index.json` (its own index). Any safetensors reader
//! loads it; waste-convert's does, with its fp8/int4 decoding.
//!
//! This module writes shards in a streaming way: the header is written from
//! the list of tensors first, then each tensor's bytes as they are produced,
//! so converting a large backbone never holds more than one tensor.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result, io};
use crate::manifest::{sync_dir, tmp_path, write_atomic};

/// The index file of the backbone folder.
pub const BACKBONE_INDEX: &str = "model.safetensors.index.json";

/// A weight `<p>.weight` stored in waste's 8-bit group format
/// (`--backbone q8`) is `<p>` + this (U8 [rows, ceil(cols/32)·34], the
/// waste-kernels `q8` blocks of each row) plus `<p>` + [`SHAPE_SUFFIX`]
/// (I64 [2] = [rows, cols]). [`crate::Checkpoint`] loads it still packed.
pub const Q8_SUFFIX: &str = ".weight_q8";
/// The logical shape companion of a packed weight.
pub const SHAPE_SUFFIX: &str = ".weight_shape";

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
        let file = self.out.into_inner().map_err(|e| Error::Io {
            path: self.tmp.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(io(&self.tmp))?;
        drop(file);
        fs_err::rename(&self.tmp, &self.path).map_err(io(&self.path))?;
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))
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
