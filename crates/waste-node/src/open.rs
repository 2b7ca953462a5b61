//! Opens a node from its [`Config`]: the one opener of a model and its
//! expert source, for the daemon and the in-process commands (`waste run`,
//! `waste chat --model`) alike. Validation says where the model comes from
//! ([`ModelSource`]). A release (a GGUF file or a Hugging Face folder) is
//! run straight from its files. A store's backbone or experts folder whose
//! conversion did not finish is refused, the backbone's shards are checked
//! against their recorded checksums and its config read, then the expert
//! side is opened (local files, or the store), which must be the one the
//! backbone was converted with (the experts index sha256 it recorded; by
//! shape only for a backbone written before it did) and describe the same
//! model; the RAM plan is made (refused when it does not fit), then the
//! backbone and the tokenizer are loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use waste_format::backbone::{BACKBONE_META, BackboneMeta};
use waste_format::completion::{self, Completeness};
use waste_format::io::{AlignedBuf, DirectMode, EngineConfig};
use waste_format::{Checkpoint, ExpertsDir, RowsOnDemand};
use waste_kernels::Q8Products;
use waste_model::{Model, ModelConfig, Tokenizer};

use crate::compute::Compute;
use crate::config::{Config, ModelSource, StoreExperts};
use crate::engine::Engine;
use crate::node::Node;
use crate::plan::{self, RamPlan, Sessions};
use crate::progress::LoadProgress;
use crate::source::ExpertSource;
use crate::source::local::LocalReader;
use crate::source::records::RecordSource;
use crate::source::release;
use crate::source::remote::{ComputeSource, RemoteReader, StoreClient};
use crate::{Error, Result};

/// The segment size of the node's local reads: one huge page of the IO
/// buffers, so each segment is one physically contiguous device request.
const NODE_SEGMENT_BYTES: usize = waste_format::io::buffer::HUGE_PAGE;

impl Node {
    /// Loads everything; call inside the tokio runtime (remote modes connect).
    pub async fn load(cfg: Config) -> Result<Arc<Self>> {
        let source = cfg.validate()?;
        // Evicted records must leave the process, or it outgrows its plan.
        waste_format::io::heap::return_large_blocks();
        match source {
            ModelSource::Release(path) => Self::load_release(cfg, path).await,
            ModelSource::Store(experts) => Self::load_store(cfg, experts).await,
        }
    }

    /// A node on a store's backbone: the backbone checked, the expert side
    /// opened (its record sizes enter the plan), the plan made, the local
    /// reader sized by it, then the backbone loaded.
    async fn load_store(cfg: Config, experts: StoreExperts) -> Result<Arc<Self>> {
        let meta = check_backbone(&cfg).await?;
        let expected = meta.as_ref().map(|m| m.experts_index_sha256.as_str());
        let ckpt = Checkpoint::open(&cfg.backbone).map_err(|source| Error::Backbone {
            path: cfg.backbone.clone(),
            source,
        })?;
        let model_cfg = ModelConfig::from_json_file(ckpt.config_json(), ckpt.config_path())?;
        let compute = Compute::new(cfg.threads)?;
        let side = Side::open(&cfg, experts, expected, &model_cfg).await?;
        let record_bytes = side.record_bytes();
        let backbone = plan::backbone_bytes(&ckpt)?;
        let (plan, ctx_size) = ram_plan(&cfg, &model_cfg, backbone, record_bytes)?;
        let side = side.with_reader(&plan, record_bytes, &model_cfg)?;
        let q8 = cfg.q8_products();
        let model = load_backbone(&cfg.backbone, model_cfg.clone(), backbone, q8).await?;
        let store = side.client();
        let cache_capped = cfg.expert_cache.is_some();
        let source = side.into_source(
            &plan,
            record_bytes,
            cache_capped,
            &compute,
            model_cfg.activation,
        );
        let engine = Engine::new(Arc::new(model), source, compute, cfg.prefetch);
        let tokenizer = match &cfg.tokenizer {
            Some(dir) => Some(Tokenizer::from_dir(dir)?),
            None if ["tokenizer.json", "tiktoken.model"]
                .iter()
                .any(|f| cfg.backbone.join(f).is_file()) =>
            {
                Some(Tokenizer::from_dir(&cfg.backbone)?)
            }
            None => None,
        };
        let dir = cfg.backbone.clone();
        Self::assemble(cfg, engine, plan, ctx_size, tokenizer, Some(&dir), store)
    }

