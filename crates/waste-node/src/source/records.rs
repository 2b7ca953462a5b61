//! The record path of the node, shared by local files and remote fetch: one
//! RAM cache within the plan, prefetch of likely experts (demand reads go
//! first; when a layer's choice is known its guesses not read yet are
//! promoted or dropped, and so are an older guess's when a newer one for
//! the same layer comes; a prefetched record that lands before its layer asks
//! is staged, so prefetch works with no cache at all; an expert is never
//! read twice at once; the reads are issued only while such reads have been
//! right at least half the time, [`PrefetchGate`]), and the compute of each
//! expert as soon as its record arrives, so expert j runs while j+1 is still being read. Partial results
//! are summed in ascending expert order: the result does not depend on
//! arrival order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use tokio::sync::{mpsc, watch};
use waste_kernels::stash::{Reuse, Stash};
use waste_kernels::{Activation, ExpertFfn, Route};
use waste_model::Routing;

use super::gate::PrefetchGate;
use super::{
    BoxFuture, Done, Expert, ExpertSource, LayerStats, Priority, RecordBytes, RecordReader, Stream,
};
use crate::cache::{ExpertCache, Key};
use crate::compute::Compute;
use crate::{Error, Result};

/// A finished read as its waiters get it.
type Arrival = std::result::Result<Arc<Expert>, Arc<Error>>;

/// Someone waiting for a record: the layer step that needs it, told on its
/// own channel with the expert's index in that step. One channel per step
/// lets it take records in arrival order, so every record that has arrived
/// is being computed and released: pooled buffers are never held by a step
/// that waits for another read (which could need those very buffers).
#[derive(Debug)]
struct Waiter {
    tx: mpsc::UnboundedSender<(usize, Arrival)>,
    index: usize,
}

impl Waiter {
    fn send(self, r: Arrival) {
        // The step may have gone (its request was cancelled): nothing to do.
        let _ = self.tx.send((self.index, r));
    }
}

#[derive(Debug, Default)]
struct State {
    cache: ExpertCache,
    /// Reads in flight and who waits for them.
    inflight: HashMap<Key, Vec<Waiter>>,
    /// The prefetch's latest guesses per layer, for accuracy.
    guessed: HashMap<u32, HashSet<u32>>,
    /// Of those, the ones not in RAM when guessed: the reads a prefetch
    /// issues (or would have, had the gate been closed).
    would_read: HashMap<u32, HashSet<u32>>,
    gate: PrefetchGate,
    /// Prefetched records nobody has asked for yet and the cache did not
    /// keep (it may have no budget at all): held until their layer is
    /// routed, at most one layer's guesses per layer; in their IO buffer
    /// while its pool has room ([`RecordBytes::may_stay`]), else as owned
    /// copies if their layer's routing is still to come, else not at all.
    staged: HashMap<Key, Arc<Expert>>,
}

impl State {
    /// Reads the reader withdrew from its queue: no longer in flight,
    /// unless someone waits for one (a concurrent request routed there):
    /// those are returned, to be read again as demand.
    fn forget_withdrawn(&mut self, layer: u32, withdrawn: Vec<u32>) -> Vec<u32> {
        withdrawn
            .into_iter()
            .filter(|&id| {
                let key = (layer, id);
                let waited = self.inflight.get(&key).is_some_and(|w| !w.is_empty());
                if !waited {
                    self.inflight.remove(&key);
                }
                waited
            })
            .collect()
    }
}

/// An [`ExpertSource`] over a [`RecordReader`].
pub struct RecordSource<R: RecordReader> {
    reader: Arc<R>,
    state: Arc<Mutex<State>>,
    compute: Compute,
    activation: Activation,
    bytes_read: Arc<AtomicU64>,
    /// The cache's own share of the plan.
    cache_bytes: u64,
    /// Whether the cache may also hold the reader's idle reserve
    /// ([`RecordReader::idle_reserve`]); not when the user capped it.
    borrow_reserve: bool,
    /// The warm-up's reads not landed yet ([`RecordSource::warm`]).
    warm_left: Arc<watch::Sender<usize>>,
}

impl<R: RecordReader> std::fmt::Debug for RecordSource<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSource")
            .field("mode", &self.reader.mode())
            .finish_non_exhaustive()
    }
}

