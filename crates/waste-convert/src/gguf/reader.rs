//! A bounds-checked little-endian cursor over untrusted GGUF bytes. Every
//! read either returns data inside the slice or an [`Error::Gguf`] naming
//! the file and the byte offset; nothing here can panic or over-allocate
//! (lengths are checked against the bytes that remain before any copy).

use std::path::Path;

use crate::error::{Error, Result};

#[derive(Debug)]
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Self {
            bytes,
            pos: 0,
            path,
        }
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// An error at the current offset.
    pub(super) fn err(&self, reason: impl Into<String>) -> Error {
        Error::Gguf {
            path: self.path.to_path_buf(),
            offset: self.pos as u64,
            reason: reason.into(),
        }
    }

    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "{what}: needs {n} bytes, only {} left (truncated file?)",
                self.remaining()
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(super) fn u16(&mut self, what: &str) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    pub(super) fn f32(&mut self, what: &str) -> Result<f32> {
        self.array(what).map(f32::from_le_bytes)
    }

    pub(super) fn f64(&mut self, what: &str) -> Result<f64> {
        self.array(what).map(f64::from_le_bytes)
    }

    /// A count that must be payable: `count * min_item_bytes` may not exceed
    /// what is left, which caps every allocation by the file's size.
    pub(super) fn count(&mut self, what: &str, min_item_bytes: usize) -> Result<usize> {
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_item_bytes.max(1)))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(self.err(format!(
                "{what} = {n} cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(n as usize)
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator).
    pub(super) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.count(what, 1)?;
        let start = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::Gguf {
            path: self.path.to_path_buf(),
            offset: start as u64,
            reason: format!("{what} is not UTF-8: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded() {
        let path = Path::new("x.gguf");
        let mut bytes = 5u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"hello");
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut c = Cursor::new(&bytes, path);
        assert_eq!(c.string("s").unwrap(), "hello");
        let err = c.string("s").unwrap_err().to_string();
        assert!(
            err.contains("x.gguf") && err.contains("cannot fit"),
            "{err}"
        );
        let mut c = Cursor::new(&[1, 2, 3], path);
        assert!(c.u32("v").is_err());
        assert_eq!(c.u16("v").unwrap(), 0x0201);
        assert!(c.u16("v").is_err());
        assert_eq!(c.u8("v").unwrap(), 3);
    }
}
