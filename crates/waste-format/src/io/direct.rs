//! Files opened for direct IO (`O_DIRECT`: reads go from the device into our
//! aligned buffers, bypassing and not polluting the page cache), and the
//! positioned read of one record into a pooled buffer. A file system that
//! refuses `O_DIRECT` (tmpfs) is opened buffered when the caller allows it,
//! and says so through [`DirectFile::is_direct`].

use std::os::unix::fs::FileExt;

use fs_err::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use super::buffer::PooledBuf;
use crate::error::{Error, Result, io};
use crate::{ALIGNMENT, align_up};

/// Whether files are opened with `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectMode {
    /// `O_DIRECT`, or an error where the file system refuses it.
    Require,
    /// `O_DIRECT` where the file system supports it, buffered elsewhere.
    #[default]
    Prefer,
    /// Buffered reads through the page cache.
    Off,
}

/// A read-only file for record reads.
#[derive(Debug)]
pub struct DirectFile {
    file: fs_err::File,
    path: Arc<Path>,
    direct: bool,
}

impl DirectFile {
    pub fn open(path: &Path, mode: DirectMode) -> Result<Self> {
        let open = |flags: i32| {
            fs_err::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match mode {
            DirectMode::Off => (open(0).map_err(io(path))?, false),
            DirectMode::Require => (open(libc::O_DIRECT).map_err(io(path))?, true),
            DirectMode::Prefer => match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    (open(0).map_err(io(path))?, false)
                }
                Err(e) => return Err(io(path)(e)),
            },
        };
        Ok(Self {
            file,
            path: Arc::from(path),
            direct,
        })
    }

    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    /// True when reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Reads `len` bytes at `offset` (a multiple of [`ALIGNMENT`]) into
    /// `buf`, whose capacity must hold `len` rounded up to the alignment:
    /// O_DIRECT transfers whole aligned blocks, and a layer file's stride
    /// padding guarantees those bytes exist. Short reads are retried; end of
    /// file before `len` is an error.
    pub fn read_into(&self, offset: u64, len: usize, buf: &mut PooledBuf) -> Result<()> {
        let want = align_up(len as u64) as usize;
        let b = buf.buf_mut();
        if !offset.is_multiple_of(ALIGNMENT as u64) || b.capacity() < want {
            return Err(Error::Inconsistent {
                path: self.path.to_path_buf(),
                reason: format!(
                    "read of {len} bytes at {offset} into a {}-byte buffer is not {ALIGNMENT}-aligned",
                    b.capacity()
                ),
            });
        }
        let done = self.read_at_slice(offset, &mut b.spare_mut()[..want], len)?;
        b.set_len(done.min(len));
        Ok(())
    }

    /// Reads into `dst` (aligned start and length for direct IO) at
    /// `offset` until `need` bytes are in, retrying short reads; returns the
    /// bytes read, fewer than `need` only at the end of the file.
    pub fn read_at_slice(&self, offset: u64, dst: &mut [u8], need: usize) -> Result<usize> {
        let need = need.min(dst.len());
        let mut done = 0;
        while done < need {
            match self
                .file
                .file()
                .read_at(&mut dst[done..], offset + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(self.path.to_path_buf())(e)),
            }
            // A direct read returns whole blocks except at the end of the
            // file, where it cannot resume mid-block: stop; the caller's
            // length check reports the short record.
            if self.direct && !done.is_multiple_of(ALIGNMENT) {
                break;
            }
        }
        Ok(done)
    }
}