impl<R: RecordReader> RecordSource<R> {
    pub fn new(reader: R, cache_bytes: u64, compute: Compute, activation: Activation) -> Self {
        Self {
            reader: Arc::new(reader),
            state: Arc::new(Mutex::new(State {
                cache: ExpertCache::new(cache_bytes),
                ..State::default()
            })),
            compute,
            activation,
            bytes_read: Arc::new(AtomicU64::new(0)),
            cache_bytes,
            borrow_reserve: false,
            warm_left: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Lets the cache grow into the part of the in-flight share the
    /// reader's buffers have not taken, so the node holds what its plan
    /// says rather than leaving that part idle.
    pub fn borrowing_idle_reserve(mut self) -> Self {
        self.borrow_reserve = true;
        self
    }

    /// Fills the cache's own share at start, so a first request does not
    /// pay every expert's read: `layers` ((layer, experts)) are read at
    /// prefetch priority (a request's reads go first), the experts taken
    /// round-robin across layers so each layer holds the same share, until
    /// their records would pass the share. Returns (experts, bytes) issued;
    /// [`ExpertSource::warmed`] resolves when they have landed.
    pub fn warm(&self, layers: &[(u32, u32)]) -> (usize, u64) {
        let mut picked: Vec<(u32, Vec<u32>)> =
            layers.iter().map(|&(l, _)| (l, Vec::new())).collect();
        let most = layers.iter().map(|&(_, n)| n).max().unwrap_or(0);
        let (mut count, mut bytes) = (0, 0u64);
        'fill: for e in 0..most {
            for (i, &(layer, n)) in layers.iter().enumerate() {
                if e >= n {
                    continue;
                }
                let record = self.reader.record_bytes(layer).unwrap_or(0);
                if bytes + record > self.cache_bytes {
                    break 'fill;
                }
                bytes += record;
                count += 1;
                picked[i].1.push(e);
            }
        }
        for (layer, ids) in picked {
            let ids: Vec<u32> = {
                let mut st = self.lock();
                ids.into_iter()
                    .filter(|&id| {
                        let key = (layer, id);
                        let fresh = !st.cache.contains(key) && !st.inflight.contains_key(&key);
                        if fresh {
                            st.inflight.insert(key, Vec::new());
                        }
                        fresh
                    })
                    .collect()
            };
            // Counted before they are issued, so none lands uncounted.
            self.warm_left.send_modify(|n| *n += ids.len());
            self.read_then(layer, &ids, Priority::Prefetch, Some(&self.warm_left));
        }
        (count, bytes)
    }

    /// Bytes held by the cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.lock().cache.used()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("record source state")
    }

    /// Bytes of `issued` reads of `layer`'s records, less `withdrawn` ones
    /// (none below zero: a call may withdraw an earlier step's guesses).
    fn issued_bytes(&self, layer: u32, issued: u64, withdrawn: u64) -> u64 {
        let record = self.reader.record_bytes(layer).unwrap_or(0);
        issued.saturating_sub(withdrawn) * record
    }

    /// A layer's `routing` to `ids` meets the source: the prefetch's guess
    /// for it scored (and, on a decode step, the prefetch gate told how
    /// right its reads would have been), its stale guesses still queued withdrawn (right ones
    /// move up to demand), and each expert taken from the cache or the
    /// staged guesses into `ready` ((index in `ids`, record)), or listed in
    /// `misses` ((index, id)). Returns the withdrawn reads that someone
    /// still waits for (to read again as demand) and how many were withdrawn.
    fn meet_routing(
        &self,
        st: &mut State,
        routing: &Routing,
        ids: &[u32],
        stats: &mut LayerStats,
        ready: &mut Vec<(usize, Arc<Expert>)>,
        misses: &mut Vec<(usize, u32)>,
    ) -> (Vec<u32>, u64) {
        let (layer, decode) = (routing.layer as u32, routing.n == 1);
        if let Some(g) = st.guessed.remove(&layer) {
            stats.guessed = g.len() as u64;
            stats.guessed_right = ids.iter().filter(|id| g.contains(id)).count() as u64;
        }
        // Decode steps only: a prompt's guesses cover many experts and
        // are right far more often than one token's.
        if let Some(w) = st.would_read.remove(&layer).filter(|_| decode) {
            let was = st.gate.open();
            st.gate.observe(&w, ids);
            if st.gate.open() != was {
                tracing::info!(
                    precision = st.gate.precision(),
                    open = !was,
                    "prefetch reads {}: their share of right guesses crossed {}",
                    if was { "paused" } else { "resumed" },
                    super::gate::MIN_PRECISION
                );
            }
        }
        let withdrawn = self.reader.settle(layer, ids);
        let withdrawn_reads = withdrawn.len() as u64;
        let to_read = st.forget_withdrawn(layer, withdrawn);
        let mut staged = std::mem::take(&mut st.staged);
        staged.retain(|&(l, e), _| l != layer || ids.contains(&e));
        for (i, &id) in ids.iter().enumerate() {
            let held = staged.remove(&(layer, id));
            match st.cache.get((layer, id)).or(held) {
                Some(e) => {
                    stats.retained += 1;
                    ready.push((i, e));
                }
                None => misses.push((i, id)),
            }
        }
        st.staged = staged;
        (to_read, withdrawn_reads)
    }