    /// A node on a release's own files (a GGUF file or a Hugging Face
    /// folder): the backbone loaded from them, each expert's record built
    /// from them when first needed, as `waste convert --experts native`
    /// would write it, then cached like a store's.
    async fn load_release(cfg: Config, path: PathBuf) -> Result<Arc<Self>> {
        let compute = Compute::new(cfg.threads)?;
        let opened = {
            let (path, compute) = (path.clone(), compute.clone());
            tokio::task::spawn_blocking(move || release::open(&path, compute))
                .await
                .map_err(|e| Error::Config(format!("opening the model panicked: {e}")))??
        };
        let model_cfg = opened.config.clone();
        let (plan, ctx_size) = ram_plan(
            &cfg,
            &model_cfg,
            opened.backbone_bytes,
            opened.reader.largest_record(),
        )?;
        let source = Arc::clone(&opened.source);
        let backbone = opened.backbone_bytes;
        let q8 = cfg.q8_products();
        let model = tokio::task::spawn_blocking(move || -> Result<Model> {
            let native = waste_convert::convert::NativeBackbone(&source);
            let counted = LoadProgress::new(&native, backbone);
            let model = Model::load_with(model_cfg, &counted, q8)?;
            counted.finish();
            Ok(model)
        })
        .await
        .map_err(|e| Error::Config(format!("loading the backbone panicked: {e}")))??;
        let records = Arc::new(RecordSource::new(
            opened.reader,
            plan.expert_cache,
            compute.clone(),
            opened.config.activation,
        ));
        let engine = Engine::new(Arc::new(model), records, compute, cfg.prefetch);
        let tokenizer = match &cfg.tokenizer {
            Some(dir) => Some(Tokenizer::from_dir(dir)?),
            None => release::tokenizer(&opened.source)?,
        };
        // A folder's generation_config.json; a GGUF has none beside it.
        let dir = path.is_dir().then_some(path.as_path());
        Self::assemble(cfg, engine, plan, ctx_size, tokenizer, dir, None)
    }
}

/// The context size and the RAM plan for a backbone of `backbone` bytes and
/// expert records of at most `record_bytes`, refused when it does not fit;
/// `--expert-cache` caps the cache.
fn ram_plan(
    cfg: &Config,
    model_cfg: &ModelConfig,
    backbone: u64,
    record_bytes: u64,
) -> Result<(RamPlan, usize)> {
    let ctx_size = cfg
        .ctx_size
        .unwrap_or(model_cfg.max_position_embeddings.min(4096));
    let budget = cfg
        .ram_budget
        .or_else(plan::default_budget)
        .ok_or_else(|| {
            Error::Config("cannot read MemAvailable from /proc/meminfo: give --ram-budget".into())
        })?;
    let top_k = model_cfg.moe.as_ref().map_or(0, |m| m.top_k as u64);
    let sessions = Sessions {
        count: cfg.max_sessions,
        ctx: ctx_size,
        cache: cfg.cache_type,
    };
    let mut plan = RamPlan::new(budget, backbone, model_cfg, sessions, record_bytes, top_k)?;
    if let Some(cap) = cfg.expert_cache {
        plan.expert_cache = plan.expert_cache.min(cap);
    }
    tracing::info!("RAM plan: {plan}");
    Ok((plan, ctx_size))
}

/// Refuses a backbone whose conversion did not finish and checks its
/// shards against their recorded checksums; returns its metadata (None
/// for a backbone written before store format 1.1).
async fn check_backbone(cfg: &Config) -> Result<Option<BackboneMeta>> {
    let (done, meta) = {
        let (dir, verify) = (cfg.backbone.clone(), cfg.verify_backbone);
        tokio::task::spawn_blocking(move || waste_format::backbone::check(&dir, verify))
            .await
            .map_err(|e| Error::Config(format!("checking the backbone panicked: {e}")))??
    };
    if done == Completeness::Unmarked {
        tracing::warn!(
            backbone = %cfg.backbone.display(),
            "no {} (a backbone written before completion markers): loading it since its index is there",
            completion::COMPLETE
        );
    }
    match &meta {
        Some(meta) if cfg.verify_backbone => tracing::info!(
            shards = meta.shards.len(),
            "backbone shards match their checksums"
        ),
        Some(_) => tracing::warn!("--no-verify-backbone: backbone shards not checked"),
        None => tracing::warn!(
            backbone = %cfg.backbone.display(),
            "no {BACKBONE_META} (written before store format 1.1): shards load unchecked and the experts are matched by shape only"
        ),
    }
    Ok(meta)
}

