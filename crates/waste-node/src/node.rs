//! Builds a running node from its [`Config`]: refuses a backbone or experts
//! folder whose conversion did not finish, checks the backbone's shards
//! against their recorded checksums, reads the backbone's config, opens the
//! expert source (local files, or the store), which must be the one the
//! backbone was converted with (the experts index sha256 it recorded; by
//! shape only for a backbone written before it did) and describe the same
//! model, makes the RAM plan and refuses to start when it does not fit,
//! then loads the backbone and the tokenizer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;
use waste_format::backbone::BACKBONE_META;
use waste_format::completion::{self, Completeness};
use waste_format::io::{AlignedBuf, DirectMode, EngineConfig};
use waste_format::{Checkpoint, RowsOnDemand};
use waste_model::{ChatTemplate, Model, ModelConfig, SamplingParams, Tokenizer};
use waste_proto::auth::BearerAuth;

/// The segment size of the node's local reads: one huge page of the IO
/// buffers, so each segment is one physically contiguous device request.
const NODE_SEGMENT_BYTES: usize = waste_format::io::buffer::HUGE_PAGE;

use crate::compute::Compute;
use crate::config::{Config, ExpertMode};
use crate::engine::Engine;
use crate::metrics::NodeMetrics;
use crate::plan::{self, RamPlan};
use crate::progress::LoadProgress;
use crate::session::Sessions;
use crate::source::ExpertSource;
use crate::source::local::LocalReader;
use crate::source::records::RecordSource;
use crate::source::release;
use crate::source::remote::{ComputeSource, RemoteReader, StoreClient, StoreState};
use crate::{Error, Result};

