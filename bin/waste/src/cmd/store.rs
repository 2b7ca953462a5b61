//! `waste store`: the expert store daemon over a store's `experts/` folder.
//! Configuration is defaults ← `--config` TOML file ← flags, validated
//! before binding (exit 64 when invalid). Prints the address it listens on;
//! SIGINT/SIGTERM drain in-flight calls (bounded by the grace period) and exit.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_store::Config;
use waste_store::config::{Direct, TlsConfig};

use crate::signal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's experts/ folder (complete on its own).
    #[arg(long)]
    experts: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port. Beyond loopback
    /// needs --token (or --insecure).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Bearer token every ExpertStore call must carry.
    #[arg(long, env = "WASTE_STORE_TOKEN")]
    token: Option<String>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    insecure: bool,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A TOML file with any store setting (see waste_store::Config); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Reads in flight.
    #[arg(long)]
    io_threads: Option<usize>,
    /// Bytes of read buffers alive at once, in MiB (the store's record memory bound).
    #[arg(long)]
    inflight_mib: Option<u64>,
    /// O_DIRECT: require | prefer | off.
    #[arg(long, value_parser = parse_direct)]
    direct: Option<Direct>,
}

fn parse_direct(s: &str) -> Result<Direct, String> {
    match s {
        "require" => Ok(Direct::Require),
        "prefer" => Ok(Direct::Prefer),
        "off" => Ok(Direct::Off),
        _ => Err(format!("{s:?}: expected require, prefer or off")),
    }
}

fn config(args: &Args) -> Result<Config> {
    let mut cfg = match &args.config {
        Some(p) => toml::from_str(&fs_err::read_to_string(p)?)
            .with_context(|| format!("parse {}", p.display()))?,
        None => Config::default(),
    };
    if let Some(e) = &args.experts {
        cfg.experts.clone_from(e);
    }
    if args.token.is_some() {
        cfg.token.clone_from(&args.token);
    }
    cfg.insecure |= args.insecure;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        cfg.tls = Some(TlsConfig {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    if let Some(t) = args.io_threads {
        cfg.io.threads = t;
    }
    if let Some(m) = args.inflight_mib {
        cfg.io.inflight_bytes = m.saturating_mul(1 << 20);
    }
    if let Some(d) = args.direct {
        cfg.io.direct = d;
    }
    Ok(cfg)
}

pub fn run(args: &Args) -> Result<()> {
    let checked = config(args).and_then(|cfg| {
        cfg.validate()?;
        cfg.check_listen(&args.listen)?;
        Ok(cfg)
    });
    let cfg = match checked {
        Ok(cfg) => cfg,
        Err(e) => {
            // A bad configuration is a usage error (EX_USAGE), before any bind.
            eprintln!("error: {e:#}");
            std::process::exit(64);
        }
    };
    tracing::info!(config = ?cfg, "store config");
    signal::runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("bind {}", args.listen))?;
        let addr = listener.local_addr()?;
        println!("waste store listening on {addr}");
        let shutdown = signal::shutdown_on_signal()?;
        let mut serving = tokio::spawn(waste_store::run(cfg, listener, shutdown.clone()));
        tokio::select! {
            done = &mut serving => return done?.context("serve"),
            () = shutdown.cancelled() => {}
        }
        match tokio::time::timeout(signal::GRACE, serving).await {
            Ok(done) => done?.context("serve")?,
            Err(_) => tracing::warn!(
                "in-flight calls did not finish within {:?}; exiting",
                signal::GRACE
            ),
        }
        Ok(())
    })
}
