//! The running node: everything a request needs, shared by all of them
//! (engine, tokenizer, sessions, admission, plan, metrics), assembled
//! around a loaded model; [`crate::open`] loads it from a [`Config`].

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;
use waste_model::{ChatTemplate, LogitsFor, SamplingParams, Tokenizer};
use waste_proto::auth::BearerAuth;

use crate::config::Config;
use crate::engine::Engine;
use crate::metrics::NodeMetrics;
use crate::plan::RamPlan;
use crate::session::Sessions;
use crate::source::remote::{StoreClient, StoreState};
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
    /// `generating + max_queue` in all ([`Config::generating`]), so the
    /// queue is bounded.
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
    /// The node around a loaded model: chat template, end-of-sequence ids
    /// and sampling defaults (generation_config.json in `dir`, when the model
    /// has a folder), sessions and admission.
    pub(crate) fn assemble(
        cfg: Config,
        engine: Engine,
        plan: RamPlan,
        ctx_size: usize,
        tokenizer: Option<Tokenizer>,
        dir: Option<&Path>,
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
            slots: Semaphore::new(cfg.generating()),
            admission: Arc::new(Semaphore::new(cfg.generating() + cfg.max_queue)),
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
}

impl Node {
    /// Waits, at most `bound`, for the reads that fill the expert cache at
    /// load; logs how long it took. True when they all landed in time.
    pub async fn wait_warm(&self, bound: std::time::Duration) -> bool {
        let t0 = std::time::Instant::now();
        let done = tokio::time::timeout(bound, self.engine.source.warmed())
            .await
            .is_ok();
        let secs = t0.elapsed().as_secs_f64();
        if done {
            tracing::info!("expert cache warm after {secs:.2} s");
            self.dry_step().await;
        } else {
            tracing::warn!(
                "expert cache still warming after {secs:.2} s: the rest lands behind requests"
            );
        }
        done
    }

    /// One throwaway forward step (a 16-token prompt, then one token, on a
    /// KV cache of its own), so that what a first request would touch
    /// first (the backbone's pages, the kernels' scratch, the forward
    /// pool's threads) is touched before it comes. A failure is only logged.
    async fn dry_step(&self) {
        let t0 = std::time::Instant::now();
        let vocab = u32::try_from(self.engine.model.config().vocab_size).unwrap_or(u32::MAX);
        let prompt: Vec<u32> = (0..vocab.min(16)).collect();
        let state = crate::generate::fresh_state(self, prompt.len() + 1);
        let stream = self.engine.new_stream();
        let last = LogitsFor::Last;
        let (cache, r) = self.engine.forward(stream, prompt, state.cache, last).await;
        let r = match r {
            Ok(_) => self.engine.forward(stream, vec![0], cache, last).await.1,
            Err(e) => Err(e),
        };
        self.engine.phases.take();
        match r {
            Ok(_) => tracing::info!(
                "a dry forward step took {:.2} s",
                t0.elapsed().as_secs_f64()
            ),
            Err(e) => tracing::warn!("failed to run a dry forward step: {e}"),
        }
    }
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