    /// Issues reads of `ids` of `layer` that are neither cached nor in flight.
    fn read(&self, layer: u32, ids: &[u32], priority: Priority) {
        self.read_then(layer, ids, priority, None);
    }

    /// [`Self::read`], counting each landed read off `left` (the warm-up's).
    fn read_then(
        &self,
        layer: u32,
        ids: &[u32],
        priority: Priority,
        left: Option<&Arc<watch::Sender<usize>>>,
    ) {
        if ids.is_empty() {
            return;
        }
        let state = Arc::clone(&self.state);
        let bytes_read = Arc::clone(&self.bytes_read);
        let (own, borrow) = (self.cache_bytes, self.borrow_reserve);
        let reader = Arc::clone(&self.reader);
        let left = left.cloned();
        if borrow {
            // What these reads take of the idle reserve the cache may be
            // holding: given back before they are issued.
            let taken = reader.reserve_taken_by(layer, ids.len());
            if taken > 0 {
                let budget = own.saturating_add(reader.idle_reserve().saturating_sub(taken));
                let mut st = state.lock().expect("record source state");
                if st.cache.budget() > budget {
                    st.cache.set_budget(budget);
                }
            }
        }
        let done: Done = Arc::new(move |layer, expert, bytes: Result<RecordBytes>| {
            let parsed = bytes.and_then(|b| {
                bytes_read.fetch_add(b.as_ref().len() as u64, Ordering::Relaxed);
                Expert::parse(b)
                    .map(Arc::new)
                    .map_err(|source| Error::Record {
                        layer,
                        expert,
                        source,
                    })
            });
            let budget = if borrow {
                own.saturating_add(reader.idle_reserve())
            } else {
                own
            };
            land(&state, (layer, expert), parsed, budget);
            if let Some(left) = &left {
                left.send_modify(|n| *n = n.saturating_sub(1));
            }
        });
        self.reader.fetch(layer, ids, priority, done);
    }
}

