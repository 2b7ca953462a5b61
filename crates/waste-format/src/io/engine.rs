//! The read engine: a queue of positioned reads served by a pool of named
//! `io-{i}` threads, each doing one blocking `pread` at a time, so
//! `threads` reads are in flight. Jobs are queued in disk-offset order per
//! batch, demand reads before prefetch reads, and a read starts only once
//! the [`BufferPool`] grants its buffer, which bounds the bytes in flight.
//!
//! Chosen over io_uring by measurement (see `waste bench store`'s raw
//! figures and the store's README line): with expert-sized reads (megabytes)
//! the kernel splits each read into many device requests, so a handful of
//! threads already saturate the device, and a blocked thread costs no CPU.
//! Sync and threaded by design: no async runtime here; the store bridges
//! with callbacks into its channels.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::buffer::{BufferPool, PooledBuf};
use super::direct::DirectFile;
use crate::error::Result;

/// How the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Reads in flight (IO threads). 16 saturates NVMe with expert-sized reads.
    pub threads: usize,
    /// Bound on the bytes of buffers alive at once: reads in flight plus
    /// records read but not yet released by their consumer.
    pub inflight_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            threads: 16,
            inflight_bytes: 512 << 20,
        }
    }
}

/// Which queue a read waits in: demand reads are always issued first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    #[default]
    Demand,
    Prefetch,
}

/// Called on an IO thread with the filled buffer (or the error) of one read.
pub type Done = Box<dyn FnOnce(Result<PooledBuf>) + Send>;

/// One positioned read: `len` bytes at `offset` (aligned) of `file`.
pub struct ReadJob {
    pub file: Arc<DirectFile>,
    pub offset: u64,
    pub len: usize,
    /// When set before the read starts, the read is skipped and `done`
    /// gets an `Interrupted` error (its consumer went away).
    pub cancel: Option<Arc<AtomicBool>>,
    pub done: Done,
}

impl std::fmt::Debug for ReadJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadJob")
            .field("file", self.file.path())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Counters of the engine, readable at any time.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Reads issued to the kernel and not yet returned.
    pub in_flight: AtomicU64,
    /// Reads waiting in the queues.
    pub queued: AtomicU64,
    /// Reads completed (successfully or not).
    pub reads: AtomicU64,
    /// Bytes delivered by completed reads.
    pub bytes: AtomicU64,
}

#[derive(Debug, Default)]
struct Queues {
    demand: VecDeque<ReadJob>,
    prefetch: VecDeque<ReadJob>,
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    queues: Mutex<Queues>,
    ready: Condvar,
    pool: BufferPool,
    stats: EngineStats,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        // The queues stay consistent across a panic (each update is one
        // push or pop), so a poisoned lock is still usable.
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The read engine. Dropping it stops the threads after the queued reads.
#[derive(Debug)]
pub struct IoEngine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl IoEngine {
    pub fn new(cfg: EngineConfig) -> Self {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues::default()),
            ready: Condvar::new(),
            pool: BufferPool::new(cfg.inflight_bytes),
            stats: EngineStats::default(),
        });
        let threads = cfg.threads.max(1);
        let workers = (0..threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("io-{i}"))
                    .spawn(move || worker(&shared))
                    .expect("spawn an IO thread")
            })
            .collect();
        Self {
            shared,
            workers,
            threads,
        }
    }

    /// Reads in flight at most.
    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn pool(&self) -> &BufferPool {
        &self.shared.pool
    }

    pub fn stats(&self) -> &EngineStats {
        &self.shared.stats
    }

    /// Queues a batch, sorted by file and offset so the device sees it in
    /// disk order. Each job's `done` runs on an IO thread when it finishes.
    pub fn submit(&self, mut jobs: Vec<ReadJob>, priority: Priority) {
        jobs.sort_by(|a, b| (a.file.path(), a.offset).cmp(&(b.file.path(), b.offset)));
        let n = jobs.len() as u64;
        let mut q = self.shared.lock();
        let queue = match priority {
            Priority::Demand => &mut q.demand,
            Priority::Prefetch => &mut q.prefetch,
        };
        queue.extend(jobs);
        drop(q);
        self.shared.stats.queued.fetch_add(n, Ordering::Relaxed);
        self.shared.ready.notify_all();
    }
}

impl Drop for IoEngine {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
        for w in self.workers.drain(..) {
            // A worker that panicked has already reported it; nothing to add.
            let _ = w.join();
        }
    }
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut q = shared.lock();
            loop {
                if let Some(job) = q.demand.pop_front().or_else(|| q.prefetch.pop_front()) {
                    break job;
                }
                if q.closed {
                    return;
                }
                q = shared
                    .ready
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let stats = &shared.stats;
        stats.queued.fetch_sub(1, Ordering::Relaxed);
        if job
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            let e = std::io::Error::new(std::io::ErrorKind::Interrupted, "read cancelled");
            (job.done)(Err(crate::error::io(job.file.path().to_path_buf())(e)));
            continue;
        }
        // Backpressure: wait here, before the read, for the bytes to hold it.
        let mut buf = shared.pool.acquire(job.len);
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = job.file.read_into(job.offset, job.len, &mut buf);
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        stats.reads.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        (job.done)(result.map(|()| buf));
    }
}
