//! The on-disk layout of a waste store, and its readers and writers.
//!
//! ```text
//! STORE/
//!   manifest.json          format version, source identity, quantization,
//!                          sha256 of both indexes; written last, atomically
//!   backbone/              everything that stays in RAM, as a Hugging Face
//!                          folder: config.json, tokenizer files, sharded
//!                          safetensors + model.safetensors.index.json,
//!                          waste-backbone.json (experts identity, shard
//!                          checksums), waste-complete.json (written last)
//!   experts/
//!     index.json           format, shapes, and per record its checksum
//!     layer-LLL.experts    one file per MoE layer: a 4 KiB header page, then
//!                          one record per expert at a fixed 4 KiB-aligned
//!                          stride, so one aligned read fetches an expert
//!     waste-complete.json  written last: the folder is whole
//! ```
//!
//! [`Checkpoint`] reads Hugging Face safetensors folders (the converter's
//! sources, and `backbone/`), memory-mapped, decoding release formats (fp8
//! blocks, int4 and MXFP4 packs) exactly.
//!
//! Each of `backbone/` and `experts/` is complete on its own, so the two can
//! live on different machines. Records are opaque here: waste-kernels owns
//! their contents (format ids and layouts). Full specification:
//! `docs/FORMAT.md`. This crate does no async work.

pub mod backbone;
pub mod checkpoint;
pub mod checksum;
pub mod completion;
pub mod decode;
pub mod error;
pub mod experts;
pub mod io;
pub mod manifest;

pub use checkpoint::{Checkpoint, RawTensor, RowsOnDemand, Storage, TensorInfo};
pub use error::{Error, Result};
pub use experts::{ExpertsDir, ExpertsIndex, LayerEntry, LayerWriter, RecordLocation};
pub use manifest::{Manifest, Version};

/// Alignment of expert records and of the data in layer files (O_DIRECT).
pub const ALIGNMENT: usize = 4096;

/// The store format this build reads and writes. 1.2 may hold a GGUF's
/// ggml blocks (expert format ids 256 + ggml type, `<p>.weight_ggml`
/// backbone weights), which a 1.1 reader must refuse up front rather than
/// fail on deep inside a load. 1.3 stores backbone matrices of any block
/// format as `<p>.weight_blocks` + `<p>.weight_format` (`q4` and `q3`
/// among them), which a 1.2 reader does not know. 1.4 may hold expert
/// records of minor 1 (Q4_0/IQ4_NL rows interleaved by sixteen), which a
/// 1.3 reader would refuse record by record, mid-run; 1.5 records of
/// minor 2 (Q4_K and IQ4_XS rows word-major by sixteen), the same for a 1.4 reader;
/// 1.6 MXFP4 rows interleaved by sixteen (minor 1), the same for a 1.5 reader.
pub const FORMAT_VERSION: Version = Version { major: 1, minor: 6 };

/// Rounds `n` up to a multiple of [`ALIGNMENT`].
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(ALIGNMENT as u64) * ALIGNMENT as u64
}