impl<R: RecordReader> ExpertSource for RecordSource<R> {
    /// Looks up the cache and issues the demand reads now (so a prefetch
    /// issued right after never gets ahead of them); the future awaits the
    /// records and the per-expert compute.
    fn routed_sum(
        &self,
        _stream: Stream,
        routing: Arc<Routing>,
    ) -> BoxFuture<'_, Result<(Vec<f32>, LayerStats)>> {
        let layer = routing.layer as u32;
        let ids = routing.unique_experts();
        let mut stats = LayerStats {
            requested: ids.len() as u64,
            ..LayerStats::default()
        };
        // Cached experts are ready now; the rest are awaited, read once.
        let mut ready: Vec<(usize, Arc<Expert>)> = Vec::new();
        let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
        let mut pending = 0usize;
        let (to_read, withdrawn_reads) = {
            let mut st = self.lock();
            let mut misses = Vec::new();
            let (mut to_read, withdrawn) =
                self.meet_routing(&mut st, &routing, &ids, &mut stats, &mut ready, &mut misses);
            for (i, id) in misses {
                // An expert already in flight (a prefetch) is awaited, not read again.
                if !st.inflight.contains_key(&(layer, id)) {
                    to_read.push(id);
                }
                st.inflight.entry((layer, id)).or_default().push(Waiter {
                    tx: arrived_tx.clone(),
                    index: i,
                });
                pending += 1;
            }
            (to_read, withdrawn)
        };
        self.read(layer, &to_read, Priority::Demand);
        stats.bytes_read = self.issued_bytes(layer, to_read.len() as u64, withdrawn_reads);
        Box::pin(async move {
            let routes = Arc::new(routing.routes(&ids));
            let mut partials: Vec<Option<Partial>> = vec![None; ids.len()];
            let mut jobs = Vec::with_capacity(1 + pending);
            // The cached experts in one job on the pool, split over its
            // threads there: one hand-off for the lot (a warm decode step
            // hits them all), not one per expert.
            if !ready.is_empty() {
                let ready = ready.into_iter().map(|(i, e)| (i, ids[i], e)).collect();
                jobs.push(self.start_partials(Arc::clone(&routing), Arc::clone(&routes), ready));
            }
            drop(arrived_tx);
            for _ in 0..pending {
                let Some((i, e)) = arrived.recv().await else {
                    return Err(Error::Transport(format!(
                        "layer {layer}: a read was dropped before it completed"
                    )));
                };
                // The read's own error, kind kept: a corrupt record stays
                // DATA_LOSS, never a retryable network error.
                let e = e.map_err(Error::Shared)?;
                jobs.push(self.start_partials(
                    Arc::clone(&routing),
                    Arc::clone(&routes),
                    vec![(i, ids[i], e)],
                ));
            }
            for job in jobs {
                for (i, partial) in job.await? {
                    partials[i] = Some(partial);
                }
            }
            let sum = weighted(&routing, partials);
            Ok((sum, stats))
        })
    }

    fn cached_sum(
        &self,
        _stream: Stream,
        routing: &Arc<Routing>,
    ) -> Option<Result<(Vec<f32>, LayerStats)>> {
        let layer = routing.layer as u32;
        let ids = routing.unique_experts();
        let mut stats = LayerStats {
            requested: ids.len() as u64,
            ..LayerStats::default()
        };
        let mut ready = Vec::with_capacity(ids.len());
        let (to_read, withdrawn_reads) = {
            let mut st = self.lock();
            // Looked at before anything is touched: a step that must wait
            // goes to routed_sum as if this had not been asked.
            let held = |id: &u32| {
                let key = (layer, *id);
                st.cache.contains(key) || st.staged.contains_key(&key)
            };
            if !ids.iter().all(held) {
                return None;
            }
            let mut misses = Vec::new();
            let r = self.meet_routing(&mut st, routing, &ids, &mut stats, &mut ready, &mut misses);
            // Under the same lock as the look: every one was found.
            debug_assert!(misses.is_empty());
            r
        };
        // Withdrawn guesses a concurrent step waits for.
        self.read(layer, &to_read, Priority::Demand);
        stats.bytes_read = self.issued_bytes(layer, to_read.len() as u64, withdrawn_reads);
        let routes = routing.routes(&ids);
        let experts = ready.into_iter().map(|(i, e)| (i, ids[i], e)).collect();
        let mut partials: Vec<Option<Partial>> = vec![None; ids.len()];
        match partials_of(routing, &routes, experts, self.activation) {
            Ok(done) => {
                for (i, p) in done {
                    partials[i] = Some(p);
                }
                Some(Ok((weighted(routing, partials), stats)))
            }
            Err(e) => Some(Err(e)),
        }
    }

    fn prefetch(&self, _stream: Stream, layer: u32, ids: &[u32]) -> u64 {
        let (mut to_read, mut demand) = (Vec::new(), Vec::new());
        let withdrawn_reads;
        {
            let mut st = self.lock();
            st.guessed.insert(layer, ids.iter().copied().collect());
            // An earlier guess for this layer (this step's, from an earlier
            // hidden state) gives way: its reads not started yet go.
            let withdrawn = self.reader.revise(layer, ids);
            withdrawn_reads = withdrawn.len() as u64;
            demand.extend(st.forget_withdrawn(layer, withdrawn));
            // Staged guesses of an earlier token that this one does not repeat.
            st.staged
                .retain(|&(l, e), _| l != layer || ids.contains(&e));
            let would_read: HashSet<u32> = ids
                .iter()
                .copied()
                .filter(|&id| {
                    let key = (layer, id);
                    !st.cache.contains(key)
                        && !st.inflight.contains_key(&key)
                        && !st.staged.contains_key(&key)
                })
                .collect();
            if st.gate.open() {
                for &id in ids.iter().filter(|id| would_read.contains(id)) {
                    st.inflight.insert((layer, id), Vec::new());
                    to_read.push(id);
                }
            }
            st.would_read.insert(layer, would_read);
        }
        self.read(layer, &demand, Priority::Demand);
        self.read(layer, &to_read, Priority::Prefetch);
        let issued = (demand.len() + to_read.len()) as u64;
        self.issued_bytes(layer, issued, withdrawn_reads)
    }

    fn mode(&self) -> &'static str {
        self.reader.mode()
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.reader.record_bytes(layer)
    }

    fn total_bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    fn warmed(&self) -> BoxFuture<'_, ()> {
        let mut left = self.warm_left.subscribe();
        Box::pin(async move {
            // The sender lives as long as `self`: the wait cannot fail.
            let _ = left.wait_for(|&n| n == 0).await;
        })
    }
}

