//! The store's configuration: what it serves, who may call it, and the
//! limits that keep an untrusted client from growing its memory. The
//! binary layers defaults ← TOML file ← flags and calls [`Config::validate`]
//! before binding; [`Config::check_listen`] refuses an address beyond
//! loopback without a token (or an explicit `insecure`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use waste_format::io::{DirectMode, EngineConfig};

use crate::error::{Error, Result};

/// Largest `ExpertChunk.data` the protocol allows (1 MiB).
pub const MAX_CHUNK_BYTES: u32 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The store's `experts/` folder (complete on its own).
    pub experts: PathBuf,
    /// Where `waste store` listens (the library serves the listener it is given).
    pub listen: SocketAddr,
    /// Bearer token every ExpertStore call must carry (`authorization: Bearer T`).
    pub token: Option<String>,
    /// Allows a non-loopback address without a token.
    pub insecure: bool,
    /// Serve TLS with this certificate chain and key (PEM files).
    pub tls: Option<TlsConfig>,
    pub limits: Limits,
    pub io: IoConfig,
    /// Seconds between metrics log lines while requests arrive (0: never).
    pub metrics_log_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            experts: PathBuf::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            token: None,
            insecure: false,
            tls: None,
            limits: Limits::default(),
            io: IoConfig::default(),
            metrics_log_secs: 60,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Request limits, reported to clients by `Info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Ids per FetchExperts (default 256: a whole layer's top-k for a
    /// prefill batch of the largest families is far below).
    pub max_fetch_experts: u32,
    /// Token rows per ComputeExperts (default 256).
    pub max_compute_tokens: u32,
    /// Routes per ComputeExperts (default 4096 = 256 tokens x top-16).
    pub max_compute_routes: u32,
    /// Largest request message decoded, bytes (default 16 MiB: 256 rows of
    /// 7168 f32 plus routes). Never unbounded.
    pub max_message_bytes: u32,
    /// Largest chunk sent, bytes (default and maximum 1 MiB).
    pub max_chunk_bytes: u32,
    /// Requests served at once; beyond it RESOURCE_EXHAUSTED (default 64).
    pub max_concurrent_requests: u32,
    /// Of those, at most this many prefetches (default 16): they are shed first.
    pub max_concurrent_prefetches: u32,
    /// HTTP/2 streams per connection (default 128).
    pub max_concurrent_streams: u32,
    /// A PrefetchExperts guess older than this gives up its room to newer
    /// guesses of other streams, in milliseconds (default 5000): its
    /// generation was cancelled or its node went away.
    pub guess_ttl_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_fetch_experts: 256,
            max_compute_tokens: 256,
            max_compute_routes: 4096,
            max_message_bytes: 16 << 20,
            max_chunk_bytes: MAX_CHUNK_BYTES,
            max_concurrent_requests: 64,
            max_concurrent_prefetches: 16,
            max_concurrent_streams: 128,
            guess_ttl_ms: 5000,
        }
    }
}

/// How records are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IoConfig {
    /// Reads in flight (default 16).
    pub threads: usize,
    /// Bytes of read buffers alive at once, in flight or waiting to be sent
    /// (default 512 MiB): the bound on the store's record memory.
    pub inflight_bytes: u64,
    /// `require`, `prefer` (default: O_DIRECT where the file system allows it) or `off`.
    pub direct: Direct,
    /// Records longer than this are read in segments of it by all idle IO
    /// threads, so they complete (and stream) one after another; 0 reads
    /// each record with one `pread`. Default 2 MiB, one huge page and one
    /// device request, as the node reads: in-process 0.91-0.97 x raw
    /// O_DIRECT on K3 records against 0.83-0.92 x whole (docs/BENCH.md).
    pub segment_bytes: u64,
}

impl Default for IoConfig {
    fn default() -> Self {
        let e = EngineConfig::default();
        Self {
            threads: e.threads,
            inflight_bytes: e.inflight_bytes as u64,
            direct: Direct::Prefer,
            segment_bytes: waste_format::io::buffer::HUGE_PAGE as u64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direct {
    Require,
    Prefer,
    Off,
}

impl From<Direct> for DirectMode {
    fn from(d: Direct) -> Self {
        match d {
            Direct::Require => DirectMode::Require,
            Direct::Prefer => DirectMode::Prefer,
            Direct::Off => DirectMode::Off,
        }
    }
}

impl IoConfig {
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            threads: self.threads,
            inflight_bytes: usize::try_from(self.inflight_bytes).unwrap_or(usize::MAX),
            segment_bytes: usize::try_from(self.segment_bytes).unwrap_or(usize::MAX),
            ..EngineConfig::default()
        }
    }
}

impl Config {
    /// Checks every value before anything is opened or bound.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::Config { reason });
        let l = &self.limits;
        if self.experts.as_os_str().is_empty() {
            return bad("experts: the store's experts/ folder is required".into());
        }
        for (name, v) in [
            ("max_fetch_experts", l.max_fetch_experts),
            ("max_compute_tokens", l.max_compute_tokens),
            ("max_compute_routes", l.max_compute_routes),
            ("max_message_bytes", l.max_message_bytes),
            ("max_chunk_bytes", l.max_chunk_bytes),
            ("max_concurrent_requests", l.max_concurrent_requests),
            ("max_concurrent_prefetches", l.max_concurrent_prefetches),
            ("max_concurrent_streams", l.max_concurrent_streams),
        ] {
            if v == 0 {
                return bad(format!("limits.{name} must be positive"));
            }
        }
        if l.max_chunk_bytes > MAX_CHUNK_BYTES {
            return bad(format!(
                "limits.max_chunk_bytes {} exceeds the protocol's {MAX_CHUNK_BYTES}",
                l.max_chunk_bytes
            ));
        }
        if !(1..=1024).contains(&self.io.threads) {
            return bad(format!("io.threads {} is not in 1..=1024", self.io.threads));
        }
        if self.io.inflight_bytes < 1 << 20 {
            return bad(format!(
                "io.inflight_bytes {} is below 1 MiB",
                self.io.inflight_bytes
            ));
        }
        if self
            .token
            .as_deref()
            .is_some_and(|t| t.is_empty() || t.chars().any(char::is_whitespace))
        {
            return bad("token must be non-empty and without whitespace".into());
        }
        Ok(())
    }

    /// Loopback by default: any other address needs a token or `insecure`.
    pub fn check_listen(&self, addr: &SocketAddr) -> Result<()> {
        if addr.ip().is_loopback() || self.token.is_some() || self.insecure {
            return Ok(());
        }
        Err(Error::Config {
            reason: format!(
                "listening on {addr} (beyond loopback) needs --token, or --insecure to serve anyone who can reach it"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_once_the_folder_is_given_and_limits_are_checked() {
        let mut cfg = Config::default();
        assert!(cfg.validate().is_err());
        cfg.experts = "x".into();
        cfg.validate().unwrap();
        cfg.limits.max_chunk_bytes = (1 << 20) + 1;
        assert!(cfg.validate().is_err());
        cfg.limits.max_chunk_bytes = 0;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn non_loopback_needs_a_token_or_insecure() {
        let mut cfg = Config::default();
        let lan: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        cfg.check_listen(&"127.0.0.1:0".parse().unwrap()).unwrap();
        cfg.check_listen(&"[::1]:0".parse().unwrap()).unwrap();
        assert!(cfg.check_listen(&lan).is_err());
        cfg.token = Some("t".into());
        cfg.check_listen(&lan).unwrap();
        cfg.token = None;
        cfg.insecure = true;
        cfg.check_listen(&lan).unwrap();
    }

    /// An empty token would make `Bearer ` the password.
    #[test]
    fn an_empty_or_spaced_token_is_refused() {
        let mut cfg = Config {
            experts: "x".into(),
            ..Config::default()
        };
        for bad in ["", " ", "a b"] {
            cfg.token = Some(bad.into());
            assert!(cfg.validate().is_err(), "{bad:?}");
        }
        cfg.token = Some("t".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<Config>(r#"{"experts": "x", "limitz": {}}"#);
        assert!(e.is_err());
        let c: Config =
            serde_json::from_str(r#"{"experts": "x", "io": {"direct": "off"}}"#).unwrap();
        assert_eq!(c.io.direct, Direct::Off);
        assert_eq!(c.limits, Limits::default());
    }
}
