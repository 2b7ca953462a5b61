//! `waste node`: the compute node daemon (gRPC and the OpenAI-compatible
//! HTTP API on one port). Configuration is defaults ← `--config` TOML file ←
//! `WASTE_NODE_*` environment ← flags, validated before binding (exit 64
//! when invalid); `--print-config` shows the result. Prints its RAM plan and
//! the address it listens on; SIGINT/SIGTERM drain in-flight requests.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_node::{Config, ExpertMode, Node, parse_size};

use crate::daemon;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A TOML file with any node setting (the keys of waste_node::Config); flags and environment override it.
    #[arg(long, env = "WASTE_NODE_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// A store's backbone/ folder (config, tokenizer, weights).
    #[arg(long, env = "WASTE_NODE_BACKBONE", conflicts_with = "model")]
    backbone: Option<PathBuf>,
    /// What to run instead of --backbone/--experts: a store (its folder), or
    /// a release straight from its files, a GGUF file or a Hugging Face folder
    /// (experts built from them as they are needed, then cached).
    #[arg(long, env = "WASTE_NODE_MODEL")]
    model: Option<PathBuf>,
    /// A store's experts/ folder, read directly (expert mode local).
    #[arg(long, env = "WASTE_NODE_EXPERTS")]
    experts: Option<PathBuf>,
    /// The expert store, e.g. http://10.0.0.2:50051 (expert modes fetch, compute-at-store).
    #[arg(long, env = "WASTE_NODE_STORE_ADDR")]
    store_addr: Option<String>,
    /// Bearer token the store requires.
    #[arg(long, env = "WASTE_STORE_TOKEN")]
    store_token: Option<String>,
    /// CA certificate (PEM) of a TLS store.
    #[arg(long, env = "WASTE_NODE_STORE_CA")]
    store_ca: Option<PathBuf>,
    /// local | fetch | compute-at-store (default: local with experts, fetch with a store address).
    #[arg(long, env = "WASTE_NODE_EXPERT_MODE")]
    expert_mode: Option<ExpertMode>,
    /// RAM the node may use, e.g. 24G (default: 80 % of available memory, at
    /// most the cgroup's memory limit less 1/16 of it, at least 32 MiB).
    #[arg(long, env = "WASTE_NODE_RAM_BUDGET", value_parser = parse_size)]
    ram_budget: Option<u64>,
    /// Context size in tokens per session (default: the model's, at most 4096).
    #[arg(long, env = "WASTE_NODE_CTX_SIZE")]
    ctx_size: Option<usize>,
    /// Context states held at once, each planned at the full context: kept
    /// sessions and requests generating without one [default: 4].
    #[arg(long, env = "WASTE_NODE_MAX_SESSIONS")]
    max_sessions: Option<usize>,
    /// Requests generating at once (at most --max-sessions), more wait their
    /// turn [default: 2].
    #[arg(long, env = "WASTE_NODE_MAX_CONCURRENT")]
    max_concurrent: Option<usize>,
    /// Requests that may wait for a slot beyond --max-concurrent; more are refused
    /// (RESOURCE_EXHAUSTED, HTTP 429 with Retry-After) [default: 16].
    #[arg(long, env = "WASTE_NODE_MAX_QUEUE")]
    max_queue: Option<usize>,
    /// Tokens to generate when a request gives no max_tokens (or 0); 0: until a stop
    /// or the end of the context [default: 1024].
    #[arg(long, env = "WASTE_NODE_DEFAULT_MAX_TOKENS")]
    default_max_tokens: Option<usize>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:50052].
    #[arg(long, env = "WASTE_NODE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Bearer token clients must send (required off loopback unless --insecure).
    #[arg(long, env = "WASTE_NODE_TOKEN")]
    token: Option<String>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    insecure: bool,
    /// Do not prefetch the next layer's likely experts.
    #[arg(long)]
    no_prefetch: bool,
    /// Fetch every record through gRPC, even from a store that offers its
    /// bulk channel (a plain TCP stream on the same port, cheaper per GB;
    /// the node checks at connect that it answers, else uses gRPC).
    #[arg(long)]
    no_store_bulk: bool,
    /// Cap the expert cache, e.g. 2G (0 disables it; default: what the RAM plan leaves).
    #[arg(long, env = "WASTE_NODE_EXPERT_CACHE", value_parser = parse_size)]
    expert_cache: Option<u64>,
    /// Threads of the forward pass (default: all cores).
    #[arg(long, env = "WASTE_NODE_THREADS")]
    threads: Option<usize>,
    /// The model's name in the APIs (default: the store's folder name); repeat for
    /// aliases: the first is the id, requests may use any.
    #[arg(long, env = "WASTE_NODE_MODEL_NAME")]
    model_name: Vec<String>,
    /// Seconds a request retries a lost expert store before failing with UNAVAILABLE [default: 60].
    #[arg(long, env = "WASTE_NODE_STORE_RECONNECT_SECS")]
    store_reconnect_secs: Option<u64>,
    /// Seconds to wait at start for the expert cache's warm-up reads before
    /// listening (0: listen at once) [default: 60].
    #[arg(long, env = "WASTE_NODE_WARM_WAIT_SECS")]
    warm_wait_secs: Option<u64>,
    /// Skip checking the backbone shards against their recorded checksums at load.
    #[arg(long)]
    no_verify_backbone: bool,
    /// Multiply the backbone's q8 matrices and a GGUF's quantized ones
    /// exactly in f32 instead of llama.cpp's int8 arithmetic: no activation
    /// rounding, slower decode.
    #[arg(long)]
    exact_q8: bool,
    /// The attention cache's value type: f32 (exact) or f16 (half the bytes,
    /// as llama.cpp's default) [default: f32].
    #[arg(long, env = "WASTE_NODE_CACHE_TYPE")]
    cache_type: Option<waste_model::cache::CacheType>,
}