/// Hands a finished read to its waiters. What the cache keeps stays in the
/// buffer it was read into, taken off the IO pool's count (the pool makes
/// another for the next read; no megabytes copied); what is staged when
/// nobody waits yet stays in its buffer while the pool has room, else is
/// copied.
fn land(state: &Mutex<State>, key: Key, parsed: Result<Arc<Expert>>, cache_bytes: u64) {
    let lock = || state.lock().expect("record source state");
    let owned = |e: &Arc<Expert>| -> Arc<Expert> {
        if !e.storage().is_pooled() {
            return Arc::clone(e);
        }
        let copy = Expert::parse(RecordBytes::Owned(e.bytes().to_vec()));
        Arc::new(copy.expect("a copy of a record that parsed parses"))
    };
    let e = match parsed {
        Ok(e) => e,
        Err(err) => {
            let err = Arc::new(err);
            for w in lock().inflight.remove(&key).unwrap_or_default() {
                w.send(Err(Arc::clone(&err)));
            }
            return;
        }
    };
    let mut st = lock();
    st.cache.set_budget(cache_bytes);
    let cached = st.cache.contains(key);
    let waiters = st.inflight.remove(&key).unwrap_or_default();
    let kept = !cached && st.cache.reserve(e.size_bytes() as u64);
    if kept {
        e.storage().detach();
        // Nobody waits: a guess, or the warm-up's read, on probation until
        // a step uses it.
        st.cache
            .insert_reserved(key, Arc::clone(&e), !waiters.is_empty());
    }
    let stage = waiters.is_empty() && !kept && !cached;
    for w in waiters {
        w.send(Ok(Arc::clone(&e)));
    }
    if !stage {
        return;
    }
    // A prefetch that came back before its layer asked: held as it is
    // while its pool has room (a copy of every early record cost 13 MB of
    // memcpy each on K3, CPU that decode needs), else as an owned copy.
    if e.storage().may_stay() {
        st.staged.insert(key, e);
        return;
    }
    // One that came back after its layer was routed without it is only a
    // chance for the next token: not worth a copy (each is a record of
    // memcpy into fresh pages, 20 % of the CPU of DeepSeek-V3-shaped decode
    // on 2 cores), nor memory outside the plan's in-flight share.
    if !st.guessed.get(&key.0).is_some_and(|g| g.contains(&key.1)) {
        return;
    }
    // Still "in flight" for anyone asking during the copy.
    st.inflight.insert(key, Vec::new());
    drop(st);
    let copy = owned(&e);
    drop(e);
    let mut st = lock();
    let waiters = st.inflight.remove(&key).unwrap_or_default();
    if waiters.is_empty() {
        st.staged.insert(key, copy);
        return;
    }
    for w in waiters {
        w.send(Ok(Arc::clone(&copy)));
    }
}

/// The rows one expert served and its outputs for them, (rows, width).
type Partial = (Vec<Route>, Vec<f32>);

impl<R: RecordReader> RecordSource<R> {
    /// `experts` ((index in the step, id, record)) applied to the rows that
    /// chose each, on the forward pool, started now: a rayon task per
    /// expert inside one pool job.
    fn start_partials(
        &self,
        routing: Arc<Routing>,
        routes: Arc<Vec<Route>>,
        experts: Vec<(usize, u32, Arc<Expert>)>,
    ) -> impl std::future::Future<Output = Result<Vec<(usize, Partial)>>> {
        let act = self.activation;
        self.compute
            .start(move || partials_of(&routing, &routes, experts, act))
    }
}

thread_local! {
    /// The input rows an expert task gathers, reused across the tasks of a
    /// compute thread: a prompt's are megabytes per expert, which fresh
    /// allocations would fault in page by page.
    static GATHERED: Stash<Vec<f32>> = const { Stash::new() };
}

