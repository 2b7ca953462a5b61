//! A release's backbone as `--backbone native` holds it, read straight from
//! the release: a GGUF's quantized (and F16) weight matrices stay in their
//! ggml blocks (ggml Q8_0, byte for byte waste's `q8` block, as `q8`), and
//! every other tensor decodes as the source stores it (bf16 stays bf16, the
//! rest becomes f32). The converter writes exactly these tensors into a
//! native store ([`Source::native_blocks`] decides for both), so running a
//! release from its file (`waste forward/run/chat/node --model FILE.gguf`)
//! holds and computes what the converted store would.

use waste_kernels::ggml::GgmlType;
use waste_kernels::{Format, Tensor, TensorData, TensorSource, TensorSourceError};

use super::names::is_router;
use super::source::{Info, Origin, Source};
use crate::error::{Error, Result};

impl Source {
    /// The blocks a `--backbone native` backbone keeps backbone tensor
    /// `name` in: `Some` for a GGUF's weight matrix (2-D `.weight`, not a
    /// router) whose rows are whole blocks of a ggml type waste runs, with
    /// that type; `None` where it decodes to values.
    pub fn native_blocks(&self, name: &str, info: &Info) -> Option<(Format, GgmlType)> {
        let matrix = info.shape.len() == 2 && !is_router(name) && name.ends_with(".weight");
        match (self.origin(), self.native_format(info)) {
            (Origin::Gguf(_), f @ Format::Ggml(t)) if matrix => Some((f, t)),
            _ => None,
        }
    }
}

/// [`TensorSource`] over a release that hands out the backbone as a native
/// store holds it (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct NativeBackbone<'a>(pub &'a Source);

impl NativeBackbone<'_> {
    /// Bytes backbone tensor `name` takes in RAM once loaded.
    pub fn ram_bytes(&self, name: &str) -> Result<u64> {
        let info = self.0.info(name)?;
        let values = info.shape.iter().product::<usize>() as u64;
        Ok(match self.0.native_blocks(name, &info) {
            Some((_, GgmlType::Q8_0)) => held_rows(&info, Format::Q8),
            Some((format, _)) => held_rows(&info, format),
            None => values * info.kind.ram_bytes_per_value(),
        })
    }

    fn load_native(&self, name: &str) -> Result<Tensor> {
        let info = self.0.info(name)?;
        let Some((format, ty)) = self.0.native_blocks(name, &info) else {
            return self.0.load(name);
        };
        let blocks = self.0.native_matrix(name, format)?;
        let data = if ty == GgmlType::Q8_0 {
            TensorData::Q8(blocks)
        } else {
            TensorData::Ggml(ty, blocks)
        };
        Tensor::new(info.shape, data).map_err(|e| Error::BadTensor {
            path: self.0.path().to_path_buf(),
            tensor: name.to_string(),
            reason: e.to_string(),
        })
    }
}

/// Bytes of a (rows, cols) matrix's rows in `format`.
fn held_rows(info: &Info, format: Format) -> u64 {
    match info.shape[..] {
        [rows, cols] => (rows * format.row_bytes(cols)) as u64,
        _ => 0,
    }
}

impl TensorSource for NativeBackbone<'_> {
    fn contains(&self, name: &str) -> bool {
        TensorSource::contains(self.0, name)
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, TensorSourceError> {
        Ok(self.load_native(name)?)
    }
}
