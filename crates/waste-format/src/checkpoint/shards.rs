//! One safetensors file, memory-mapped read-only, with its parsed header.
//! Owns the mmap and the byte ranges of raw (stored) tensors; knows nothing of
//! quantization or of which shard holds what (see `locate` and `layout`).

use std::fmt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};

use crate::checkpoint::error::{Error, Result};

/// Size of the little-endian u64 header length that starts every file.
const HEADER_LEN_BYTES: usize = 8;

/// A stored tensor as the file holds it: dtype, shape and raw bytes,
/// borrowed from the memory map.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    /// The stored name (`...weight_scale_inv`, not the logical one).
    pub name: &'a str,
    pub dtype: Dtype,
    pub shape: &'a [usize],
    /// Little-endian bytes, exactly `numel * dtype size` long.
    pub data: &'a [u8],
    /// The shard file it lives in.
    pub path: &'a Path,
}

/// A mapped shard. The header is validated on open by safetensors: offsets
/// tile the data section exactly, sizes match shape x dtype, no overflow.
pub(crate) struct Shard {
    path: PathBuf,
    map: Mmap,
    /// Offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("path", &self.path)
            .field("bytes", &self.map.len())
            .field("tensors", &self.meta.tensors().len())
            .finish()
    }
}

impl Shard {
    /// Maps `path` and parses its header (zero copy: no tensor data is read).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file = fs_err::File::open(path).map_err(|e| Error::io(path, e))?;
        #[allow(unsafe_code)]
        // SAFETY: the map is read-only and we never write the file. Mapping is
        // unsafe only because another process could truncate or rewrite the
        // file while it is mapped; checkpoints are immutable release files
        // (in the HF cache, content-addressed blobs) that this program never
        // modifies, the same assumption safetensors and candle make.
        let map = unsafe { Mmap::map(file.file()) }.map_err(|source| Error::Mmap {
            path: path.to_path_buf(),
            source,
        })?;
        let (header_len, meta) =
            SafeTensors::read_metadata(&map).map_err(|source| Error::Header {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            data_start: HEADER_LEN_BYTES + header_len,
            map,
            meta,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored tensor names, in no particular order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.meta.tensors().into_keys().collect()
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.meta.info(name).is_some()
    }

    pub(crate) fn dtype(&self, name: &str) -> Option<Dtype> {
        self.meta.info(name).map(|info| info.dtype)
    }

    /// The stored tensor `name`, or `None` if this file does not hold it.
    pub(crate) fn raw<'a>(&'a self, name: &'a str) -> Option<Result<RawTensor<'a>>> {
        let info = self.meta.info(name)?;
        let (start, end) = info.data_offsets;
        // Validated by read_metadata; checked again so that no header can
        // make us index outside the map.
        let data = self
            .data_start
            .checked_add(start)
            .zip(self.data_start.checked_add(end))
            .and_then(|(s, e)| self.map.get(s..e));
        Some(match data {
            Some(data) => Ok(RawTensor {
                name,
                dtype: info.dtype,
                shape: &info.shape,
                data,
                path: &self.path,
            }),
            None => Err(Error::BadTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
                reason: format!("data offsets {start}..{end} lie outside the file"),
            }),
        })
    }
}
