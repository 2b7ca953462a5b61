//! Loading a backbone with progress, since a large one takes minutes: the
//! bytes of tensors as held in RAM against the plan's total, drawn as a bar
//! with rate and time left when stderr is a terminal, and logged every ten
//! seconds for a daemon's log.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use waste_convert::convert::progress::{Progress, Unit};
use waste_kernels::{RowSource, Tensor, TensorSource, TensorSourceError};

/// Time between log lines.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// A [`TensorSource`] that counts what it hands out.
pub struct LoadProgress<'a> {
    inner: &'a dyn TensorSource,
    total: u64,
    done: AtomicU64,
    bar: Progress,
    start: Instant,
    last_log: Mutex<Instant>,
}

impl std::fmt::Debug for LoadProgress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadProgress")
            .field("total", &self.total)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'a> LoadProgress<'a> {
    /// Counts loads from `inner` against `total` bytes.
    pub fn new(inner: &'a dyn TensorSource, total: u64) -> Self {
        let now = Instant::now();
        Self {
            inner,
            total,
            done: AtomicU64::new(0),
            bar: Progress::new(total, Unit::Bytes, "backbone"),
            start: now,
            last_log: Mutex::new(now),
        }
    }

    /// Removes the bar and logs the load's size, time and rate.
    pub fn finish(self) {
        self.bar.clear();
        let done = self.done.load(Ordering::Relaxed);
        let secs = self.start.elapsed().as_secs_f64();
        tracing::info!(
            "backbone loaded: {:.2} GB in {secs:.1} s ({:.2} GB/s)",
            done as f64 / 1e9,
            done as f64 / 1e9 / secs.max(1e-9)
        );
    }
}

/// `done` of `total` bytes after `secs` seconds, in words.
pub fn describe(done: u64, total: u64, secs: f64) -> String {
    let rate = done as f64 / secs.max(1e-9);
    let left = total.saturating_sub(done) as f64 / rate.max(1.0);
    format!(
        "{:.2} of {:.2} GB ({:.0} %), {:.2} GB/s, about {left:.0} s left",
        done as f64 / 1e9,
        total as f64 / 1e9,
        100.0 * done as f64 / total.max(1) as f64,
        rate / 1e9
    )
}

impl TensorSource for LoadProgress<'_> {
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(name)
    }

    fn load(&self, name: &str) -> Result<Tensor, TensorSourceError> {
        let t = self.inner.load(name)?;
        self.add(t.size_bytes() as u64);
        Ok(t)
    }

    /// Rows read on demand count as their cache, which the plan counts.
    fn rows(&self, name: &str) -> Option<Result<Box<dyn RowSource>, TensorSourceError>> {
        let rows = self.inner.rows(name)?;
        if let Ok(r) = &rows {
            self.add(r.resident_bytes() as u64);
        }
        Some(rows)
    }
}

impl LoadProgress<'_> {
    fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        self.bar.set(done, self.total.max(done));
        let mut last = self
            .last_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.elapsed() >= LOG_EVERY {
            *last = Instant::now();
            let secs = self.start.elapsed().as_secs_f64();
            tracing::info!("loading the backbone: {}", describe(done, self.total, secs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn progress_reads_as_done_rate_and_time_left() {
        // 1 GB of 4 in 2 s: 0.5 GB/s, 6 s for the other 3 GB.
        assert_eq!(
            describe(1_000_000_000, 4_000_000_000, 2.0),
            "1.00 of 4.00 GB (25 %), 0.50 GB/s, about 6 s left"
        );
    }
}
