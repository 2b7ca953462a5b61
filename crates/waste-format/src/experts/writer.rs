//! Writes one layer file: the header page, then each expert's record padded
//! to the stride, in expert order. The file is built under a temporary name
//! and renamed into place only when complete and synced, so a finished layer
//! file is always whole (the converter's resume relies on this).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::header::LayerHeader;
use super::index::LayerEntry;
use super::layer_file_name;
use crate::checksum::checksum;
use crate::error::{Error, Result, io};
use crate::manifest::{commit, tmp_path};

#[derive(Debug)]
pub struct LayerWriter {
    header: LayerHeader,
    path: PathBuf,
    tmp: PathBuf,
    out: std::io::BufWriter<fs_err::File>,
    checksums: Vec<u64>,
    padding: Vec<u8>,
}

impl LayerWriter {
    /// Starts `dir/layer-LLL.experts` for `header.n_experts` records of `header.record_len` bytes.
    pub fn create(dir: &Path, header: LayerHeader) -> Result<Self> {
        let path = dir.join(layer_file_name(header.layer));
        let tmp = tmp_path(&path);
        let file = fs_err::File::create(&tmp).map_err(io(&tmp))?;
        let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
        out.write_all(&header.encode()).map_err(io(&tmp))?;
        let padding = vec![0u8; (header.stride - header.record_len) as usize];
        Ok(Self {
            header,
            path,
            tmp,
            out,
            checksums: Vec::new(),
            padding,
        })
    }

    /// Appends the record of the next expert.
    pub fn push(&mut self, record: &[u8]) -> Result<()> {
        let h = &self.header;
        if record.len() as u64 != h.record_len || self.checksums.len() >= h.n_experts as usize {
            return Err(Error::Inconsistent {
                path: self.tmp.clone(),
                reason: format!(
                    "layer {} expert {}: record of {} bytes, the layer's records are {} bytes and it has {} experts",
                    h.layer,
                    self.checksums.len(),
                    record.len(),
                    h.record_len,
                    h.n_experts
                ),
            });
        }
        self.checksums.push(checksum(record));
        self.out.write_all(record).map_err(io(&self.tmp))?;
        self.out.write_all(&self.padding).map_err(io(&self.tmp))
    }

    /// Syncs and renames the file into place; returns its index entry.
    pub fn finish(self) -> Result<LayerEntry> {
        let h = self.header;
        if self.checksums.len() != h.n_experts as usize {
            return Err(Error::Inconsistent {
                path: self.tmp,
                reason: format!(
                    "layer {}: {} of {} records written",
                    h.layer,
                    self.checksums.len(),
                    h.n_experts
                ),
            });
        }
        commit(self.out, &self.tmp, &self.path)?;
        Ok(LayerEntry {
            layer: h.layer,
            file: layer_file_name(h.layer),
            n_experts: h.n_experts,
            d_model: h.d_model,
            d_ff: h.d_ff,
            record_len: h.record_len,
            stride: h.stride,
            data_offset: h.data_offset,
            checksums: self.checksums,
        })
    }
}