/// `experts` ((index in the step, id, record)) applied to the rows of
/// `routes` that chose each: a rayon task per expert on the current pool.
fn partials_of(
    routing: &Routing,
    routes: &[Route],
    experts: Vec<(usize, u32, Arc<Expert>)>,
    act: Activation,
) -> Result<Vec<(usize, Partial)>> {
    experts
        .into_par_iter()
        .map(|(i, id, expert)| {
            let rows: Vec<Route> = routes.iter().filter(|r| r.expert == i).copied().collect();
            let width = routing.expert_width();
            // A task stolen while this one runs takes another.
            let mut x = GATHERED.take_one();
            x.clear();
            for r in &rows {
                x.extend_from_slice(&routing.input[r.token * width..][..width]);
            }
            let mut y = OUTPUTS.take(rows.len() * width);
            let done = expert.forward(&x, rows.len(), act, &mut y);
            GATHERED.give_back(x);
            done.map_err(|source| Error::Record {
                layer: routing.layer as u32,
                expert: id,
                source,
            })?;
            Ok((i, (rows, y)))
        })
        .collect()
}

/// The routed sum, (n, width): ascending expert order and `sum += y·w`,
/// exactly as kernels::weighted_sum adds, so every mode gives the same bits.
fn weighted(routing: &Routing, partials: Vec<Option<Partial>>) -> Vec<f32> {
    let width = routing.expert_width();
    let mut sum = vec![0f32; routing.n * width];
    let mut done = Vec::with_capacity(partials.len());
    for (rows, y) in partials.into_iter().flatten() {
        for (r, yr) in rows.iter().zip(y.chunks(width)) {
            for (s, v) in sum[r.token * width..][..width].iter_mut().zip(yr) {
                *s += v * r.weight;
            }
        }
        done.push(y);
    }
    OUTPUTS.keep(done);
    sum
}

/// Expert outputs kept for the next step, up to this many bytes: a
/// prompt's are a megabyte or more per expert, and the node hands large
/// blocks back to the system when freed (`waste_format::io::heap`), so
/// fresh ones would be faulted in page by page (about 5 % of a prefill,
/// docs/BENCH.md). A step's outputs exist at once anyway: keeping them
/// raises the resident set between steps, not its peak.
const OUTPUTS_KEPT_BYTES: usize = 64 << 20;

static OUTPUTS: Outputs = Outputs::new(OUTPUTS_KEPT_BYTES);

/// Buffers given back, at most `cap` bytes of them.
struct Outputs {
    held: Mutex<Vec<Vec<f32>>>,
    cap: usize,
}

