//! The 4 KiB header page at the start of every layer file. It repeats what
//! the index says of the layer, so a file can be checked (and identified)
//! on its own. All fields little endian.
//!
//! ```text
//! offset size field
//!      0    8 magic "WASTEEXP"
//!      8    2 format major     10    2 format minor
//!     12    4 layer            16    4 n_experts
//!     20    2 record format id (waste-kernels)      22    2 reserved (0)
//!     24    4 d_model          28    4 d_ff
//!     32    8 record_len       40    8 stride (record_len rounded up to 4096)
//!     48    8 data_offset (4096)
//!     56    8 xxh3-64 of bytes 0..56
//!     64 4032 zero
//! ```

use std::path::Path;

use crate::checksum::checksum;
use crate::error::{Error, Result};
use crate::{ALIGNMENT, FORMAT_VERSION, Version, align_up};

pub const MAGIC: &[u8; 8] = b"WASTEEXP";
/// Bytes of the header page; records start here.
pub const HEADER_LEN: usize = ALIGNMENT;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerHeader {
    pub version: Version,
    pub layer: u32,
    pub n_experts: u32,
    pub format_id: u16,
    pub d_model: u32,
    pub d_ff: u32,
    pub record_len: u64,
    pub stride: u64,
    pub data_offset: u64,
}

impl LayerHeader {
    pub fn new(
        layer: u32,
        n_experts: u32,
        format_id: u16,
        d_model: u32,
        d_ff: u32,
        record_len: u64,
    ) -> Self {
        Self {
            version: FORMAT_VERSION,
            layer,
            n_experts,
            format_id,
            d_model,
            d_ff,
            record_len,
            stride: align_up(record_len),
            data_offset: HEADER_LEN as u64,
        }
    }

    /// Bytes the whole file occupies.
    pub fn file_len(&self) -> u64 {
        self.data_offset
            .saturating_add(u64::from(self.n_experts).saturating_mul(self.stride))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&self.version.major.to_le_bytes());
        b[10..12].copy_from_slice(&self.version.minor.to_le_bytes());
        b[12..16].copy_from_slice(&self.layer.to_le_bytes());
        b[16..20].copy_from_slice(&self.n_experts.to_le_bytes());
        b[20..22].copy_from_slice(&self.format_id.to_le_bytes());
        b[24..28].copy_from_slice(&self.d_model.to_le_bytes());
        b[28..32].copy_from_slice(&self.d_ff.to_le_bytes());
        b[32..40].copy_from_slice(&self.record_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.stride.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset.to_le_bytes());
        let sum = checksum(&b[0..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and checks a header page read from `path`.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        let bad = |reason: String| Error::BadHeader {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() < 64 {
            return Err(bad(format!("{} bytes, the header needs 64", bytes.len())));
        }
        if &bytes[0..8] != MAGIC {
            return Err(bad("not a waste layer file (magic)".into()));
        }
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let version = Version {
            major: u16_at(8),
            minor: u16_at(10),
        };
        version.check_readable(path)?;
        if u64_at(56) != checksum(&bytes[0..56]) {
            return Err(bad("header checksum mismatch (corrupted header)".into()));
        }
        let h = Self {
            version,
            layer: u32_at(12),
            n_experts: u32_at(16),
            format_id: u16_at(20),
            d_model: u32_at(24),
            d_ff: u32_at(28),
            record_len: u64_at(32),
            stride: u64_at(40),
            data_offset: u64_at(48),
        };
        let aligned = |v: u64| v.is_multiple_of(ALIGNMENT as u64);
        if h.record_len == 0
            || h.stride < h.record_len
            || !aligned(h.stride)
            || !aligned(h.data_offset)
        {
            return Err(bad(format!(
                "record_len {} / stride {} / data_offset {} are not a 4 KiB-aligned layout",
                h.record_len, h.stride, h.data_offset
            )));
        }
        if u64::from(h.n_experts)
            .checked_mul(h.stride)
            .and_then(|b| b.checked_add(h.data_offset))
            .is_none()
        {
            return Err(bad(format!(
                "{} experts of stride {} overflow a file offset",
                h.n_experts, h.stride
            )));
        }
        if h.data_offset < HEADER_LEN as u64 {
            return Err(bad(format!(
                "data_offset {} overlaps the header",
                h.data_offset
            )));
        }
        Ok(h)
    }
}
