//! A matrix of a checkpoint read one row at a time, with positional reads
//! of its shard at the tensor's offset, through a bounded cache of recent
//! rows: how a node holds a store's token embeddings (K3: 163840 x 7168,
//! 2.35 GB in bf16) without loading the table. Owns the row reads and the
//! cache; the catalogue and the per-tensor checks are the checkpoint's.
//!
//! Rows are cached as stored (bf16 stays 2 bytes a value, q8 and ggml rows
//! stay blocks) and widened on each use exactly as a resident matrix of the
//! same rows widens them, so a model reads the same f32 values either way.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

use half::{bf16, f16};
use waste_kernels::ggml::GgmlType;
use waste_kernels::{Format, Matrix, RowSource, TensorSource, TensorSourceError};

use super::Checkpoint;
use super::plan::Plan;
use crate::checkpoint::error::{Error, Result};

/// Rows a node keeps of its token embeddings: a few thousand of the most
/// recently used (a prompt's distinct tokens and what it generates), 4096 x
/// 14 KiB = 56 MiB for K3's bf16 rows.
pub const EMBEDDING_CACHE_ROWS: usize = 4096;

/// How one stored row widens to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowEncoding {
    F32,
    Bf16,
    /// Widened to f32 as [`Checkpoint::load`] widens an F16 tensor.
    F16,
    /// waste's q8 blocks.
    Q8,
    /// A GGUF's ggml blocks, whole blocks per row.
    Ggml(GgmlType),
    /// Another block format a backbone holds (`q4`, `q3`), rows on their own.
    Blocks(Format),
}

impl RowEncoding {
    /// Bytes of one row of `cols` values.
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            Self::F32 => 4 * cols,
            Self::Bf16 | Self::F16 => 2 * cols,
            Self::Q8 => Format::Q8.row_bytes(cols),
            Self::Ggml(t) => Format::Ggml(t).row_bytes(cols),
            Self::Blocks(f) => f.row_bytes(cols),
        }
    }

    /// `bytes` (one stored row) widened into `out`, exactly as a resident
    /// matrix of that row widens it (`Matrix::row_f32_into`).
    fn widen(self, bytes: &[u8], out: &mut [f32]) -> std::result::Result<(), waste_kernels::Error> {
        let cols = out.len();
        match self {
            Self::F32 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Self::Bf16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Self::F16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Self::Q8 => Matrix::q8(1, cols, bytes.to_vec())?.row_f32_into(0, out),
            Self::Ggml(t) => Matrix::ggml(t, 1, cols, bytes.to_vec())?.row_f32_into(0, out),
            Self::Blocks(f) => Matrix::blocks(f, 1, cols, bytes.to_vec())?.row_f32_into(0, out),
        }
        Ok(())
    }
}

/// The recently used rows, by row index, as stored.
#[derive(Debug, Default)]
struct RowCache {
    /// Row -> (last use, stored bytes).
    rows: HashMap<usize, (u64, Box<[u8]>)>,
    /// Last use -> row: the oldest is evicted first.
    by_use: BTreeMap<u64, usize>,
    clock: u64,
}

impl RowCache {
    fn get(&mut self, row: usize) -> Option<&[u8]> {
        self.clock += 1;
        let (used, bytes) = self.rows.get_mut(&row)?;
        self.by_use.remove(used);
        *used = self.clock;
        self.by_use.insert(self.clock, row);
        Some(bytes)
    }

    fn insert(&mut self, row: usize, bytes: Box<[u8]>, capacity: usize) {
        while self.rows.len() >= capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.rows.remove(&oldest);
        }
        if capacity == 0 {
            return;
        }
        self.clock += 1;
        self.by_use.insert(self.clock, row);
        self.rows.insert(row, (self.clock, bytes));
    }
}

/// A 2-D tensor of a shard read by row (see the module docs).
#[derive(Debug)]
pub struct StoredRows {
    path: PathBuf,
    tensor: String,
    file: fs_err::File,
    /// Where row 0 starts in the file.
    offset: u64,
    rows: usize,
    cols: usize,
    encoding: RowEncoding,
    capacity: usize,
    cache: Mutex<RowCache>,
}

impl StoredRows {
    pub fn encoding(&self) -> RowEncoding {
        self.encoding
    }

    /// Rows held now (at most the capacity).
    pub fn cached_rows(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.rows.len())
    }

    fn row_bytes(&self) -> usize {
        self.encoding.row_bytes(self.cols)
    }

    /// The stored bytes of row `r`, from the cache or the file.
    fn read(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let rb = self.row_bytes();
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let widen = |bytes: &[u8], out: &mut [f32]| {
            self.encoding
                .widen(bytes, out)
                .map_err(|e| Error::BadTensor {
                    path: self.path.clone(),
                    tensor: self.tensor.clone(),
                    reason: format!("row {r}: {e}"),
                })
        };
        if let Some(bytes) = cache.get(r) {
            return widen(bytes, out);
        }
        // Both fit: rows * row bytes was checked against the file at open.
        let at = self.offset + (r * rb) as u64;
        let mut bytes = vec![0u8; rb].into_boxed_slice();
        self.file
            .file()
            .read_exact_at(&mut bytes, at)
            .map_err(|source| Error::RowRead {
                path: self.path.clone(),
                tensor: self.tensor.clone(),
                row: r,
                offset: at,
                source,
            })?;
        widen(&bytes, out)?;
        cache.insert(r, bytes, self.capacity);
        Ok(())
    }
}

