//! The node's configuration: where the backbone and the experts are, how
//! experts are obtained, the RAM budget and context size, the listening
//! address and auth. The binary layers defaults ← TOML file ← environment ←
//! flags; validated before any port is bound or file loaded. Sizes in a
//! file may be byte counts or strings like `"24G"`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use waste_model::cache::CacheType;

use crate::{Error, Result};

/// How the node gets a layer's expert contribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpertMode {
    /// Read the experts/ folder directly (same machine, no gRPC hop).
    Local,
    /// Stream the expert records from a store and compute here.
    Fetch,
    /// Send the activations; the store computes the experts next to its disk.
    ComputeAtStore,
}

impl std::str::FromStr for ExpertMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "local" => Ok(Self::Local),
            "fetch" => Ok(Self::Fetch),
            "compute-at-store" => Ok(Self::ComputeAtStore),
            other => Err(Error::Config(format!(
                "expert mode {other:?}: expected local, fetch or compute-at-store"
            ))),
        }
    }
}

/// Where a node's model comes from, as [`Config::validate`] found it:
/// each variant carries what loading it needs, so a mode without its
/// folder or address cannot be represented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A release run straight from its files (a GGUF file or a Hugging
    /// Face folder): backbone and experts both.
    Release(PathBuf),
    /// A store's backbone (`Config::backbone`) with its experts from here.
    Store(StoreExperts),
}

/// Where a store-backed node's routed experts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreExperts {
    /// The store's `experts/` folder, read on this machine.
    Local(PathBuf),
    /// Records streamed from the store at this address, computed here.
    Fetch(String),
    /// Activations sent to the store at this address, which computes.
    ComputeAtStore(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// A store's `backbone/` folder (a Hugging Face folder: config, tokenizer, weights).
    pub backbone: PathBuf,
    /// A release to run straight from, instead of a store: a GGUF file or
    /// a Hugging Face folder (backbone and experts both from its files).
    pub model: Option<PathBuf>,
    /// A store's `experts/` folder, for `local` mode.
    pub experts: Option<PathBuf>,
    /// The expert store's address (`http://host:port`), for `fetch` and `compute-at-store`.
    pub store_addr: Option<String>,
    /// Bearer token the store requires.
    pub store_token: Option<String>,
    /// CA certificate (PEM) to trust for a TLS store.
    pub store_ca: Option<PathBuf>,
    /// Fetch records on the store's bulk channel where it offers one (a
    /// plain-text store; proto `BulkFetchRequest`); off: every fetch
    /// through gRPC (a proxy in between that passes only HTTP/2).
    pub store_bulk: bool,
    pub expert_mode: ExpertMode,
    /// RAM the node may use in bytes; None: [`crate::plan::default_budget`]
    /// (80 % of MemAvailable at start, within the cgroup's limit).
    #[serde(deserialize_with = "size::opt")]
    pub ram_budget: Option<u64>,
    /// Context size in tokens per session (default: the model's, at most 4096).
    pub ctx_size: Option<usize>,
    /// Sessions kept at once (each holds a full context of KV state).
    pub max_sessions: usize,
    /// Requests generating at once (at most `max_sessions`); more wait
    /// their turn.
    pub max_concurrent: usize,
    /// Requests that may wait for a generation slot beyond `max_concurrent`;
    /// one more is refused (RESOURCE_EXHAUSTED, HTTP 429) with `retry-after`.
    pub max_queue: usize,
    /// Tokens generated when a request gives no `max_tokens` (or 0); 0 here
    /// means until a stop condition or the end of the context.
    pub default_max_tokens: usize,
    pub listen: SocketAddr,
    /// Bearer token clients must send.
    pub token: Option<String>,
    /// Bind a non-loopback address without a token.
    pub insecure: bool,
    /// Prefetch the next layer's likely experts.
    pub prefetch: bool,
    /// Cap on the expert cache in bytes (0 disables it); None: all the plan leaves.
    #[serde(deserialize_with = "size::opt")]
    pub expert_cache: Option<u64>,
    /// Threads of the forward-pass pool (default: all cores).
    pub threads: Option<usize>,
    /// The model's names in the APIs: the first is its id (Info, `/v1/models`),
    /// the others aliases a request may use too. Empty: the store's folder
    /// name. A file may give one string or a list.
    #[serde(deserialize_with = "one_or_many")]
    pub model_name: Vec<String>,
    /// Seconds a request keeps retrying a lost expert store before it fails
    /// with UNAVAILABLE naming the store and the last error (health turns
    /// NOT_SERVING within 5 s of the loss either way).
    pub store_reconnect_secs: u64,
    /// Seconds the daemon waits at start for the reads that fill its expert
    /// cache before it listens, so a first request does not pay them (0:
    /// listen at once; the reads then land behind requests).
    pub warm_wait_secs: u64,
    /// Check every backbone shard against the xxh3-64 recorded at
    /// conversion before loading it (one extra read of the backbone).
    pub verify_backbone: bool,
    /// A folder holding tokenizer.json (or tiktoken.model) to use instead
    /// of the model's own tokenizer (None: the model's, if it has one).
    pub tokenizer: Option<PathBuf>,
    /// Multiply the q8 backbone matrices (and a GGUF's quantized ones) exactly,
    /// every weight widened to f32, instead of llama.cpp's int8 arithmetic
    /// (activations quantized to Q8_0 per product): only the weights are
    /// rounded, but those products run slower.
    pub exact_q8: bool,
    /// The attention cache's value type: `f32` (exact) or `f16` (half the
    /// bytes, llama.cpp's default).
    pub cache_type: CacheType,
}

