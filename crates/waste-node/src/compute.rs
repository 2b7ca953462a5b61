//! The bridge from tokio to the forward pass: CPU work runs on a dedicated,
//! named rayon pool (`fwd-{i}`) and is awaited through a oneshot, so no tokio
//! worker ever blocks on a matrix product (STYLE 4.7). Its threads run at a
//! lower CPU priority than the IO threads.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct Compute {
    pool: Arc<rayon::ThreadPool>,
}

impl Compute {
    pub fn new(threads: Option<usize>) -> Result<Self> {
        // The forward pass gives way to the IO threads on shared cores
        // (waste_format::io::nice): a refusal only costs read depth.
        let mut b = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("fwd-{i}"))
            .start_handler(|_| {
                if let Err(e) = waste_format::io::give_way_to_io() {
                    tracing::debug!("forward thread keeps its priority: {e}");
                }
            });
        if let Some(n) = threads {
            b = b.num_threads(n);
        }
        let pool = b
            .build()
            .map_err(|e| Error::Config(format!("forward thread pool: {e}")))?;
        Ok(Self {
            pool: Arc::new(pool),
        })
    }

    /// Runs `f` on the pool and returns at once: work handed over from a
    /// callback that must not wait (an expert record built for a reader).
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        self.pool.spawn(f);
    }

    /// Runs `f` on the pool (its parallel iterators use the same pool) and
    /// waits for it without blocking the async runtime.
    pub async fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        self.start(f).await
    }

    /// Hands `f` to the pool now (not when first polled, as [`Self::run`]
    /// does) and returns its result's future: work started ahead of the
    /// await, with no task of the async runtime to carry it.
    pub fn start<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> impl std::future::Future<Output = R> {
        let (tx, rx) = oneshot::channel();
        self.pool.spawn(move || {
            // The receiver is gone only if the request was dropped: nothing to do.
            let _ = tx.send(f());
        });
        async move {
            rx.await
                .expect("the forward pool runs every job it accepts")
        }
    }
}