impl RowSource for StoredRows {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn row_f32_into(
        &self,
        r: usize,
        buf: &mut [f32],
    ) -> std::result::Result<(), TensorSourceError> {
        if r >= self.rows || buf.len() != self.cols {
            return Err(Box::new(Error::BadTensor {
                path: self.path.clone(),
                tensor: self.tensor.clone(),
                reason: format!(
                    "row {r} of {} into {} values, the rows have {}",
                    self.rows,
                    buf.len(),
                    self.cols
                ),
            }));
        }
        Ok(self.read(r, buf)?)
    }

    fn resident_bytes(&self) -> usize {
        self.capacity.min(self.rows) * self.row_bytes()
    }
}

impl Checkpoint {
    /// Logical 2-D tensor `name` read by row through a cache of at most
    /// `cache_rows` rows; `None` for a storage whose rows do not stand
    /// alone (fp8 blocks, int4 and MXFP4 packs: load those whole).
    pub fn rows(&self, name: &str, cache_rows: usize) -> Result<Option<StoredRows>> {
        let plan = self.plan(name)?;
        let (raw, encoding, rows, cols) = match plan {
            Plan::Plain(raw) => {
                let encoding = match raw.dtype {
                    safetensors::Dtype::F32 => RowEncoding::F32,
                    safetensors::Dtype::BF16 => RowEncoding::Bf16,
                    safetensors::Dtype::F16 => RowEncoding::F16,
                    _ => return Ok(None),
                };
                let &[rows, cols] = raw.shape else {
                    return Ok(None);
                };
                (raw, encoding, rows, cols)
            }
            Plan::Q8 { packed, rows, cols } => (packed, RowEncoding::Q8, rows, cols),
            Plan::Ggml {
                packed,
                ty,
                rows,
                cols,
            } => (packed, RowEncoding::Ggml(ty), rows, cols),
            Plan::Blocks {
                packed,
                format,
                rows,
                cols,
            } => {
                let encoding = match format {
                    Format::Q8 => RowEncoding::Q8,
                    Format::Ggml(ty) => RowEncoding::Ggml(ty),
                    f => RowEncoding::Blocks(f),
                };
                (packed, encoding, rows, cols)
            }
            Plan::Fp8 { .. } | Plan::Int4 { .. } | Plan::Mxfp4 { .. } => return Ok(None),
        };
        let bad = |reason: String| Error::BadTensor {
            path: raw.path.to_path_buf(),
            tensor: name.to_string(),
            reason,
        };
        let span = rows
            .checked_mul(encoding.row_bytes(cols))
            .filter(|&b| b == raw.data.len())
            .ok_or_else(|| {
                bad(format!(
                    "{rows} rows of {cols} values are not its {} bytes",
                    raw.data.len()
                ))
            })?;
        let file = fs_err::File::open(raw.path).map_err(|e| Error::io(raw.path, e))?;
        let len = file.metadata().map_err(|e| Error::io(raw.path, e))?.len();
        if raw
            .offset
            .checked_add(span as u64)
            .is_none_or(|end| end > len)
        {
            return Err(bad(format!(
                "{span} bytes at {} lie past the file's {len}",
                raw.offset
            )));
        }
        Ok(Some(StoredRows {
            path: raw.path.to_path_buf(),
            tensor: name.to_string(),
            file,
            offset: raw.offset,
            rows,
            cols,
            encoding,
            capacity: cache_rows,
            cache: Mutex::default(),
        }))
    }
}

/// A checkpoint whose matrices a model may read by row ([`TensorSource::rows`])
/// through a cache of `cache_rows` rows each; everything else loads whole.
/// The node and `waste run`/`forward` open a store's backbone this way, so
/// untied token embeddings stay on disk.
#[derive(Debug, Clone, Copy)]
pub struct RowsOnDemand<'a> {
    pub checkpoint: &'a Checkpoint,
    pub cache_rows: usize,
}

impl TensorSource for RowsOnDemand<'_> {
    fn contains(&self, name: &str) -> bool {
        self.checkpoint.contains(name)
    }

    fn load(&self, name: &str) -> std::result::Result<waste_kernels::Tensor, TensorSourceError> {
        Ok(self.checkpoint.load(name)?)
    }

    fn rows(
        &self,
        name: &str,
    ) -> Option<std::result::Result<Box<dyn RowSource>, TensorSourceError>> {
        match self.checkpoint.rows(name, self.cache_rows) {
            Ok(Some(rows)) => Some(Ok(Box::new(rows))),
            Ok(None) => None,
            Err(e) => Some(Err(Box::new(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_most_recent_rows() {
        let mut c = RowCache::default();
        for r in 0..3 {
            c.insert(r, vec![r as u8].into_boxed_slice(), 3);
        }
        assert_eq!(c.get(0), Some(&[0u8][..]));
        // Row 1 is now the oldest.
        c.insert(3, vec![3].into_boxed_slice(), 3);
        assert!(c.get(1).is_none());
        assert_eq!(c.rows.len(), 3);
        assert_eq!(c.by_use.len(), 3);
        for r in [0, 2, 3] {
            assert_eq!(c.get(r), Some(&[r as u8][..]));
        }
        c.insert(9, vec![9].into_boxed_slice(), 0);
        assert!(c.rows.is_empty() && c.by_use.is_empty());
    }
}