/// Flags (and their environment variables) over the file.
fn config(a: &Args) -> Result<Config> {
    let mut c: Config = daemon::file_config(a.config.as_deref())?;
    if let Some(b) = &a.backbone {
        c.backbone.clone_from(b);
    }
    // From the flag or the config file alike: a store's folder is split
    // into its backbone/ and experts/, anything else runs as a release.
    if let Some(m) = a.model.clone().or(c.model.take()) {
        c.set_model(&m);
    }
    c.experts = a.experts.clone().or(c.experts.take());
    c.store_addr = a.store_addr.clone().or(c.store_addr.take());
    c.store_token = a.store_token.clone().or(c.store_token.take());
    c.store_ca = a.store_ca.clone().or(c.store_ca.take());
    c.token = a.token.clone().or(c.token.take());
    if !a.model_name.is_empty() {
        c.model_name.clone_from(&a.model_name);
    }
    c.ram_budget = a.ram_budget.or(c.ram_budget);
    c.ctx_size = a.ctx_size.or(c.ctx_size);
    c.expert_cache = a.expert_cache.or(c.expert_cache);
    c.threads = a.threads.or(c.threads);
    c.max_sessions = a.max_sessions.unwrap_or(c.max_sessions);
    c.max_concurrent = a.max_concurrent.unwrap_or(c.max_concurrent);
    c.max_queue = a.max_queue.unwrap_or(c.max_queue);
    c.default_max_tokens = a.default_max_tokens.unwrap_or(c.default_max_tokens);
    c.listen = a.listen.unwrap_or(c.listen);
    c.insecure |= a.insecure;
    c.prefetch &= !a.no_prefetch;
    c.store_bulk &= !a.no_store_bulk;
    c.verify_backbone &= !a.no_verify_backbone;
    c.exact_q8 |= a.exact_q8;
    c.cache_type = a.cache_type.unwrap_or(c.cache_type);
    c.store_reconnect_secs = a.store_reconnect_secs.unwrap_or(c.store_reconnect_secs);
    c.warm_wait_secs = a.warm_wait_secs.unwrap_or(c.warm_wait_secs);
    // Without --expert-mode, a store address alone means fetch.
    c.expert_mode = match a.expert_mode {
        Some(m) => m,
        None if a.experts.is_some() => ExpertMode::Local,
        None if c.experts.is_none()
            && c.store_addr.is_some()
            && c.expert_mode == ExpertMode::Local =>
        {
            ExpertMode::Fetch
        }
        None => c.expert_mode,
    };
    if c.backbone.as_os_str().is_empty() && c.model.is_none() {
        anyhow::bail!(
            "--backbone STORE/backbone or --model (a store, a GGUF file or a Hugging Face folder) is required (or `backbone`/`model` in the config file)"
        );
    }
    Ok(c)
}

pub fn run(args: &Args) -> Result<()> {
    let cfg = match config(args).and_then(|c| c.validate().map(|_| c).map_err(Into::into)) {
        Ok(c) => c,
        Err(e) => daemon::usage_error(&e),
    };
    if args.print_config {
        return daemon::print_config(&cfg);
    }
    daemon::log_config("node", &redacted(&cfg));
    daemon::serve("node", cfg.listen, async move {
        let warm_wait = std::time::Duration::from_secs(cfg.warm_wait_secs);
        let node = Node::load(cfg).await.context("start the node")?;
        // A first request would otherwise pay the warm-up's reads (2.8-3.2 x
        // the steady time, docs/BENCH.md).
        if !warm_wait.is_zero() {
            node.wait_warm(warm_wait).await;
        }
        Ok(move |listener, shutdown| waste_node::serve(node, listener, shutdown))
    })
}

/// The config as logged: tokens hidden.
fn redacted(c: &Config) -> Config {
    let hide = |t: &Option<String>| t.as_ref().map(|_| "<set>".to_string());
    Config {
        token: hide(&c.token),
        store_token: hide(&c.store_token),
        ..c.clone()
    }
}