/// A string or a list of strings.
fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl Default for Config {
    fn default() -> Self {
        Self {
            backbone: PathBuf::new(),
            model: None,
            experts: None,
            store_addr: None,
            store_token: None,
            store_ca: None,
            store_bulk: true,
            expert_mode: ExpertMode::Local,
            ram_budget: None,
            ctx_size: None,
            max_sessions: 4,
            max_concurrent: 2,
            max_queue: 16,
            default_max_tokens: 1024,
            listen: SocketAddr::from(([127, 0, 0, 1], 50052)),
            token: None,
            insecure: false,
            prefetch: true,
            expert_cache: None,
            threads: None,
            model_name: Vec::new(),
            store_reconnect_secs: 60,
            warm_wait_secs: 60,
            verify_backbone: true,
            tokenizer: None,
            exact_q8: false,
            cache_type: CacheType::F32,
        }
    }
}

impl Config {
    /// How the backbone's q8 matrices multiply ([`Config::exact_q8`]).
    pub fn q8_products(&self) -> waste_kernels::Q8Products {
        waste_kernels::Q8Products::exact_if(self.exact_q8)
    }

    /// Runs `path`: a store (its `backbone/` and `experts/`, read locally),
    /// or a release, a GGUF file or a Hugging Face folder.
    pub fn set_model(&mut self, path: &Path) {
        if waste_format::manifest::is_store(path) {
            self.backbone = path.join("backbone");
            self.experts = Some(path.join("experts"));
            self.expert_mode = ExpertMode::Local;
            self.model = None;
        } else {
            self.model = Some(path.to_path_buf());
        }
    }

    /// Checks the whole config and says where the model comes from.
    pub fn validate(&self) -> Result<ModelSource> {
        let source = self.model_source()?;
        self.validate_serving()?;
        Ok(source)
    }

    /// The model's source: a release (`--model`), or a store's backbone
    /// with the experts its mode needs.
    fn model_source(&self) -> Result<ModelSource> {
        if let Some(model) = &self.model {
            if !self.backbone.as_os_str().is_empty() {
                return Err(Error::Config("give --model or --backbone, not both".into()));
            }
            if self.experts.is_some()
                || self.store_addr.is_some()
                || self.expert_mode != ExpertMode::Local
            {
                return Err(Error::Config(format!(
                    "--model {} runs the release's own experts: no --experts, --store-addr or --expert-mode",
                    model.display()
                )));
            }
            if !model.exists() {
                return Err(Error::Config(format!(
                    "--model {}: no such file or folder",
                    model.display()
                )));
            }
            return Ok(ModelSource::Release(model.clone()));
        }
        let experts = match (self.expert_mode, &self.experts, &self.store_addr) {
            (ExpertMode::Local, Some(dir), _) => StoreExperts::Local(dir.clone()),
            (ExpertMode::Local, None, _) => {
                return Err(Error::Config(
                    "expert mode local needs --experts STORE/experts".into(),
                ));
            }
            (ExpertMode::Fetch, _, Some(addr)) => StoreExperts::Fetch(addr.clone()),
            (ExpertMode::ComputeAtStore, _, Some(addr)) => {
                StoreExperts::ComputeAtStore(addr.clone())
            }
            (ExpertMode::Fetch | ExpertMode::ComputeAtStore, _, None) => {
                return Err(Error::Config(
                    "expert modes fetch and compute-at-store need --store-addr URL".into(),
                ));
            }
        };
        if !self.backbone.join("config.json").is_file() {
            return Err(Error::Config(format!(
                "{} has no config.json: --backbone takes a store's backbone/ folder",
                self.backbone.display()
            )));
        }
        Ok(ModelSource::Store(experts))
    }

    /// Requests generating at once: `max_concurrent`, at most
    /// `max_sessions` (each holds a full context's state, and the RAM plan
    /// holds `max_sessions` of them).
    pub fn generating(&self) -> usize {
        self.max_concurrent.min(self.max_sessions)
    }

