//! The read engine: a queue of positioned reads served by a pool of named
//! `io-{i}` threads, each doing one blocking `pread` at a time, so
//! `threads` reads are in flight. Demand batches are queued in disk-offset
//! order, guesses most likely first, demand before prefetch, and a read
//! starts only once the [`BufferPool`] grants its buffer, which bounds the
//! bytes in flight.
//! Prefetch reads start only while no demand read waits (a thread that
//! finds no demand to take may start one beside demand still running), and
//! at most `prefetch_reads` of them at once: a guess then uses disk time
//! that demand left idle, and guesses not read yet can be promoted or
//! withdrawn ([`IoEngine::settle_prefetch`]) once the real choice is known.
//!
//! Optionally (`segment_bytes` > 0) a longer record is read as segments by
//! every idle thread at once, so the records of a batch complete one after
//! another rather than all together at the end (the node computes expert j
//! while j+1 is read). Segments are also where demand preempts a guess: a
//! started prefetch record's remaining segments wait behind every demand
//! read, so demand that arrives mid-prefetch waits for the segments in
//! flight, not for whole records. The engine's default is whole reads (the
//! store streams records as they complete anyway); the node's local mode
//! sets segments (docs/BENCH.md has the measurements).
//!
//! A pread pool rather than io_uring: with expert-sized reads (megabytes)
//! each read is already many device requests, a blocked thread costs no
//! CPU, and `waste bench store` measures this engine against plain QD1/QD16
//! preads of the same files in the same run; io_uring (qdrant's choice)
//! would save syscalls and threads, not device time, and is not built.
//! Sync and threaded by design: no async runtime here; the store bridges
//! with callbacks into its channels.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::buffer::{BufferPool, PooledBuf};
use super::direct::DirectFile;
use crate::align_up;
use crate::error::Result;

/// How the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Reads in flight (IO threads). 16 saturates NVMe with expert-sized reads.
    pub threads: usize,
    /// Bound on the bytes of buffers alive at once: reads in flight plus
    /// records read but not yet released by their consumer.
    pub inflight_bytes: usize,
    /// Records longer than this are read as segments of this size by all
    /// idle threads at once, so records complete one after another (the
    /// first can be sent while the next are read) instead of all together
    /// at the end of a batch. 0 (the default) reads every record with one `pread`.
    pub segment_bytes: usize,
    /// Prefetch reads in flight at most (at least 1).
    pub prefetch_reads: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            threads: 16,
            inflight_bytes: 512 << 20,
            segment_bytes: 0,
            prefetch_reads: 2,
        }
    }
}

/// What [`IoEngine::settle_prefetch`] does with one queued prefetch read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Leave it in the prefetch queue.
    Keep,
    /// Move it to the back of the demand queue: it is needed now.
    Promote,
    /// Take it out of the queue; it is handed back to the caller unread.
    Withdraw,
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
    /// The submitter's name for the read (the engine never looks at it):
    /// lets [`IoEngine::settle_prefetch`] decide per job.
    pub tag: u64,
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
            .field("tag", &self.tag)
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
    /// Segments of demand records already started: served first, so a
    /// started record completes before the next one begins.
    demand_segments: VecDeque<Segment>,
    demand: VecDeque<ReadJob>,
    /// Segments of prefetch records already started: served before new
    /// prefetch records, after all demand.
    prefetch_segments: VecDeque<Segment>,
    prefetch: VecDeque<ReadJob>,
    /// Prefetch reads (records or segments) running.
    prefetching: usize,
    closed: bool,
}

impl Queues {
    /// [`IoEngine::settle_prefetch`] on the queues: the tags withdrawn,
    /// how many of them were not started yet, and whether anything was
    /// promoted.
    fn settle_prefetch(&mut self, mut decide: impl FnMut(u64) -> Settle) -> Settled {
        let mut out = Settled::default();
        for seg in std::mem::take(&mut self.prefetch_segments) {
            match decide(seg.rec.tag) {
                Settle::Keep => self.prefetch_segments.push_back(seg),
                Settle::Promote => {
                    self.demand_segments.push_back(seg);
                    out.promoted = true;
                }
                // Its `done` goes (once, with the first of its queued
                // segments): the segments running finish into the buffer,
                // which returns to the pool when the last one lets go.
                Settle::Withdraw => {
                    if lock(&seg.rec.done).take().is_some() {
                        out.withdrawn.push(seg.rec.tag);
                    }
                }
            }
        }
        for job in std::mem::take(&mut self.prefetch) {
            match decide(job.tag) {
                Settle::Keep => self.prefetch.push_back(job),
                Settle::Promote => {
                    self.demand.push_back(job);
                    out.promoted = true;
                }
                Settle::Withdraw => {
                    out.withdrawn.push(job.tag);
                    out.unstarted += 1;
                }
            }
        }
        out
    }

