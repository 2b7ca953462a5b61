//! `waste store`: the expert store daemon over a store's `experts/` folder.
//! Configuration is defaults ← `--config` TOML file ← `WASTE_STORE_*`
//! environment ← flags, validated before binding (exit 64 when invalid);
//! `--print-config` shows the result. Prints the address it listens on;
//! SIGINT/SIGTERM drain in-flight calls (bounded by the grace period) and exit.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use waste_store::Config;
use waste_store::config::{Direct, TlsConfig};

use crate::daemon;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's experts/ folder (complete on its own).
    #[arg(long, env = "WASTE_STORE_EXPERTS")]
    experts: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port. Beyond loopback
    /// needs --token (or --insecure) [default: 127.0.0.1:50051].
    #[arg(long, env = "WASTE_STORE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Bearer token every ExpertStore call must carry.
    #[arg(long, env = "WASTE_STORE_TOKEN")]
    token: Option<String>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    insecure: bool,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "WASTE_STORE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, env = "WASTE_STORE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A TOML file with any store setting (the keys of waste_store::Config); flags and environment override it.
    #[arg(long, env = "WASTE_STORE_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// Reads in flight.
    #[arg(long, env = "WASTE_STORE_IO_THREADS")]
    io_threads: Option<usize>,
    /// Bytes of read buffers alive at once, in MiB (the store's record memory bound).
    #[arg(long, env = "WASTE_STORE_INFLIGHT_MIB")]
    inflight_mib: Option<u64>,
    /// O_DIRECT: require | prefer | off.
    #[arg(long, env = "WASTE_STORE_DIRECT", value_parser = parse_direct)]
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
    let mut cfg: Config = daemon::file_config(args.config.as_deref())?;
    if let Some(l) = args.listen {
        cfg.listen = l;
    }
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
        cfg.check_listen(&cfg.listen)?;
        Ok(cfg)
    });
    let cfg = match checked {
        Ok(cfg) => cfg,
        // A bad configuration is a usage error (EX_USAGE), before any bind.
        Err(e) => daemon::usage_error(&e),
    };
    if args.print_config {
        return daemon::print_config(&cfg);
    }
    let mut logged = cfg.clone();
    logged.token = logged.token.as_ref().map(|_| "<set>".into());
    daemon::log_config("store", &logged);
    let listen = cfg.listen;
    daemon::serve("store", listen, async move {
        Ok(move |listener, shutdown| waste_store::run(cfg, listener, shutdown))
    })
}
