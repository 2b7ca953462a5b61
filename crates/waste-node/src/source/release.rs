//! Running straight from a release's own files (a GGUF file or a Hugging
//! Face folder), without converting it: the backbone loads from them, and
//! each expert's record is built from them when first needed, by the code
//! `waste convert --experts native` writes records with
//! (`waste_convert::convert::experts::native_record`), so the node computes
//! what it would on the converted store. Records then go through the same
//! cache and prefetch as a store's ([`super::records::RecordSource`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use waste_convert::GgufCheckpoint;
use waste_convert::convert::experts::native_record;
use waste_convert::convert::names::parse_expert;
use waste_convert::convert::source::Origin;
use waste_convert::convert::{
    BackboneMode, ExpertsMode, LayerPlan, NativeBackbone, Options, Plan, Source,
};
use waste_model::tensors::check_checkpoint;
use waste_model::{ModelConfig, Tokenizer};

use super::{Done, Priority, RecordBytes, RecordReader};
use crate::compute::Compute;
use crate::{Error, Result};

/// A release opened for a node.
#[derive(Debug)]
pub struct Opened {
    pub source: Arc<Source>,
    pub config: ModelConfig,
    /// The backbone's bytes once loaded as a native store holds it
    /// ([`NativeBackbone`]: a GGUF's quantized matrices stay blocks).
    pub backbone_bytes: u64,
    pub reader: ReleaseReader,
}

/// Opens `path`, checks its tensors against its config (the checks
/// `waste convert` makes) and plans its records, to be built on `compute`.
pub fn open(path: &Path, compute: Compute) -> Result<Opened> {
    let source = Source::open(path)?;
    let config = ModelConfig::from_json_file(source.config(), &source.config_path())?;
    let names: Vec<&str> = source.names().iter().map(String::as_str).collect();
    check_checkpoint(&config, &names, &|n| source.info(n).ok().map(|i| i.shape))?;
    let options = Options {
        experts: ExpertsMode::Native,
        backbone: BackboneMode::Native,
        ..Options::default()
    };
    let plan = Plan::new(&source, &options)?;
    let mut backbone_bytes = 0;
    for name in source.names() {
        if parse_expert(name).is_none() {
            backbone_bytes += NativeBackbone(&source).ram_bytes(name)?;
        }
    }
    let source = Arc::new(source);
    let layers = plan
        .layers
        .into_iter()
        .map(|l| (l.layer, Arc::new(l)))
        .collect();
    Ok(Opened {
        reader: ReleaseReader {
            source: Arc::clone(&source),
            layers,
            compute,
        },
        source,
        config,
        backbone_bytes,
    })
}

/// The tokenizer of a release: a folder's tokenizer files, or the one a GGUF
/// file's metadata describes; `None` when it has none (token ids still work).
pub fn tokenizer(source: &Source) -> Result<Option<Tokenizer>> {
    match source.origin() {
        Origin::Hf(ckpt) => {
            let dir = ckpt.dir();
            let has = ["tokenizer.json", "tiktoken.model"]
                .iter()
                .any(|f| dir.join(f).is_file());
            Ok(if has {
                Some(Tokenizer::from_dir(dir)?)
            } else {
                None
            })
        }
        Origin::Gguf(gguf) => Ok(Some(gguf_tokenizer(gguf)?)),
    }
}

/// The tokenizer and chat template a GGUF file's metadata describes.
pub fn gguf_tokenizer(gguf: &GgufCheckpoint) -> Result<Tokenizer> {
    let json = gguf.tokenizer_json()?.to_string();
    let config = gguf.tokenizer_config()?;
    Ok(Tokenizer::from_json_str(&json, Some(&config), gguf.path())?)
}

/// Builds records from a release's expert tensors on demand.
#[derive(Debug)]
pub struct ReleaseReader {
    source: Arc<Source>,
    layers: HashMap<u32, Arc<LayerPlan>>,
    /// The forward pass's pool: decoding a record is compute like the rest.
    compute: Compute,
}

impl ReleaseReader {
    /// Bytes of the largest record.
    pub fn largest_record(&self) -> u64 {
        self.layers
            .values()
            .map(|l| l.record_len as u64)
            .max()
            .unwrap_or(0)
    }
}

impl RecordReader for ReleaseReader {
    fn fetch(&self, layer: u32, ids: &[u32], _priority: Priority, done: Done) {
        let Some(plan) = self.layers.get(&layer) else {
            for &e in ids {
                done(
                    layer,
                    e,
                    Err(Error::BadRequest(format!("layer {layer} has no experts"))),
                );
            }
            return;
        };
        for &e in ids {
            let (source, plan, done) = (
                Arc::clone(&self.source),
                Arc::clone(plan),
                Arc::clone(&done),
            );
            // Off the caller's thread: it is the engine's.
            self.compute.spawn(move || {
                let record = native_record(&source, &plan, e as usize)
                    .map(RecordBytes::Owned)
                    .map_err(|err| {
                        // Clients see a short text; the cause goes to the log.
                        tracing::error!("layer {layer} expert {e}: {err}");
                        Error::Release(err)
                    });
                done(layer, e, record);
            });
        }
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.layers.get(&layer).map(|l| l.record_len as u64)
    }

    fn mode(&self) -> &'static str {
        "release"
    }
}