    fn demand_waits(&self) -> bool {
        !self.demand_segments.is_empty() || !self.demand.is_empty()
    }

    fn prefetch_waits(&self) -> bool {
        !self.prefetch_segments.is_empty() || !self.prefetch.is_empty()
    }
}

#[derive(Debug)]
struct Shared {
    queues: Mutex<Queues>,
    ready: Condvar,
    pool: BufferPool,
    stats: EngineStats,
    segment_bytes: usize,
    prefetch_reads: usize,
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
            segment_bytes: align_up(cfg.segment_bytes as u64) as usize,
            prefetch_reads: cfg.prefetch_reads.max(1),
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

    /// Queues a batch. Demand batches are sorted by file and offset, so the
    /// device sees them in disk order; prefetch batches keep the caller's
    /// order (a guess, most likely first: what is still queued when the
    /// guess is settled is then its least likely part). Each job's `done`
    /// runs on an IO thread when it finishes.
    pub fn submit(&self, mut jobs: Vec<ReadJob>, priority: Priority) {
        if priority == Priority::Demand {
            jobs.sort_by(|a, b| (a.file.path(), a.offset).cmp(&(b.file.path(), b.offset)));
        }
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

    /// Decides, by tag, the fate of every prefetch read not finished yet,
    /// in queue order: kept, promoted to demand, or withdrawn. Returns the
    /// tags of the withdrawn reads, whose `done` will never run (it is
    /// dropped without being called, so a caller that holds its own lock
    /// around this call is not re-entered). A record not started yet is
    /// withdrawn whole; one started as segments loses the segments still
    /// queued (the ones running finish into its buffer, unused). Promoted,
    /// a started record's remaining segments join the demand segments.
    pub fn settle_prefetch(&self, decide: impl FnMut(u64) -> Settle) -> Vec<u64> {
        let settled = self.shared.lock().settle_prefetch(decide);
        self.shared
            .stats
            .queued
            .fetch_sub(settled.unstarted, Ordering::Relaxed);
        if settled.promoted {
            self.shared.ready.notify_all();
        }
        settled.withdrawn
    }
}

/// What settling the prefetch queues did.
#[derive(Debug, Default)]
struct Settled {
    withdrawn: Vec<u64>,
    /// Of the withdrawn, records not started yet (still counted as queued).
    unstarted: u64,
    promoted: bool,
}

impl Drop for IoEngine {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
        let me = std::thread::current().id();
        for w in self.workers.drain(..) {
            // The last owner may be a read's `done` that finished on an IO
            // thread: that thread cannot join itself (pthread_join fails
            // with EDEADLK and std panics); it sees `closed` and exits when
            // its job returns, so its handle is dropped, detached.
            if w.thread().id() == me {
                continue;
            }
            // A worker that panicked has already reported it; nothing to add.
            let _ = w.join();
        }
    }
}

/// What a worker takes next, and so which counter it holds while it runs.
enum Work {
    Segment(Segment, Priority),
    Job(ReadJob, Priority),
}

impl Work {
    fn priority(&self) -> Priority {
        match self {
            Self::Segment(_, p) | Self::Job(_, p) => *p,
        }
    }
}

/// Takes the next read, by rank: demand segments, demand records, then
/// (only while no demand read waits, within `prefetch_reads`) prefetch
/// segments and prefetch records, and counts it as running. `None`:
/// nothing may start now.
///
/// A guess may start while demand reads still run: a thread with no demand
/// to take would otherwise leave the device's queue short as a layer's last
/// segments drain, at every layer. Demand that arrives then waits at most
/// for one segment to finish.
fn next_work(q: &mut Queues, prefetch_reads: usize) -> Option<Work> {
    let work = if let Some(seg) = q.demand_segments.pop_front() {
        Work::Segment(seg, Priority::Demand)
    } else if let Some(job) = q.demand.pop_front() {
        Work::Job(job, Priority::Demand)
    } else if q.prefetching >= prefetch_reads {
        return None;
    } else if let Some(seg) = q.prefetch_segments.pop_front() {
        Work::Segment(seg, Priority::Prefetch)
    } else {
        Work::Job(q.prefetch.pop_front()?, Priority::Prefetch)
    };
    if work.priority() == Priority::Prefetch {
        q.prefetching += 1;
    }
    Some(work)
}

