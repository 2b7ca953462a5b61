//! Opens what `--model` names: a Hugging Face checkpoint folder (plain,
//! sharded, or a hub cache snapshot) or a `.gguf` file, read through
//! waste-convert, with the routed experts loaded on demand from the same
//! files; or a converted store (a folder with `manifest.json`), whose
//! backbone is its `backbone/` folder and whose experts are read from
//! `experts/` (`store_experts`), and whose untied token embeddings are
//! read by row as the node reads them. A GGUF file also brings its tokenizer
//! (rebuilt from its metadata).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use waste_convert::convert::NativeBackbone;
use waste_convert::convert::names::parse_expert;
use waste_convert::convert::source::Origin;
use waste_format::Manifest;
use waste_format::{Checkpoint, RowsOnDemand};
use waste_kernels::{Q8Products, Tensor, TensorSource, TensorSourceError};
use waste_model::{ExpertProvider, Model, ModelConfig, SourceExperts, Tokenizer};
use waste_node::plan::Resident;
use waste_node::progress::LoadProgress;

use crate::exit::UsageError;
use crate::model_check;
use crate::store_experts::StoreExperts;

/// Where the weights come from: a Hugging Face folder or a GGUF file, both
/// by Hugging Face tensor name.
pub enum Source {
    Folder(Checkpoint),
    Gguf(waste_convert::convert::Source),
}

impl TensorSource for Source {
    fn contains(&self, name: &str) -> bool {
        match self {
            Self::Folder(c) => TensorSource::contains(c, name),
            Self::Gguf(g) => TensorSource::contains(g, name),
        }
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, TensorSourceError> {
        match self {
            Self::Folder(c) => TensorSource::load(c, name),
            Self::Gguf(g) => TensorSource::load(g, name),
        }
    }
}

/// A model ready to run, with the checkpoint its experts come from.
pub struct Loaded {
    pub checkpoint: Source,
    pub model: Model,
    /// The tokenizer a GGUF file carries; `None` for folders, whose
    /// tokenizer.json the caller loads (it may come from `--tokenizer`).
    pub tokenizer: Option<Tokenizer>,
    /// The folder holding config.json, the tokenizer files and
    /// generation_config.json (a store's `backbone/`; the file for a GGUF).
    pub dir: PathBuf,
    /// The routed experts when `--model` is a store.
    pub store: Option<StoreExperts>,
}

impl Loaded {
    /// Where the forward pass gets routed experts: the store's records, or
    /// the checkpoint's tensors loaded on demand.
    pub fn experts(&self) -> Experts<'_> {
        match &self.store {
            Some(store) => Experts::Store(store),
            None => Experts::Source(Box::new(SourceExperts::new(
                &self.checkpoint,
                self.model.config(),
                EXPERT_BUDGET_BYTES,
            ))),
        }
    }
}

/// The routed experts of what `--model` named.
pub enum Experts<'a> {
    Store(&'a StoreExperts),
    Source(Box<SourceExperts<'a>>),
}

impl ExpertProvider for Experts<'_> {
    fn experts(
        &self,
        layer: usize,
        ids: &[u32],
    ) -> waste_model::Result<Vec<std::sync::Arc<dyn waste_kernels::ExpertFfn>>> {
        match self {
            Self::Store(s) => s.experts(layer, ids),
            Self::Source(s) => s.experts(layer, ids),
        }
    }
}

/// [`open_with`] on the default (integer) q8 products.
pub fn open(path: &Path) -> Result<Loaded> {
    open_with(path, Q8Products::default())
}

/// Opens what `--model` names, its q8 matrices multiplying as `q8` says.
pub fn open_with(path: &Path, q8: Q8Products) -> Result<Loaded> {
    let is_gguf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if path.is_file() && is_gguf {
        return open_gguf(path, q8);
    }
    if path.is_dir() && waste_format::manifest::is_store(path) {
        return open_store(path, q8);
    }
    let start = Instant::now();
    let checkpoint =
        Checkpoint::open(path).with_context(|| format!("open checkpoint {}", path.display()))?;
    let config = model_check::folder(&checkpoint, true)?;
    let total = folder_backbone_bytes(&checkpoint)?;
    let model = load_model(config, &checkpoint, total, checkpoint.dir(), q8, start)?;
    Ok(Loaded {
        dir: checkpoint.dir().to_path_buf(),
        checkpoint: Source::Folder(checkpoint),
        model,
        tokenizer: None,
        store: None,
    })
}

