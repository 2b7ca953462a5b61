//! The `experts/` folder: one file per MoE layer holding every expert of the
//! layer as a fixed-stride, 4 KiB-aligned record, and `index.json`
//! describing the files and the checksum of every record.

mod header;
mod index;
mod reader;
mod writer;

pub use header::{HEADER_LEN, LayerHeader, MAGIC};
pub use index::{ExpertActivation, ExpertsIndex, INDEX, LayerEntry};
pub use reader::{ExpertsDir, RecordLocation};
pub use writer::LayerWriter;

/// File name of a layer's records.
pub fn layer_file_name(layer: u32) -> String {
    format!("layer-{layer:03}.experts")
}
