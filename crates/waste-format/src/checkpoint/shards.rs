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
    /// Where `data` starts in the file, in bytes.
    pub offset: u64,
    /// The shard file it lives in.
    pub path: &'a Path,
}

/// A mapped shard. The header is validated on open by safetensors: offsets
/// tile the data section exactly, sizes match shape x dtype, no overflow.
pub(crate) struct Shard {
    path: PathBuf,
    /// Kept open to drop the page cache of released ranges.
    file: fs_err::File,
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

/// `path` opened and mapped read-only: a release file (a safetensors
/// shard, a GGUF or one part of a split one).
pub fn map_release(path: &Path) -> Result<(fs_err::File, Mmap)> {
    let file = fs_err::File::open(path).map_err(|e| Error::io(path, e))?;
    #[allow(unsafe_code)]
    // SAFETY: the map is read-only and this program never writes release
    // files. Mapping is unsafe only because another process could truncate
    // or rewrite the file while it is mapped; releases are immutable
    // downloads (in the HF cache, content-addressed blobs), the same
    // assumption safetensors, llama.cpp and candle make.
    let map = unsafe { Mmap::map(file.file()) }.map_err(|source| Error::Mmap {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((file, map))
}

impl Shard {
    /// Maps `path` and parses its header (zero copy: no tensor data is read).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let (file, map) = map_release(path)?;
        let (header_len, meta) =
            SafeTensors::read_metadata(&map).map_err(|source| Error::Header {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
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

    /// Drops this process's mapping of bytes of `raw` (a tensor of this
    /// file) once they have been copied out, so that loading a backbone
    /// does not keep the file's pages in the process's resident set beside
    /// the copy, and the page cache's clean copy too: under a memory
    /// cgroup those pages are charged to the loader, and a node's cache of
    /// experts is worth more there than a second copy of its backbone (a
    /// later read reads them from the disk again).
    /// `start..start + len` are bytes within `raw.data`.
    pub(crate) fn release(&self, raw: &RawTensor<'_>, start: usize, len: usize) {
        let Some(start) = usize::try_from(raw.offset)
            .ok()
            .and_then(|o| o.checked_add(start))
        else {
            return;
        };
        if len == 0 || start.saturating_add(len) > self.map.len() {
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: the map is a read-only private mapping of a file this
        // program never writes (see `open`): after MADV_DONTNEED a page is
        // mapped again from the same file on its next access, with the same
        // bytes, so a slice of the map still borrowed elsewhere (a tensor
        // sharing a boundary page) reads what it read before.
        let released = unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
        };
        // It fails only for locked or huge-TLB pages, which this map has
        // none of; were it to, only the resident set would be larger.
        drop(released);
        self.drop_cached(start, len);
    }

    /// Drops the page cache's clean pages of `start..start + len` of the
    /// file (all of it when `len` is 0). Advice only: were it refused, the
    /// pages stay cached and reclaimable.
    pub(crate) fn drop_cached(&self, start: usize, len: usize) {
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(start), libc::off_t::try_from(len))
        else {
            return;
        };
        use std::os::fd::AsRawFd;
        #[allow(unsafe_code)]
        // SAFETY: a plain syscall on a descriptor this shard owns; it only
        // advises the kernel and touches no memory of ours.
        let _ = unsafe {
            libc::posix_fadvise(
                self.file.file().as_raw_fd(),
                offset,
                len,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }

    /// The stored tensor `name`, or `None` if this file does not hold it.
    pub(crate) fn raw<'a>(&'a self, name: &'a str) -> Option<Result<RawTensor<'a>>> {
        let info = self.meta.info(name)?;
        let (start, end) = info.data_offsets;
        // Validated by read_metadata; checked again so that no header can
        // make us index outside the map.
        let begin = self.data_start.checked_add(start);
        let data = begin
            .zip(self.data_start.checked_add(end))
            .and_then(|(s, e)| self.map.get(s..e));
        Some(match (data, begin) {
            (Some(data), Some(begin)) => Ok(RawTensor {
                name,
                dtype: info.dtype,
                shape: &info.shape,
                data,
                offset: begin as u64,
                path: &self.path,
            }),
            _ => Err(Error::BadTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
                reason: format!("data offsets {start}..{end} lie outside the file"),
            }),
        })
    }
}