fn worker(shared: &Shared) {
    loop {
        let work = {
            let mut q = shared.lock();
            loop {
                if let Some(w) = next_work(&mut q, shared.prefetch_reads) {
                    break w;
                }
                if q.closed && !q.demand_waits() && !q.prefetch_waits() {
                    return;
                }
                q = shared
                    .ready
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        // A split record's first segment runs here; the rest are queued
        // as segments of the same priority.
        let priority = work.priority();
        match work {
            Work::Segment(seg, _) => seg.run(shared),
            Work::Job(job, p) => start(shared, job, p),
        }
        // A finished guess frees a place under `prefetch_reads`; a
        // finished demand read frees only this thread, which looks again.
        if priority == Priority::Prefetch {
            let mut q = shared.lock();
            q.prefetching -= 1;
            let wake = q.prefetch_waits();
            drop(q);
            if wake {
                shared.ready.notify_all();
            }
        }
    }
}

/// Runs `done` with the error of a read that will not happen.
fn cancelled(job: ReadJob) {
    let e = std::io::Error::new(std::io::ErrorKind::Interrupted, "read cancelled");
    (job.done)(Err(crate::error::io(job.file.path().to_path_buf())(e)));
}

/// Starts one record: cancelled, read whole, or split into segments.
fn start(shared: &Shared, job: ReadJob, priority: Priority) {
    let stats = &shared.stats;
    stats.queued.fetch_sub(1, Ordering::Relaxed);
    if job
        .cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
    {
        cancelled(job);
        return;
    }
    // Backpressure: wait here, before the read, for the bytes to hold it.
    let mut buf = shared.pool.acquire(job.len);
    let seg = shared.segment_bytes;
    if seg == 0 || job.len <= seg {
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = job.file.read_into(job.offset, job.len, &mut buf);
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        stats.reads.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        (job.done)(result.map(|()| buf));
        return;
    }
    let padded = align_up(job.len as u64) as usize;
    let n = padded.div_ceil(seg);
    let base = buf.buf_mut().spare_mut().as_mut_ptr();
    let rec = Arc::new(SplitRead {
        file: job.file,
        tag: job.tag,
        offset: job.offset,
        len: job.len,
        base,
        buf: Mutex::new(Some(buf)),
        remaining: AtomicUsize::new(n),
        valid: AtomicUsize::new(job.len),
        error: Mutex::new(None),
        done: Mutex::new(Some(job.done)),
    });
    let segs = (0..n).map(|i| Segment {
        rec: Arc::clone(&rec),
        start: i * seg,
        end: ((i + 1) * seg).min(padded),
    });
    let mut segs: Vec<Segment> = segs.collect();
    let first = segs.remove(0);
    {
        let mut q = shared.lock();
        match priority {
            Priority::Demand => q.demand_segments.extend(segs),
            Priority::Prefetch => q.prefetch_segments.extend(segs),
        }
    }
    shared.ready.notify_all();
    first.run(shared);
}

/// A record read as segments by several threads into one buffer.
struct SplitRead {
    file: Arc<DirectFile>,
    /// The job's tag, for [`IoEngine::settle_prefetch`].
    tag: u64,
    offset: u64,
    len: usize,
    /// Start of the buffer's allocation (stable: the heap block does not
    /// move when the `PooledBuf` handle does).
    base: *mut u8,
    /// The buffer, taken by the thread that finishes the last segment.
    buf: Mutex<Option<PooledBuf>>,
    /// Segments not finished yet.
    remaining: AtomicUsize,
    /// Bytes valid from the start (less than `len` after a short read).
    valid: AtomicUsize,
    error: Mutex<Option<crate::Error>>,
    done: Mutex<Option<Done>>,
}

// SAFETY: `base` points into the allocation owned by `buf`, which lives
// until the last segment finishes; segments write disjoint ranges of it
// through `base` only, and the buffer is read only after `remaining`
// reaches zero (AcqRel), so no two threads touch the same bytes unsynchronised.
unsafe impl Send for SplitRead {}
// SAFETY: as for Send; every other field is itself Sync.
unsafe impl Sync for SplitRead {}

/// Bytes `start..end` of a split record (block-aligned, within its buffer).
struct Segment {
    rec: Arc<SplitRead>,
    start: usize,
    end: usize,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("file", self.rec.file.path())
            .field("offset", &(self.rec.offset + self.start as u64))
            .field("len", &(self.end - self.start))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data behind these locks stays consistent across a panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Segment {
    fn run(self, shared: &Shared) {
        let rec = &*self.rec;
        let need = rec.len.min(self.end) - self.start.min(rec.len);
        // SAFETY: `start..end` lies within the buffer's capacity (end <=
        // align_up(len) <= capacity), no other segment covers these bytes,
        // and the buffer outlives this call (see `SplitRead`).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(rec.base.add(self.start), self.end - self.start)
        };
        shared.stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = rec
            .file
            .read_at_slice(rec.offset + self.start as u64, dst, need);
        shared.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        match r {
            Ok(got) if got >= need => {}
            Ok(got) => {
                rec.valid.fetch_min(self.start + got, Ordering::Relaxed);
            }
            Err(e) => {
                lock(&rec.error).get_or_insert(e);
            }
        }
        if rec.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // The last segment: every write above happened before this point.
        let mut buf = lock(&rec.buf)
            .take()
            .expect("taken once, by the last segment");
        let valid = rec.valid.load(Ordering::Relaxed).min(rec.len);
        buf.buf_mut().set_len(valid);
        let stats = &shared.stats;
        stats.reads.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(valid as u64, Ordering::Relaxed);
        let result = match lock(&rec.error).take() {
            Some(e) => Err(e),
            None => Ok(buf),
        };
        // None: the record was withdrawn while segments of it ran.
        if let Some(done) = lock(&rec.done).take() {
            done(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::DirectMode;

    struct Fixture {
        _tmp: tempfile::NamedTempFile,
        file: Arc<DirectFile>,
        pool: BufferPool,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), vec![7u8; 8192]).unwrap();
        let file = Arc::new(DirectFile::open(tmp.path(), DirectMode::Prefer).unwrap());
        Fixture {
            _tmp: tmp,
            file,
            pool: BufferPool::new(1 << 20),
        }
    }

    impl Fixture {
        fn job(&self, tag: u64) -> ReadJob {
            ReadJob {
                file: Arc::clone(&self.file),
                tag,
                offset: 0,
                len: 4096,
                cancel: None,
                done: Box::new(|_| {}),
            }
        }

        /// The second of two segments of a started record tagged `tag`.
        fn segment(&self, tag: u64) -> Segment {
            let mut buf = self.pool.acquire(8192);
            let base = buf.buf_mut().spare_mut().as_mut_ptr();
            let rec = SplitRead {
                file: Arc::clone(&self.file),
                tag,
                offset: 0,
                len: 8192,
                base,
                buf: Mutex::new(Some(buf)),
                remaining: AtomicUsize::new(2),
                valid: AtomicUsize::new(8192),
                error: Mutex::new(None),
                done: Mutex::new(None),
            };
            Segment {
                rec: Arc::new(rec),
                start: 4096,
                end: 8192,
            }
        }
    }

    /// The engine's last owner may be a read's `done`, run on an IO
    /// thread: dropping the engine there joins the other workers and
    /// leaves its own thread to exit, instead of that thread joining itself
    /// (a panic: pthread_join fails with EDEADLK).
    #[test]
    fn an_engine_dropped_by_its_own_io_thread_does_not_join_itself() {
        let f = fixture();
        let engine = Arc::new(IoEngine::new(EngineConfig {
            threads: 3,
            inflight_bytes: 1 << 20,
            segment_bytes: 0,
            prefetch_reads: 1,
        }));
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let last = Arc::clone(&engine);
        let mut job = f.job(1);
        job.done = Box::new(move |r| {
            assert!(r.is_ok());
            // Until the test has let go of its own handle.
            wait.recv().unwrap();
            drop(last);
            tx.send(()).unwrap();
        });
        engine.submit(vec![job], Priority::Demand);
        drop(engine);
        go.send(()).unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("the done that dropped the engine returned");
    }

    /// (tag, priority, is a segment) of the next work, taken as a worker
    /// would (its counter raised).
    fn take(q: &mut Queues, prefetch_reads: usize) -> Option<(u64, Priority, bool)> {
        Some(match next_work(q, prefetch_reads)? {
            Work::Segment(s, p) => (s.rec.tag, p, true),
            Work::Job(j, p) => (j.tag, p, false),
        })
    }

    /// Demand segments, then demand records; prefetch (segments of started
    /// records first) once no demand waits (while demand still runs), and
    /// within its limit.
    #[test]
    fn demand_goes_first_and_prefetch_waits_for_it_and_for_its_limit() {
        let f = fixture();
        let mut q = Queues::default();
        q.prefetch.push_back(f.job(4));
        q.prefetch_segments.push_back(f.segment(3));
        q.demand.push_back(f.job(2));
        q.demand_segments.push_back(f.segment(1));
        assert_eq!(take(&mut q, 1), Some((1, Priority::Demand, true)));
        assert_eq!(take(&mut q, 1), Some((2, Priority::Demand, false)));
        // Both demand reads still run: an idle thread takes the guess.
        assert_eq!(take(&mut q, 1), Some((3, Priority::Prefetch, true)));
        assert_eq!(take(&mut q, 1), None, "one prefetch read at most");
        // Demand that arrives now starts before the prefetch waiting.
        q.demand.push_back(f.job(5));
        assert_eq!(take(&mut q, 1), Some((5, Priority::Demand, false)));
        assert_eq!(take(&mut q, 1), None, "still one prefetch read at most");
        assert_eq!(take(&mut q, 2), Some((4, Priority::Prefetch, false)));
        assert_eq!(take(&mut q, 2), None);
    }

    /// A chosen guess already started moves its remaining segments to the
    /// demand segments; a wrong one started loses its queued segments and
    /// its `done` (never called, also not by a segment that was running);
    /// queued records are promoted or withdrawn.
    #[test]
    fn settling_promotes_and_withdraws_started_and_queued_guesses() {
        let f = fixture();
        let mut q = Queues::default();
        let called = Arc::new(AtomicUsize::new(0));
        let mut running = None;
        for tag in [10, 11] {
            let seg = f.segment(tag);
            let called = Arc::clone(&called);
            *lock(&seg.rec.done) = Some(Box::new(move |_| {
                called.fetch_add(1, Ordering::Relaxed);
            }));
            if tag == 10 {
                // Its first segment, still running when the guess is settled.
                running = Some(Segment {
                    rec: Arc::clone(&seg.rec),
                    start: 0,
                    end: 4096,
                });
            }
            q.prefetch_segments.push_back(seg);
        }
        for tag in [12, 13, 20] {
            q.prefetch.push_back(f.job(tag));
        }
        let chosen = [11, 12];
        let settled = q.settle_prefetch(|tag| {
            if tag >= 20 {
                Settle::Keep
            } else if chosen.contains(&tag) {
                Settle::Promote
            } else {
                Settle::Withdraw
            }
        });
        assert!(settled.promoted);
        assert_eq!(settled.withdrawn, [10, 13]);
        assert_eq!(settled.unstarted, 1);
        let tags = |v: &mut dyn Iterator<Item = u64>| v.collect::<Vec<_>>();
        assert_eq!(tags(&mut q.demand_segments.iter().map(|s| s.rec.tag)), [11]);
        assert_eq!(tags(&mut q.demand.iter().map(|j| j.tag)), [12]);
        assert!(q.prefetch_segments.is_empty());
        assert_eq!(tags(&mut q.prefetch.iter().map(|j| j.tag)), [20]);

        // The withdrawn record's running segment finishes: nothing is
        // called, and its buffer goes back once the last segment lets go.
        let shared = Shared {
            queues: Mutex::new(Queues::default()),
            ready: Condvar::new(),
            pool: BufferPool::new(1 << 20),
            stats: EngineStats::default(),
            segment_bytes: 4096,
            prefetch_reads: 1,
        };
        let in_use = f.pool.in_use_bytes();
        running.unwrap().run(&shared);
        assert_eq!(called.load(Ordering::Relaxed), 0);
        assert!(
            f.pool.in_use_bytes() < in_use,
            "the withdrawn record's buffer is back"
        );
    }
}