    /// The checks of everything but where the model comes from.
    fn validate_serving(&self) -> Result<()> {
        if self.max_sessions == 0 || self.max_concurrent == 0 {
            return Err(Error::Config(
                "max_sessions and max_concurrent must be at least 1".into(),
            ));
        }
        if self.max_concurrent.saturating_add(self.max_queue) > tokio::sync::Semaphore::MAX_PERMITS
        {
            return Err(Error::Config(format!(
                "max_concurrent + max_queue must be at most {}",
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        if self
            .token
            .as_deref()
            .is_some_and(|t| t.is_empty() || t.chars().any(char::is_whitespace))
        {
            // An empty token would leave the check only "send `Bearer `";
            // whitespace cannot survive the header's parsing.
            return Err(Error::Config(
                "token must be non-empty and without whitespace".into(),
            ));
        }
        if let Some(bad) = self
            .model_name
            .iter()
            .find(|n| n.is_empty() || n.chars().any(char::is_control))
        {
            return Err(Error::Config(format!(
                "model name {bad:?} must be non-empty, without control characters"
            )));
        }
        if !self.listen.ip().is_loopback() && self.token.is_none() && !self.insecure {
            return Err(Error::Config(format!(
                "refusing to listen on {} without --token (or --insecure): the node would be open to the network",
                self.listen
            )));
        }
        Ok(())
    }
}

/// Sizes in a config file: a byte count or a string [`parse_size`] reads.
mod size {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }

    pub fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Size>::deserialize(d)? {
            None => Ok(None),
            Some(Size::Bytes(b)) => Ok(Some(b)),
            Some(Size::Text(t)) => super::parse_size(&t)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Parses a size like `24G`, `512M`, `1.5GiB` or a plain byte count.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| Error::Config(format!("size {s:?} is not a number with a unit")))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(Error::Config(format!(
                "size unit {other:?} in {s:?} (use K, M, G or T)"
            )));
        }
    };
    Ok((value * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_takes_sizes_as_text_and_refuses_unknown_keys() {
        let cfg: Config =
            toml::from_str("backbone = \"/b\"\nram_budget = \"24G\"\nexpert_cache = 1024\n")
                .unwrap();
        assert_eq!(cfg.ram_budget, Some(24 << 30));
        assert_eq!(cfg.expert_cache, Some(1024));
        assert_eq!(cfg.max_sessions, Config::default().max_sessions);
        let err = toml::from_str::<Config>("ram_budgett = 1\n").unwrap_err();
        assert!(err.to_string().contains("ram_budgett"), "{err}");
    }

    #[test]
    fn an_empty_or_spaced_token_is_refused_and_model_names_may_be_a_list() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let mut cfg = Config {
            backbone: dir.path().to_path_buf(),
            experts: Some(dir.path().to_path_buf()),
            listen: SocketAddr::from(([0, 0, 0, 0], 50052)),
            token: Some("t0k".into()),
            ..Config::default()
        };
        cfg.validate().unwrap();
        for bad in ["", "a b", " "] {
            cfg.token = Some(bad.into());
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains("token"), "{bad:?}: {err}");
            cfg.listen = SocketAddr::from(([127, 0, 0, 1], 50052));
            assert!(cfg.validate().is_err(), "{bad:?} on loopback");
            cfg.listen = SocketAddr::from(([0, 0, 0, 0], 50052));
        }
        let one: Config = toml::from_str("model_name = \"k2\"\n").unwrap();
        assert_eq!(one.model_name, ["k2"]);
        let many: Config = toml::from_str("model_name = [\"k2\", \"kimi\"]\n").unwrap();
        assert_eq!(many.model_name, ["k2", "kimi"]);
        cfg.token = Some("t0k".into());
        cfg.max_queue = usize::MAX;
        assert!(cfg.validate().is_err(), "a queue no semaphore can count");
        assert_eq!(Config::default().max_queue, 16);
        assert_eq!(Config::default().default_max_tokens, 1024);
    }

    #[test]
    fn validation_names_the_model_source_each_mode_needs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let store = Config {
            backbone: dir.path().to_path_buf(),
            ..Config::default()
        };
        let experts = dir.path().join("experts");
        let local = Config {
            experts: Some(experts.clone()),
            ..store.clone()
        };
        assert_eq!(
            local.validate().unwrap(),
            ModelSource::Store(StoreExperts::Local(experts))
        );
        for (mode, want) in [
            (ExpertMode::Fetch, StoreExperts::Fetch("http://s:1".into())),
            (
                ExpertMode::ComputeAtStore,
                StoreExperts::ComputeAtStore("http://s:1".into()),
            ),
        ] {
            let remote = Config {
                expert_mode: mode,
                store_addr: Some("http://s:1".into()),
                ..store.clone()
            };
            assert_eq!(remote.validate().unwrap(), ModelSource::Store(want));
            let no_addr = Config {
                expert_mode: mode,
                ..store.clone()
            };
            let err = no_addr.validate().unwrap_err().to_string();
            assert!(err.contains("--store-addr"), "{mode:?}: {err}");
        }
        let err = store.validate().unwrap_err().to_string();
        assert!(err.contains("--experts"), "{err}");
        let mut release = Config::default();
        release.set_model(dir.path());
        assert_eq!(
            release.validate().unwrap(),
            ModelSource::Release(dir.path().to_path_buf())
        );
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("24G").unwrap(), 24 << 30);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
    }
}
