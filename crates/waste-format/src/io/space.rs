//! Free space of a file system, so writers of large stores can refuse to
//! start rather than fail hours in with a full disk.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Bytes an unprivileged writer can still use on the file system holding `path`.
pub fn available_bytes(path: &Path) -> Result<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Inconsistent {
        path: path.to_path_buf(),
        reason: "path contains a NUL byte".into(),
    })?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable
    // memory of the struct's size; statvfs writes only within it.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    // The fields are u64 here but narrower on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    Ok(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_temp_dir_has_some_space() {
        let tmp = std::env::temp_dir();
        assert!(super::available_bytes(&tmp).unwrap() > 0);
        assert!(super::available_bytes(std::path::Path::new("/no/such/dir")).is_err());
    }
}