impl Outputs {
    const fn new(cap: usize) -> Self {
        Self {
            held: Mutex::new(Vec::new()),
            cap,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<Vec<f32>>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A zeroed buffer of `len` values, the largest held one if any.
    fn take(&self, len: usize) -> Vec<f32> {
        let kept = {
            let mut held = self.held();
            let largest = (0..held.len()).max_by_key(|&i| held[i].capacity());
            largest.map(|i| held.swap_remove(i))
        };
        let mut y = kept.unwrap_or_default();
        y.clear();
        y.resize(len, 0.0);
        y
    }

    /// Holds `bufs` for [`Self::take`], in order, while they fit the cap.
    fn keep(&self, bufs: Vec<Vec<f32>>) {
        let bytes = |v: &Vec<f32>| v.capacity() * size_of::<f32>();
        let mut held = self.held();
        let mut total: usize = held.iter().map(bytes).sum();
        for b in bufs {
            if total + bytes(&b) <= self.cap {
                total += bytes(&b);
                held.push(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waste_format::io::BufferPool;

    /// A record's bytes in a buffer of `pool`.
    fn pooled_bytes(pool: &BufferPool, seed: u32) -> RecordBytes {
        let owned = crate::source::tests::tiny_expert(seed);
        let bytes = owned.bytes();
        let mut buf = pool.acquire(bytes.len());
        buf.buf_mut().spare_mut()[..bytes.len()].copy_from_slice(bytes);
        buf.buf_mut().set_len(bytes.len());
        RecordBytes::Pooled(buf)
    }

    /// A parsed expert whose bytes sit in a buffer of `pool`.
    fn pooled_expert(pool: &BufferPool, seed: u32) -> Arc<Expert> {
        Arc::new(Expert::parse(pooled_bytes(pool, seed)).unwrap())
    }

    /// A prefetch nobody waits for is staged in its buffer while the pool
    /// has room; past half the pool, it is copied only if its layer's
    /// routing is still to come, and dropped if that routing has passed.
    #[test]
    fn a_landed_prefetch_is_staged_by_the_pool_and_its_layer_routing() {
        let record = crate::source::tests::tiny_expert(1).bytes().len();
        let pool = BufferPool::new(4 * waste_format::io::AlignedBuf::capacity_for(record));
        let state = Mutex::new(State::default());
        let staged = |key: Key| {
            let st = state.lock().unwrap();
            st.staged.get(&key).map(|e| e.storage().is_pooled())
        };

        // Room in the pool: kept in its buffer.
        land(&state, (3, 1), Ok(pooled_expert(&pool, 1)), 0);
        assert_eq!(staged((3, 1)), Some(true));

        // Past half the pool (staged (3, 1) plus two held here).
        let _held = (pool.acquire(record), pool.acquire(record));
        state.lock().unwrap().guessed.insert(4, HashSet::from([2]));
        // Its layer is still to be routed: an owned copy, the buffer freed.
        land(&state, (4, 2), Ok(pooled_expert(&pool, 2)), 0);
        assert_eq!(staged((4, 2)), Some(false));
        // Layer 5 was routed already (no guess outstanding): dropped.
        land(&state, (5, 3), Ok(pooled_expert(&pool, 3)), 0);
        assert_eq!(staged((5, 3)), None);
        assert_eq!(pool.in_use_bytes(), 3 * pool.limit_bytes() / 4);
    }

    /// Kept expert outputs come back zeroed at the asked length, the
    /// largest first, and no more than the cap's worth is kept.
    #[test]
    fn expert_outputs_are_kept_within_their_cap_and_reused_zeroed() {
        let pool = Outputs::new(4000 * 4);
        let (small, big, over) = (vec![7f32; 1000], vec![7f32; 2500], vec![7f32; 600]);
        let big_ptr = big.as_ptr();
        pool.keep(vec![small, big, over]);
        // 1000 + 2500 floats fit the 4000; the next 600 do not.
        let held: Vec<usize> = pool.held().iter().map(Vec::capacity).collect();
        assert_eq!(held, [1000, 2500]);
        let y = pool.take(10);
        assert_eq!((y.len(), y.as_ptr()), (10, big_ptr), "the largest, reused");
        assert!(y.iter().all(|&v| v == 0.0), "zeroed");
        let y2 = pool.take(3000);
        assert_eq!(y2.len(), 3000);
        assert!(y2.iter().all(|&v| v == 0.0));
        assert!(pool.held().is_empty());
        assert!(pool.take(5).capacity() >= 5, "a new one when none is held");
    }

    /// A reader that holds every read until the test completes it.
    #[derive(Default)]
    struct HeldReader {
        held: Mutex<Vec<(u32, u32, Done)>>,
    }

    impl HeldReader {
        /// Completes the oldest held read with a valid record; false if none.
        fn complete_one(&self) -> bool {
            let next = {
                let mut held = self.held.lock().unwrap();
                (!held.is_empty()).then(|| held.remove(0))
            };
            let Some((layer, expert, done)) = next else {
                return false;
            };
            let bytes = crate::source::tests::tiny_expert(expert).bytes().to_vec();
            done(layer, expert, Ok(RecordBytes::Owned(bytes)));
            true
        }
    }

    impl RecordReader for Arc<HeldReader> {
        fn fetch(&self, layer: u32, ids: &[u32], _priority: Priority, done: Done) {
            let mut held = self.held.lock().unwrap();
            held.extend(ids.iter().map(|&id| (layer, id, Arc::clone(&done))));
        }
        fn record_bytes(&self, _layer: u32) -> Option<u64> {
            Some(crate::source::tests::tiny_expert(0).bytes().len() as u64)
        }
        fn mode(&self) -> &'static str {
            "local"
        }
    }

    /// A reader whose records land in buffers of a real pool (its
    /// in-flight share), held until the test completes them.
    struct PoolReader {
        pool: BufferPool,
        held: Mutex<Vec<(u32, u32, Done)>>,
    }

    impl PoolReader {
        /// Completes every held read; returns how many.
        fn complete_all(&self) -> usize {
            let held = std::mem::take(&mut *self.held.lock().unwrap());
            let n = held.len();
            for (layer, expert, done) in held {
                done(layer, expert, Ok(pooled_bytes(&self.pool, expert)));
            }
            n
        }
    }

    impl RecordReader for Arc<PoolReader> {
        fn fetch(&self, layer: u32, ids: &[u32], _priority: Priority, done: Done) {
            let mut held = self.held.lock().unwrap();
            held.extend(ids.iter().map(|&id| (layer, id, Arc::clone(&done))));
        }
        fn record_bytes(&self, _layer: u32) -> Option<u64> {
            Some(crate::source::tests::tiny_expert(0).bytes().len() as u64)
        }
        fn idle_reserve(&self) -> u64 {
            self.pool.idle_bytes() as u64
        }
        fn reserve_taken_by(&self, layer: u32, reads: usize) -> u64 {
            let len = self.record_bytes(layer).unwrap() as usize;
            self.pool.growth_for(reads, len) as u64
        }
        fn mode(&self) -> &'static str {
            "local"
        }
    }

    /// Records the cache keeps stay in the buffers they were read into,
    /// off the pool's count, so the cache grows into the in-flight share
    /// the reads leave idle; before reads that need that share it is given
    /// back, so cache and buffers never hold more than the two shares.
    #[test]
    fn the_cache_keeps_read_buffers_and_borrows_only_the_idle_share() {
        let record = crate::source::tests::tiny_expert(0).bytes().len();
        let cap = waste_format::io::AlignedBuf::capacity_for(record);
        let reader = Arc::new(PoolReader {
            pool: BufferPool::new(4 * cap),
            held: Mutex::new(Vec::new()),
        });
        // The cache counts records by their bytes, the pool its buffers by
        // their (page-rounded) capacity.
        let own = 2 * record as u64;
        let source = RecordSource::new(
            Arc::clone(&reader),
            own,
            Compute::new(Some(1)).unwrap(),
            Activation::Silu,
        )
        .borrowing_idle_reserve();
        let pool = &reader.pool;
        let within = |what: &str| {
            let held = source.cached_bytes() + pool.total_bytes() as u64;
            assert!(held <= own + 4 * cap as u64, "{what}: {held} bytes held");
        };

        // Two reads: kept where they landed, the pool holding nothing.
        source.read(0, &[0, 1], Priority::Demand);
        assert_eq!(reader.complete_all(), 2);
        assert_eq!(source.cached_bytes(), 2 * record as u64);
        assert_eq!((pool.total_bytes(), pool.in_use_bytes()), (0, 0));
        let kept = source.lock().cache.get((0, 0)).unwrap();
        assert!(matches!(kept.storage(), RecordBytes::Pooled(b) if b.is_detached()));
        drop(kept);
        within("two kept");

        // Two more: the cache grows past its own share into the idle one.
        source.read(0, &[2, 3], Priority::Demand);
        within("two more issued");
        assert_eq!(reader.complete_all(), 2);
        assert_eq!(source.lock().cache.len(), 4);
        within("four kept");

        // Four reads need the whole in-flight share: the cache gives the
        // borrowed part back before they are issued.
        source.read(1, &[0, 1, 2, 3], Priority::Demand);
        assert!(
            source.cached_bytes() <= own,
            "the borrowed share given back"
        );
        within("four issued");
        assert_eq!(reader.complete_all(), 4);
        within("landed");
    }

    /// `warmed` resolves only once the last warm-up read has landed, and at
    /// once for a source that warms nothing.
    #[tokio::test]
    async fn warmed_waits_for_every_warm_read() {
        use std::time::Duration;
        let reader = Arc::new(HeldReader::default());
        let record = reader.record_bytes(0).unwrap();
        let source = RecordSource::new(
            Arc::clone(&reader),
            3 * record,
            Compute::new(Some(1)).unwrap(),
            Activation::Silu,
        );
        let wait = Duration::from_millis(20);
        assert!(
            tokio::time::timeout(wait, source.warmed()).await.is_ok(),
            "nothing to warm yet"
        );
        // Two layers of 4 experts, room for 3 records: (0,0), (1,0), (0,1).
        assert_eq!(source.warm(&[(0, 4), (1, 4)]), (3, 3 * record));
        for _ in 0..3 {
            assert!(
                tokio::time::timeout(wait, source.warmed()).await.is_err(),
                "warmed before its reads landed"
            );
            assert!(reader.complete_one());
        }
        assert!(!reader.complete_one(), "only the cache's share was read");
        assert!(
            tokio::time::timeout(wait, source.warmed()).await.is_ok(),
            "every read landed"
        );
        assert_eq!(source.cached_bytes(), 3 * record);
    }
}
