//! This process's memory as the kernel counts it (`/proc/self/status`), and
//! a sampler of its peak anonymous RSS: the figure a streaming conversion
//! is judged by (file-backed pages of the memory-mapped source are page
//! cache, reclaimable, and not counted). Linux only; elsewhere it reads 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A `kB` field of `/proc/self/status` (`RssAnon`, `VmHWM`, ...) in bytes.
pub fn status_bytes(field: &str) -> Option<u64> {
    let text = fs_err::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:")))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Samples `RssAnon` every 50 ms on a named thread until stopped.
#[derive(Debug)]
pub struct PeakRss {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl PeakRss {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(status_bytes("RssAnon").unwrap_or(0)));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if let Some(v) = status_bytes("RssAnon") {
                        p.fetch_max(v, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .ok();
        Self { stop, peak, thread }
    }

    /// Stops sampling; returns the peak `RssAnon` in bytes.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}