/// Everything a request needs, shared by all of them.
pub struct Node {
    pub engine: Engine,
    pub tokenizer: Option<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    pub sessions: Sessions,
    /// Requests generating at once.
    pub slots: Semaphore,
    /// Requests admitted (generating or queued for a slot): one permit each,
    /// `max_concurrent + max_queue` in all, so the queue is bounded.
    pub(crate) admission: Arc<Semaphore>,
    pub plan: RamPlan,
    pub ctx_size: usize,
    pub eos: Vec<u32>,
    /// Sampling defaults from generation_config.json.
    pub defaults: SamplingParams,
    pub config: Config,
    pub store: Option<StoreClient>,
    pub metrics: NodeMetrics,
    /// The bytes of each token id, for JSON mode ([`Node::json_vocab`]).
    pub(crate) json_vocab: OnceLock<Vec<Option<Box<[u8]>>>>,
    /// The client token check, shared by gRPC and HTTP.
    pub auth: BearerAuth,
    /// Set once shutdown has begun (health then says so).
    draining: AtomicBool,
    /// Seconds since the epoch when the node started.
    started: u64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("plan", &self.plan)
            .field("ctx_size", &self.ctx_size)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Loads everything; call inside the tokio runtime (remote modes connect).
    pub async fn load(cfg: Config) -> Result<Arc<Self>> {
        cfg.validate()?;
        // Evicted records must leave the process, or it outgrows its plan.
        waste_format::io::heap::return_large_blocks();
        if cfg.model.is_some() {
            return Self::load_release(cfg).await;
        }
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
        let expected = meta.as_ref().map(|m| m.experts_index_sha256.as_str());
        let backbone_err = |source| Error::Backbone {
            path: cfg.backbone.clone(),
            source,
        };
        let ckpt = Checkpoint::open(&cfg.backbone).map_err(backbone_err)?;
        let model_cfg = ModelConfig::from_json_file(ckpt.config_json(), ckpt.config_path())?;
        let compute = Compute::new(cfg.threads)?;

        // The expert side first: its record sizes enter the plan.
        let (record_bytes, store) = match cfg.expert_mode {
            ExpertMode::Local => (None, None),
            ExpertMode::Fetch | ExpertMode::ComputeAtStore => {
                let addr = cfg.store_addr.as_deref().expect("validated");
                let client = StoreClient::connect(
                    addr,
                    cfg.store_token.as_deref(),
                    cfg.store_ca.as_deref(),
                    expected,
                    Duration::from_secs(cfg.store_reconnect_secs),
                )
                .await?;
                check_store(&model_cfg, client.info())?;
                let max = client
                    .info()
                    .layers
                    .iter()
                    .map(|l| l.record_bytes)
                    .max()
                    .unwrap_or(0);
                (Some(max), Some(client))
            }
        };
        // Local reads: the record sizes come from the index now, the reader
        // once the plan has sized its buffers. A local record sits in a
        // read buffer, which is rounded up to whole huge pages.
        let local_dir = match cfg.expert_mode {
            ExpertMode::Local => {
                let dir = cfg.experts.as_deref().expect("validated");
                check_local_identity(dir, expected)?;
                Some(waste_format::ExpertsDir::open(dir)?)
            }
            _ => None,
        };
        let record_bytes = record_bytes
            .or_else(|| {
                local_dir.as_ref().and_then(|d| {
                    d.index()
                        .layers
                        .iter()
                        .map(|l| AlignedBuf::capacity_for(l.record_len as usize) as u64)
                        .max()
                })
            })
            .unwrap_or(0);

        let backbone = plan::backbone_bytes(&ckpt)?;
        let (plan, ctx_size) = ram_plan(&cfg, &model_cfg, backbone, record_bytes)?;
        let local = match &local_dir {
            Some(dir) => {
                // The engine's buffers are the plan's in-flight share (at
                // least two records, so one can be read while one is used).
                // Records are read in 2 MiB segments (one huge page, one
                // device request each) so they complete one after another
                // and demand preempts a guess within a segment; guesses may
                // then use every thread (docs/BENCH.md: decode 0.58 -> 0.66
                // x bound on K3 shapes, 0.66 -> 0.76 x on DeepSeek-V3's).
                let defaults = EngineConfig::default();
                let io = EngineConfig {
                    inflight_bytes: usize::try_from(plan.in_flight.max(2 * record_bytes))
                        .unwrap_or(usize::MAX),
                    segment_bytes: NODE_SEGMENT_BYTES,
                    prefetch_reads: defaults.threads,
                    ..defaults
                };
                let reader = LocalReader::open(dir.dir(), DirectMode::Prefer, io)?;
                check_local(&model_cfg, &reader)?;
                Some(reader)
            }
            None => None,
        };

        let model = {
            let ckpt_dir = cfg.backbone.clone();
            let model_cfg = model_cfg.clone();
            tokio::task::spawn_blocking(move || -> Result<Model> {
                let ckpt = Checkpoint::open(&ckpt_dir).map_err(|source| Error::Backbone {
                    path: ckpt_dir,
                    source,
                })?;
                // Untied token embeddings stay in the backbone file, read
                // by row as tokens need them (the plan counts their cache).
                let by_row = RowsOnDemand {
                    checkpoint: &ckpt,
                    cache_rows: plan::EMBEDDING_CACHE_ROWS,
                };
                let counted = LoadProgress::new(&by_row, backbone);
                let model = Model::load(model_cfg, &counted)?;
                counted.finish();
                Ok(model)
            })
            .await
            .map_err(|e| Error::Config(format!("loading the backbone panicked: {e}")))??
        };

        let source: Arc<dyn ExpertSource> = match (cfg.expert_mode, local, &store) {
            (ExpertMode::Local, Some(reader), _) => Arc::new(RecordSource::new(
                reader,
                plan.expert_cache,
                compute.clone(),
                model_cfg.activation,
            )),
            (ExpertMode::Fetch, _, Some(client)) => Arc::new(RecordSource::new(
                RemoteReader::new(client.clone()),
                plan.expert_cache,
                compute.clone(),
                model_cfg.activation,
            )),
            (ExpertMode::ComputeAtStore, _, Some(client)) => {
                Arc::new(ComputeSource::new(client.clone()))
            }
            _ => unreachable!("validated: each mode has its source"),
        };
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

    /// The node around a loaded model: chat template, end-of-sequence ids
    /// and sampling defaults (generation_config.json in `dir`, when the model
    /// has a folder), sessions and admission.
    fn assemble(
        cfg: Config,
        engine: Engine,
        plan: RamPlan,
        ctx_size: usize,
        tokenizer: Option<Tokenizer>,
        dir: Option<&std::path::Path>,
        store: Option<StoreClient>,
    ) -> Result<Arc<Self>> {
        let chat_template = match &tokenizer {
            Some(t) => match t.chat_template() {
                Some(src) => Some(ChatTemplate::new(src, t.bos_token(), t.eos_token())?),
                None => None,
            },
            None => None,
        };
        let (defaults, mut eos) = match dir {
            Some(dir) => waste_model::sampling::generation_defaults(dir),
            None => waste_model::sampling::generation_defaults_of(&serde_json::Value::Null),
        };
        eos.extend(&engine.model.config().eos_token_ids);
        if let Some(t) = &tokenizer {
            eos.extend(t.eos_token_ids());
        }
        eos.sort_unstable();
        eos.dedup();
        Ok(Arc::new(Self {
            engine,
            tokenizer,
            chat_template,
            sessions: Sessions::new(cfg.max_sessions),
            slots: Semaphore::new(cfg.max_concurrent),
            admission: Arc::new(Semaphore::new(cfg.max_concurrent + cfg.max_queue)),
            plan,
            ctx_size,
            eos,
            defaults,
            store,
            metrics: NodeMetrics::new(),
            json_vocab: OnceLock::new(),
            auth: BearerAuth::new(cfg.token.as_deref()),
            draining: AtomicBool::new(false),
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            config: cfg,
        }))
    }

    /// A node on a release's own files (a GGUF file or a Hugging Face
    /// folder): the backbone loaded from them, each expert's record built
    /// from them when first needed, as `waste convert --experts native`
    /// would write it, then cached like a store's.
    async fn load_release(cfg: Config) -> Result<Arc<Self>> {
        let path = cfg.model.clone().expect("load_release is for --model");
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
        let model = tokio::task::spawn_blocking(move || -> Result<Model> {
            let native = waste_convert::convert::NativeBackbone(&source);
            let counted = LoadProgress::new(&native, backbone);
            let model = Model::load(model_cfg, &counted)?;
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
    let mut plan = RamPlan::new(
        budget,
        backbone,
        model_cfg,
        ctx_size,
        cfg.max_sessions,
        record_bytes,
        top_k,
    )?;
    if let Some(cap) = cfg.expert_cache {
        plan.expert_cache = plan.expert_cache.min(cap);
    }
    tracing::info!("RAM plan: {plan}");
    Ok((plan, ctx_size))
}

impl Node {
    /// The model's name in the APIs: the first configured one, else the
    /// store's folder name (the parent of `backbone/`), else the backbone
    /// folder's; for a release, its file or folder name.
    pub fn model_id(&self) -> String {
        if let Some(name) = self.config.model_name.first() {
            return name.clone();
        }
        // A release: its file's name without `.gguf`, or its folder's.
        if let Some(m) = &self.config.model {
            let name = if m.is_file() {
                m.file_stem()
            } else {
                m.file_name()
            };
            return name.and_then(|n| n.to_str()).unwrap_or("waste").to_string();
        }
        let b = &self.config.backbone;
        let dir = match b.file_name().and_then(|n| n.to_str()) {
            Some("backbone") => b.parent().and_then(|p| p.file_name()),
            _ => b.file_name(),
        };
        dir.and_then(|n| n.to_str()).unwrap_or("waste").to_string()
    }

    /// Every name a request may use for this node's model: the id, then aliases.
    pub fn model_names(&self) -> Vec<String> {
        match self.config.model_name.as_slice() {
            [] => vec![self.model_id()],
            names => names.to_vec(),
        }
    }

    /// `Ok` when `model` names this node's model (by its id or an alias).
    pub fn check_model(&self, model: &str) -> Result<()> {
        let served = self.model_names();
        if served.iter().any(|n| n == model) {
            Ok(())
        } else {
            Err(Error::ModelNotFound {
                model: model.to_string(),
                served,
            })
        }
    }

    pub fn started_unix(&self) -> u64 {
        self.started
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Why the node cannot serve now for want of its expert store (lost,
    /// or come back as another store); None in local mode or while it is up.
    pub fn store_problem(&self) -> Option<String> {
        match self.store.as_ref()?.state() {
            StoreState::Up => None,
            StoreState::Lost(why) | StoreState::Wrong(why) => Some(why),
        }
    }
}

/// A local `experts/` folder must be whole and, when the backbone recorded
/// one, have the identity it was converted with.
fn check_local_identity(dir: &std::path::Path, expected: Option<&str>) -> Result<()> {
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
