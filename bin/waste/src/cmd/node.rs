//! `waste node`: the compute node daemon. Prints its RAM plan and the
//! address it listens on; SIGINT/SIGTERM drain in-flight requests and exit.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_node::{Config, ExpertMode, Node, parse_size};

use crate::signal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A store's backbone/ folder (config, tokenizer, weights).
    #[arg(long)]
    backbone: PathBuf,
    /// A store's experts/ folder, read directly (expert mode local).
    #[arg(
        long,
        conflicts_with = "store_addr",
        required_unless_present = "store_addr"
    )]
    experts: Option<PathBuf>,
    /// The expert store, e.g. http://10.0.0.2:50051 (expert modes fetch, compute-at-store).
    #[arg(long)]
    store_addr: Option<String>,
    /// Bearer token the store requires.
    #[arg(long, env = "WASTE_STORE_TOKEN")]
    store_token: Option<String>,
    /// CA certificate (PEM) of a TLS store.
    #[arg(long)]
    store_ca: Option<PathBuf>,
    /// local | fetch | compute-at-store (default: local with --experts, fetch with --store-addr).
    #[arg(long)]
    expert_mode: Option<ExpertMode>,
    /// RAM the node may use, e.g. 24G (default: 80 % of available memory).
    #[arg(long, value_parser = parse_size)]
    ram_budget: Option<u64>,
    /// Context size in tokens per session (default: the model's, at most 4096).
    #[arg(long)]
    ctx_size: Option<usize>,
    /// Sessions kept at once.
    #[arg(long, default_value_t = 4)]
    max_sessions: usize,
    /// Requests generating at once (more wait their turn).
    #[arg(long, default_value_t = 2)]
    max_concurrent: usize,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:50052")]
    listen: SocketAddr,
    /// Bearer token clients must send (required off loopback unless --insecure).
    #[arg(long, env = "WASTE_NODE_TOKEN")]
    token: Option<String>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    insecure: bool,
    /// Do not prefetch the next layer's likely experts.
    #[arg(long)]
    no_prefetch: bool,
    /// Cap the expert cache, e.g. 2G (0 disables it; default: what the RAM plan leaves).
    #[arg(long, value_parser = parse_size)]
    expert_cache: Option<u64>,
    /// Threads of the forward pass (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: &Args) -> Result<()> {
    let cfg = Config {
        backbone: args.backbone.clone(),
        experts: args.experts.clone(),
        store_addr: args.store_addr.clone(),
        store_token: args.store_token.clone(),
        store_ca: args.store_ca.clone(),
        expert_mode: args.expert_mode.unwrap_or(if args.experts.is_some() {
            ExpertMode::Local
        } else {
            ExpertMode::Fetch
        }),
        ram_budget: args.ram_budget,
        ctx_size: args.ctx_size,
        max_sessions: args.max_sessions,
        max_concurrent: args.max_concurrent,
        listen: args.listen,
        token: args.token.clone(),
        insecure: args.insecure,
        prefetch: !args.no_prefetch,
        expert_cache: args.expert_cache,
        threads: args.threads,
    };
    cfg.validate()?;
    signal::runtime()?.block_on(async {
        let node = Node::load(cfg.clone()).await.context("start the node")?;
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("bind {}", cfg.listen))?;
        let addr = listener.local_addr()?;
        println!("waste node listening on {addr}");
        tracing::info!(%addr, mode = ?cfg.expert_mode, "node ready");
        let shutdown = signal::shutdown_on_signal()?;
        let mut serving = tokio::spawn(waste_node::serve(node, listener, shutdown.clone()));
        tokio::select! {
            done = &mut serving => return done?.context("serve"),
            () = shutdown.cancelled() => {}
        }
        match tokio::time::timeout(signal::GRACE, serving).await {
            Ok(done) => done?.context("serve")?,
            Err(_) => tracing::warn!(
                "in-flight requests did not finish within {:?}; exiting",
                signal::GRACE
            ),
        }
        Ok(())
    })
}