/// Loads a store's backbone of `bytes` bytes, its q8 matrices multiplying
/// as `q8` says. Untied token embeddings stay in the backbone file, read by
/// row as tokens need them (the plan counts their cache).
async fn load_backbone(
    dir: &Path,
    model_cfg: ModelConfig,
    bytes: u64,
    q8: Q8Products,
) -> Result<Model> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<Model> {
        let ckpt =
            Checkpoint::open(&dir).map_err(|source| Error::Backbone { path: dir, source })?;
        let by_row = RowsOnDemand {
            checkpoint: &ckpt,
            cache_rows: plan::EMBEDDING_CACHE_ROWS,
        };
        let counted = LoadProgress::new(&by_row, bytes);
        let model = Model::load_with(model_cfg, &counted, q8)?;
        counted.finish();
        ckpt.drop_page_cache();
        Ok(model)
    })
    .await
    .map_err(|e| Error::Config(format!("loading the backbone panicked: {e}")))?
}

/// A store-backed node's expert side: `L` is the local `experts/` folder
/// until the plan sizes its reader, then the reader.
enum Side<L> {
    Local(L),
    Fetch(StoreClient),
    ComputeAtStore(StoreClient),
}

impl Side<ExpertsDir> {
    /// Opens the experts and checks them against the backbone: a local
    /// folder must be whole and have the identity the backbone recorded
    /// (`expected`); a store is connected to and asked the same.
    async fn open(
        cfg: &Config,
        experts: StoreExperts,
        expected: Option<&str>,
        model_cfg: &ModelConfig,
    ) -> Result<Self> {
        let connect = |addr: String| async move {
            let client = StoreClient::connect(
                &addr,
                cfg.store_token.as_deref(),
                cfg.store_ca.as_deref(),
                cfg.store_bulk,
                expected,
                Duration::from_secs(cfg.store_reconnect_secs),
            )
            .await?;
            check_store(model_cfg, client.info())?;
            Ok::<_, Error>(client)
        };
        Ok(match experts {
            StoreExperts::Local(dir) => {
                check_local_identity(&dir, expected)?;
                Self::Local(ExpertsDir::open(&dir)?)
            }
            StoreExperts::Fetch(addr) => Self::Fetch(connect(addr).await?),
            StoreExperts::ComputeAtStore(addr) => Self::ComputeAtStore(connect(addr).await?),
        })
    }

    /// Bytes of the largest record. A record read here or fetched sits in
    /// a pool's buffer, which is rounded up to whole huge pages.
    fn record_bytes(&self) -> u64 {
        let most = match self {
            Self::Local(dir) => dir.index().layers.iter().map(|l| l.record_len).max(),
            Self::Fetch(c) | Self::ComputeAtStore(c) => {
                c.info().layers.iter().map(|l| l.record_bytes).max()
            }
        }
        .unwrap_or(0);
        match self {
            Self::ComputeAtStore(_) => most,
            Self::Local(_) | Self::Fetch(_) => AlignedBuf::capacity_for(most as usize) as u64,
        }
    }

    /// The local reader, its buffers the plan's in-flight share (at least
    /// two records, so one can be read while one is used). Records are read
    /// in 2 MiB segments (one huge page, one device request each) so they
    /// complete one after another and demand preempts a guess within a
    /// segment; guesses may then use every thread (docs/BENCH.md).
    fn with_reader(
        self,
        plan: &RamPlan,
        record_bytes: u64,
        model_cfg: &ModelConfig,
    ) -> Result<Side<LocalReader>> {
        Ok(match self {
            Self::Local(dir) => {
                let defaults = EngineConfig::default();
                let io = EngineConfig {
                    inflight_bytes: in_flight_bytes(plan, record_bytes),
                    segment_bytes: NODE_SEGMENT_BYTES,
                    prefetch_reads: defaults.threads,
                    ..defaults
                };
                let reader = LocalReader::open(dir.dir(), DirectMode::Prefer, io)?;
                check_local(model_cfg, &reader)?;
                Side::Local(reader)
            }
            Self::Fetch(c) => Side::Fetch(c),
            Self::ComputeAtStore(c) => Side::ComputeAtStore(c),
        })
    }
}