/// A converted store: refused without its manifest (an unfinished
/// conversion), then the manifest's index hashes checked, the backbone
/// loaded from `backbone/` and the experts opened in `experts/`.
fn open_store(root: &Path, q8: Q8Products) -> Result<Loaded> {
    let start = Instant::now();
    let manifest =
        Manifest::load_verified(root).with_context(|| format!("open store {}", root.display()))?;
    let backbone = root.join("backbone");
    // As the node does: an unfinished backbone is refused, shards are
    // checked against their recorded checksums.
    waste_format::backbone::check(&backbone, true)
        .with_context(|| format!("check backbone {}", backbone.display()))?;
    waste_format::completion::check_experts(&root.join("experts"))
        .with_context(|| format!("check experts {}", root.join("experts").display()))?;
    let checkpoint = Checkpoint::open(&backbone)
        .with_context(|| format!("open backbone {}", backbone.display()))?;
    let config = model_check::folder(&checkpoint, false)?;
    tracing::info!(
        experts = manifest.experts_format,
        backbone = manifest.backbone_format,
        "store converted from {}",
        manifest.source.path
    );
    // As the node does: untied token embeddings are read by row.
    let total = waste_node::plan::backbone_bytes(&checkpoint)?;
    let by_row = RowsOnDemand {
        checkpoint: &checkpoint,
        cache_rows: waste_node::plan::EMBEDDING_CACHE_ROWS,
    };
    let model = load_model(config, &by_row, total, root, q8, start)?;
    let store = StoreExperts::open(
        &root.join("experts"),
        model.config(),
        checkpoint.config_path(),
        EXPERT_BUDGET_BYTES,
    )?;
    Ok(Loaded {
        dir: backbone,
        checkpoint: Source::Folder(checkpoint),
        model,
        tokenizer: None,
        store: Some(store),
    })
}

/// A GGUF file: tensors under HF names, its synthesised config.json, and its
/// tokenizer when the metadata holds one that can be rebuilt. The backbone
/// is held as a native store holds it ([`NativeBackbone`]: quantized
/// matrices stay in their blocks).
fn open_gguf(path: &Path, q8: Q8Products) -> Result<Loaded> {
    let start = Instant::now();
    let source = waste_convert::convert::Source::open(path)
        .with_context(|| format!("open GGUF {}", path.display()))?;
    let Origin::Gguf(gguf) = source.origin() else {
        anyhow::bail!("{} did not open as a GGUF file", path.display());
    };
    let config = model_check::gguf(gguf)?;
    let native = NativeBackbone(&source);
    let mut total = 0;
    for name in source.names().iter().filter(|n| parse_expert(n).is_none()) {
        total += native.ram_bytes(name)?;
    }
    let model = load_model(config, &native, total, path, q8, start)?;
    let tokenizer = match waste_node::source::release::gguf_tokenizer(gguf) {
        Ok(t) => Some(t),
        // --tokens works without one; --prompt then fails naming the cause.
        Err(e) => {
            tracing::warn!("no tokenizer from {}: {e:#}", path.display());
            None
        }
    };
    Ok(Loaded {
        // A GGUF has no side files: nothing is found beside "the file".
        dir: path.to_path_buf(),
        checkpoint: Source::Gguf(source),
        model,
        tokenizer,
        store: None,
    })
}

/// Bytes the backbone of a folder (a store's `backbone/` or a Hugging Face
/// checkpoint, whose routed experts load on demand) takes once loaded.
fn folder_backbone_bytes(checkpoint: &Checkpoint) -> Result<u64> {
    let mut total = 0;
    for name in checkpoint.tensor_names() {
        if parse_expert(name).is_some() {
            continue;
        }
        let info = checkpoint.info(name)?;
        total += Resident::of(&info.storage).bytes(&info.shape);
    }
    Ok(total)
}

/// Loads the backbone of `total` bytes from `from`, its q8 products as
/// given, with progress.
fn load_model(
    config: ModelConfig,
    source: &dyn TensorSource,
    total: u64,
    from: &Path,
    q8: Q8Products,
    start: Instant,
) -> Result<Model> {
    tracing::info!(
        model_type = config.model_type,
        layers = config.num_hidden_layers,
        hidden = config.hidden_size,
        vocab = config.vocab_size,
        "loading {}",
        from.display()
    );
    let counted = LoadProgress::new(source, total);
    let model = Model::load_with(config, &counted, q8).context("load backbone")?;
    counted.finish();
    tracing::debug!(
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "opened and loaded"
    );
    Ok(model)
}

/// Parses `1,2,3` into token ids. Every comma-separated item must be a
/// token id: an empty item (`1,,2`, a trailing comma) is refused rather
/// than skipped, since it is more likely a lost id than a stray comma.
pub fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    if s.trim().is_empty() {
        return Err(UsageError("--tokens is empty".into()).into());
    }
    s.split(',')
        .enumerate()
        .map(|(i, t)| {
            let t = t.trim();
            t.parse::<u32>().map_err(|_| {
                UsageError(format!(
                    "--tokens item {} ({t:?}) is not a token id (an integer in 0..2^32)",
                    i + 1
                ))
                .into()
            })
        })
        .collect()
}

/// Routed experts kept in RAM by the in-process commands before they start
/// over; enough for any model's working set of one token, far below a real
/// release's total.
pub const EXPERT_BUDGET_BYTES: usize = 4 << 30;
