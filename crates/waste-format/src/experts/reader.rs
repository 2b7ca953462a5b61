//! Opens an `experts/` folder: the index, and every layer file checked
//! against it (header fields, length). Locates records for the IO engine and
//! reads them with plain positioned reads, verifying checksums, for callers
//! that do not need the engine (inspection, tests, the converter's resume).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::header::{HEADER_LEN, LayerHeader};
use super::index::{ExpertsIndex, LayerEntry};
use crate::checksum::checksum;
use crate::error::{Error, Result, io};

/// Where one record lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLocation {
    pub layer: u32,
    pub expert: u32,
    pub path: Arc<Path>,
    pub offset: u64,
    pub len: usize,
    pub checksum: u64,
}

impl RecordLocation {
    /// Errors with the layer, expert and file unless `bytes` is this record.
    pub fn verify(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.len {
            return Err(Error::ShortRead {
                path: self.path.to_path_buf(),
                layer: self.layer,
                expert: self.expert,
                offset: self.offset,
                expected: self.len,
                got: bytes.len(),
            });
        }
        let found = checksum(bytes);
        if found != self.checksum {
            return Err(Error::ChecksumMismatch {
                path: self.path.to_path_buf(),
                layer: self.layer,
                expert: self.expert,
                offset: self.offset,
                expected: self.checksum,
                found,
            });
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Layer {
    entry: LayerEntry,
    path: Arc<Path>,
    file: fs_err::File,
}

/// A checked `experts/` folder.
#[derive(Debug)]
pub struct ExpertsDir {
    dir: PathBuf,
    index: ExpertsIndex,
    layers: HashMap<u32, Layer>,
}

impl ExpertsDir {
    pub fn open(dir: &Path) -> Result<Self> {
        let index = ExpertsIndex::load(dir)?;
        let mut layers = HashMap::new();
        for entry in &index.layers {
            let path: PathBuf = dir.join(&entry.file);
            if entry.file.contains('/') || entry.file.contains("..") {
                return Err(Error::Inconsistent {
                    path,
                    reason: "layer file names must be plain names".into(),
                });
            }
            let file = fs_err::File::open(&path).map_err(io(&path))?;
            let mut page = vec![0u8; HEADER_LEN];
            file.file().read_exact_at(&mut page, 0).map_err(io(&path))?;
            let h = LayerHeader::decode(&page, &path)?;
            let expect = (
                entry.layer,
                entry.n_experts,
                entry.d_model,
                entry.d_ff,
                entry.record_len,
                entry.stride,
                entry.data_offset,
            );
            let found = (
                h.layer,
                h.n_experts,
                h.d_model,
                h.d_ff,
                h.record_len,
                h.stride,
                h.data_offset,
            );
            if expect != found || h.format_id != index.expert_format_id {
                return Err(Error::Inconsistent {
                    path,
                    reason: format!(
                        "header (layer, experts, d_model, d_ff, record_len, stride, offset) = {found:?}, format {} but the index says {expect:?}, format {}",
                        h.format_id, index.expert_format_id
                    ),
                });
            }
            let len = file.metadata().map_err(io(&path))?.len();
            if len < h.file_len() {
                return Err(Error::Inconsistent {
                    path,
                    reason: format!(
                        "{len} bytes, {} experts at stride {} need {} (truncated file)",
                        h.n_experts,
                        h.stride,
                        h.file_len()
                    ),
                });
            }
            layers.insert(
                entry.layer,
                Layer {
                    entry: entry.clone(),
                    path: Arc::from(path.as_path()),
                    file,
                },
            );
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            index,
            layers,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn index(&self) -> &ExpertsIndex {
        &self.index
    }

    /// Where expert `expert` of `layer` lies.
    pub fn locate(&self, layer: u32, expert: u32) -> Result<RecordLocation> {
        let l = self
            .layers
            .get(&layer)
            .ok_or(Error::LayerNotFound { layer })?;
        let e = &l.entry;
        if expert >= e.n_experts {
            return Err(Error::ExpertOutOfRange {
                layer,
                expert,
                n_experts: e.n_experts,
            });
        }
        Ok(RecordLocation {
            layer,
            expert,
            path: Arc::clone(&l.path),
            offset: e.data_offset + u64::from(expert) * e.stride,
            len: e.record_len as usize,
            checksum: e.checksums[expert as usize],
        })
    }

    /// Reads one record into `buf` (resized) with a positioned read, and verifies it.
    pub fn read_record(
        &self,
        layer: u32,
        expert: u32,
        buf: &mut Vec<u8>,
    ) -> Result<RecordLocation> {
        let loc = self.locate(layer, expert)?;
        let l = &self.layers[&layer];
        buf.resize(loc.len, 0);
        l.file
            .file()
            .read_exact_at(buf, loc.offset)
            .map_err(io(loc.path.to_path_buf()))?;
        loc.verify(buf)?;
        Ok(loc)
    }

    /// Reads and verifies every record; `progress(done, total)` after each.
    pub fn verify_all(&self, mut progress: impl FnMut(u64, u64)) -> Result<()> {
        let total: u64 = self
            .index
            .layers
            .iter()
            .map(|l| u64::from(l.n_experts))
            .sum();
        let mut done = 0;
        let mut buf = Vec::new();
        for l in &self.index.layers {
            for e in 0..l.n_experts {
                self.read_record(l.layer, e, &mut buf)?;
                done += 1;
                progress(done, total);
            }
        }
        Ok(())
    }
}