impl<L> Side<L> {
    fn client(&self) -> Option<StoreClient> {
        match self {
            Self::Local(_) => None,
            Self::Fetch(c) | Self::ComputeAtStore(c) => Some(c.clone()),
        }
    }
}

impl Side<LocalReader> {
    /// The expert source: records read here or fetched, cached and computed
    /// on `compute`; or the store computing them. Read here, an uncapped
    /// cache also holds the in-flight share the IO pool has not taken.
    fn into_source(
        self,
        plan: &RamPlan,
        record_bytes: u64,
        cache_capped: bool,
        compute: &Compute,
        activation: waste_kernels::Activation,
    ) -> Arc<dyn ExpertSource> {
        match self {
            Self::Local(reader) => {
                let layers: Vec<(u32, u32)> = reader
                    .experts()
                    .index()
                    .layers
                    .iter()
                    .map(|l| (l.layer, l.n_experts))
                    .collect();
                let source =
                    RecordSource::new(reader, plan.expert_cache, compute.clone(), activation);
                let source = if cache_capped {
                    source
                } else {
                    source.borrowing_idle_reserve()
                };
                let (experts, bytes) = source.warm(&layers);
                tracing::info!(
                    "warming the expert cache: {experts} experts, {:.2} GB, read at prefetch priority",
                    bytes as f64 / 1e9
                );
                Arc::new(source)
            }
            Self::Fetch(client) => Arc::new(RecordSource::new(
                RemoteReader::new(client, in_flight_bytes(plan, record_bytes)),
                plan.expert_cache,
                compute.clone(),
                activation,
            )),
            Self::ComputeAtStore(client) => Arc::new(ComputeSource::new(client)),
        }
    }
}

/// The bytes of buffers kept for records in flight (read here or fetched):
/// the plan's share, at least two records (one read while one is used).
fn in_flight_bytes(plan: &RamPlan, record_bytes: u64) -> usize {
    usize::try_from(plan.in_flight.max(2 * record_bytes)).unwrap_or(usize::MAX)
}

/// A local `experts/` folder must be whole and, when the backbone recorded
/// one, have the identity it was converted with.
fn check_local_identity(dir: &Path, expected: Option<&str>) -> Result<()> {
    if completion::check_experts(dir)? == Completeness::Unmarked {
        tracing::warn!(
            experts = %dir.display(),
            "no {} (experts written before completion markers): reading them since their index is complete",
            completion::COMPLETE
        );
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    let found = waste_format::manifest::sha256_file(&dir.join(waste_format::experts::INDEX))?;
    if found != expected {
        return Err(Error::WrongStore {
            store: dir.display().to_string(),
            expected: expected.to_string(),
            found,
        });
    }
    Ok(())
}

/// The store must have the same MoE layers and widths as the backbone.
fn check_store(cfg: &ModelConfig, info: &waste_proto::store::v1::InfoResponse) -> Result<()> {
    let want: Vec<usize> = cfg
        .ffn
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f, waste_model::config::FfnKind::Moe))
        .map(|(i, _)| i)
        .collect();
    let have: Vec<usize> = info.layers.iter().map(|l| l.layer as usize).collect();
    if want != have {
        return Err(Error::Mismatch(format!(
            "the backbone's MoE layers are {want:?}, the store serves {have:?}"
        )));
    }
    let width = cfg.expert_width() as u32;
    if let Some(l) = info.layers.iter().find(|l| l.d_model != width) {
        return Err(Error::Mismatch(format!(
            "layer {} experts are {} wide, the backbone feeds {width}",
            l.layer, l.d_model
        )));
    }
    Ok(())
}

fn check_local(cfg: &ModelConfig, reader: &LocalReader) -> Result<()> {
    let index = reader.experts().index();
    let info = waste_proto::store::v1::InfoResponse {
        layers: index
            .layers
            .iter()
            .map(|l| waste_proto::store::v1::MoeLayer {
                layer: l.layer,
                n_experts: l.n_experts,
                d_model: l.d_model,
                d_ff: l.d_ff,
                record_bytes: l.record_len,
            })
            .collect(),
        ..Default::default()
    };
    check_store(cfg, &info)
}
