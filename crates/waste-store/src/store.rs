//! The store's domain object: the opened `experts/` folder behind the IO
//! engine, the request limits and admission (overload and shutdown), and
//! the metrics. FetchExperts, ComputeExperts and PrefetchExperts are in
//! `fetch.rs`, `compute.rs` and `staging.rs`; none of this knows gRPC
//! beyond the `Bytes` it hands out.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use waste_format::ExpertsIndex;
use waste_format::completion::{self, Completeness};
use waste_format::experts::ExpertActivation;
use waste_format::io::{Priority, RecordReader};
use waste_format::manifest::{MANIFEST, sha256_file};
use waste_kernels::Activation;

use crate::config::{Config, Limits};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::staging::Staging;

/// What a store serves and how; built once at start.
#[derive(Debug)]
pub struct Store {
    reader: RecordReader,
    limits: Limits,
    activation: Activation,
    manifest_hash: String,
    model_name: String,
    requests: Arc<Semaphore>,
    prefetches: Arc<Semaphore>,
    shutting_down: AtomicBool,
    metrics: Metrics,
    staging: Staging,
}

/// Admission of one request; released on drop.
#[derive(Debug)]
pub struct Permit {
    _request: OwnedSemaphorePermit,
    _prefetch: Option<OwnedSemaphorePermit>,
}

impl Store {
    /// Opens and checks the experts folder (blocking: reads every header).
    pub fn open(cfg: &Config) -> Result<Self> {
        cfg.validate()?;
        if completion::check_experts(&cfg.experts)? == Completeness::Unmarked {
            tracing::warn!(
                experts = %cfg.experts.display(),
                "no {} (a store written before completion markers): serving it since its index is complete",
                completion::COMPLETE
            );
        }
        let reader = RecordReader::open(&cfg.experts, cfg.io.direct.into(), cfg.io.engine())?;
        let activation = match reader.experts().index().activation {
            ExpertActivation::Silu => Activation::Silu,
            ExpertActivation::Situ { beta, linear_beta } => Activation::Situ { beta, linear_beta },
        };
        let (manifest_hash, model_name) = identity(&cfg.experts)?;
        let l = cfg.limits.clone();
        Ok(Self {
            reader,
            activation,
            manifest_hash,
            model_name,
            requests: Arc::new(Semaphore::new(l.max_concurrent_requests as usize)),
            prefetches: Arc::new(Semaphore::new(l.max_concurrent_prefetches as usize)),
            limits: l,
            shutting_down: AtomicBool::new(false),
            metrics: Metrics::default(),
            staging: Staging::default(),
        })
    }

    pub fn reader(&self) -> &RecordReader {
        &self.reader
    }

    pub fn index(&self) -> &ExpertsIndex {
        self.reader.experts().index()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// The store's identity: sha256 of its `experts/index.json`.
    pub fn manifest_hash(&self) -> &str {
        &self.manifest_hash
    }

    /// Refuses a request that expects another store (empty: not checked).
    pub fn check_identity(&self, expected: &str) -> Result<()> {
        if expected.is_empty() || expected == self.manifest_hash {
            return Ok(());
        }
        self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
        Err(Error::WrongStore {
            expected: expected.to_string(),
            found: self.manifest_hash.clone(),
        })
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The records of each stream's PrefetchExperts guess.
    pub(crate) fn staging(&self) -> &Staging {
        &self.staging
    }

    /// True when every layer file is read with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.reader.is_direct()
    }

    /// New requests get UNAVAILABLE from now on; in-flight ones finish.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Admits a request or refuses it (shutting down, overloaded). Prefetches
    /// have their own smaller budget, so they are shed before demand reads.
    pub fn admit(&self, priority: Priority) -> Result<Permit> {
        let refuse = |e: Error| {
            self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            Err(e)
        };
        if self.shutting_down.load(Ordering::Relaxed) {
            return refuse(Error::ShuttingDown);
        }
        let overloaded = |what: &str| Error::Overloaded {
            what: what.to_string(),
            retry_after_secs: 1,
        };
        let prefetch = match priority {
            Priority::Demand => None,
            Priority::Prefetch => match Arc::clone(&self.prefetches).try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => return refuse(overloaded("too many prefetches in flight")),
            },
        };
        match Arc::clone(&self.requests).try_acquire_owned() {
            Ok(r) => Ok(Permit {
                _request: r,
                _prefetch: prefetch,
            }),
            Err(_) => refuse(overloaded("too many requests in flight")),
        }
    }

    /// Counts a request refused as bad (after admission).
    pub(crate) fn count_outcome<T>(&self, r: &Result<T>) {
        if let Err(e) = r {
            self.count_corrupt(e);
            let c = match e {
                Error::BadRequest { .. }
                | Error::Overloaded { .. }
                | Error::ShuttingDown
                | Error::WrongStore { .. } => &self.metrics.rejected,
                _ => &self.metrics.failed,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Store {
    /// Counts a record that failed its checksum (the error stays the caller's).
    pub(crate) fn count_corrupt(&self, e: &Error) {
        if matches!(e, Error::ChecksumMismatch { .. }) {
            self.metrics.corrupt_records.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The identity a node compares, the sha256 of `experts/index.json` (the
/// value its backbone recorded at conversion, whether or not a manifest
/// sits beside `experts/`), and the model name: the last component of the
/// source path in the manifest beside `experts/`, if any (a client never
/// sees a server path).
fn identity(experts: &Path) -> Result<(String, String)> {
    let hash = sha256_file(&experts.join(waste_format::experts::INDEX))?;
    let manifest = experts.parent().map(|p| p.join(MANIFEST));
    let name = match manifest.filter(|m| m.is_file()) {
        Some(m) => {
            let bytes = fs_err::read(&m).map_err(|source| Error::Io {
                path: m.clone(),
                source,
            })?;
            let source = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["source"]["path"].as_str().map(str::to_string))
                .unwrap_or_default();
            last_component(&source)
        }
        None => String::new(),
    };
    Ok((hash, name))
}

/// The last component of a source path (`/models/Qwen3-30B-A3B/` →
/// `Qwen3-30B-A3B`), at most 256 characters.
fn last_component(source: &str) -> String {
    let name = source
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    name.chars().take(256).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_name_is_the_source_folder_not_its_path() {
        assert_eq!(last_component("/models/Qwen3-30B-A3B/"), "Qwen3-30B-A3B");
        assert_eq!(last_component("/models/x.gguf"), "x.gguf");
        assert_eq!(last_component("synth:qwen3:seed=1"), "synth:qwen3:seed=1");
        assert_eq!(last_component(""), "");
    }

    #[test]
    fn the_identity_is_the_index_hash_with_or_without_a_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let experts = tmp.path().join("experts");
        fs_err::create_dir_all(&experts).unwrap();
        ExpertsIndex::new("t", "q3", 1, 2).save(&experts).unwrap();
        let alone = identity(&experts).unwrap();
        assert_eq!(alone.0, sha256_file(&experts.join("index.json")).unwrap());
        assert_eq!(alone.1, "");
        let manifest = serde_json::json!({"source": {"path": "/secret/models/Tiny-MoE"}});
        fs_err::write(tmp.path().join(MANIFEST), manifest.to_string()).unwrap();
        let beside = identity(&experts).unwrap();
        assert_eq!(beside.0, alone.0);
        assert_eq!(beside.1, "Tiny-MoE");
    }
}
