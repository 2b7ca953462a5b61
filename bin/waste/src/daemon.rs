//! What both daemon commands share: the configuration file (TOML; flags and
//! environment override it), `--print-config`, the usage-error exit (64,
//! before any port is bound), and serving on a bound listener until
//! SIGINT/SIGTERM, then draining within the grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::signal;

/// The settings of `path` over the defaults (no file: the defaults).
pub fn file_config<T: DeserializeOwned + Default>(path: Option<&Path>) -> Result<T> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text = fs_err::read_to_string(path)?;
    toml::from_str(&text).with_context(|| format!("config file {}", path.display()))
}

/// A configuration that cannot work: report it and exit with EX_USAGE.
pub fn usage_error(e: &anyhow::Error) -> ! {
    eprintln!("error: {e:#}");
    std::process::exit(64);
}

/// The effective configuration as a TOML file would give it.
pub fn print_config<T: Serialize>(cfg: &T) -> Result<()> {
    print!(
        "{}",
        toml::to_string_pretty(cfg).context("render the config as TOML")?
    );
    Ok(())
}

/// Logs the effective configuration as `key = value` lines (nested tables as
/// `table.key`), the way a TOML file would set it.
pub fn log_config<T: Serialize>(name: &str, cfg: &T) {
    match toml::Value::try_from(cfg) {
        Ok(value) => {
            let mut lines = Vec::new();
            flatten("", &value, &mut lines);
            for line in lines {
                tracing::info!("{name} config: {line}");
            }
        }
        Err(e) => tracing::warn!("cannot render the {name} config: {e}"),
    }
}

fn flatten(prefix: &str, value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        v => out.push(format!("{prefix} = {v}")),
    }
}

/// Runs `prepare` (loading what the daemon serves), then binds `addr`,
/// prints `waste NAME listening on ADDR` (scripts wait for this line, so it
/// comes once the daemon can answer), and serves with what `prepare` gave
/// until a signal, then waits for the drain.
pub fn serve<P, R, Fut, E>(name: &str, addr: SocketAddr, prepare: P) -> Result<()>
where
    P: Future<Output = Result<R>>,
    R: FnOnce(tokio::net::TcpListener, CancellationToken) -> Fut,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    signal::runtime()?.block_on(async {
        let serve = prepare.await?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("bind {addr}"))?;
        let bound = listener.local_addr()?;
        println!("waste {name} listening on {bound}");
        tracing::info!(addr = %bound, "{name} ready");
        let shutdown = signal::shutdown_on_signal()?;
        let mut serving = tokio::spawn(serve(listener, shutdown.clone()));
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
