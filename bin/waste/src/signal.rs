//! SIGINT / SIGTERM to a cancellation token, for the daemons' graceful
//! shutdown, and the bounded wait for their drain.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a daemon may drain in-flight calls after a signal.
pub const GRACE: Duration = Duration::from_secs(20);

/// Cancels the returned token on the first SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> anyhow::Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let t = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        t.cancel();
    });
    Ok(token)
}

/// A multi-threaded runtime for one daemon or client command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("io")
        .build()?)
}
