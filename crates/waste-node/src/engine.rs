//! Drives the model's step API for one forward step, layer by layer, on
//! the forward pool: attention and routing, the layer's routed
//! contribution, then the layer's finish. While every expert a layer needs
//! is in RAM (a warm decode step) the step runs through all layers and the
//! output head as one job on the pool, its experts split over the pool's
//! threads; a layer whose experts must be read hands back to the async side,
//! which awaits them from the expert source (so other requests run
//! meanwhile), then the next job resumes with that layer's finish. Each
//! hand-off costs a wake-up of a sleeping thread, more than a warm layer's
//! whole compute on a shared machine (docs/BENCH.md, "Where a warm decode
//! token's time goes"). Once a layer's output is known (a dense layer's, or
//! a MoE layer's after its experts), the next MoE layer's likely experts are
//! guessed from it, by that layer's router, and prefetched: the disk reads
//! them while the next layer's attention runs.
//!
//! One guess per layer, from the best hidden state there is before the
//! layer routes. Earlier, less informed guesses (from the embeddings for
//! the first MoE layer behind dense layers; from a MoE layer's stream
//! before its experts, revised afterwards) were tried and dropped: their
//! wrong reads cost more than the lead they gave, whether the disk or the
//! compute set the pace (docs/BENCH.md, fifth session).

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use waste_model::{Activations, KvCache, LogitsFor, Model, NoTrace, Routing};

use crate::Result;
use crate::compute::Compute;
use crate::source::{ExpertSource, LayerStats, Stream};

/// The parts of a forward step that [`Phases`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Token embeddings.
    Embed,
    /// Attention (its projections included) and the router.
    Attend,
    /// Routed experts found in RAM, and shared experts, computed on the pool.
    Experts,
    /// Routed and shared experts awaited on the async side (reads).
    Awaited,
    /// A layer's finish (routed and shared outputs into the stream) and
    /// the next layer's guess and prefetch.
    Apply,
    /// The final norm and the output head.
    Logits,
    /// From handing a job to the pool to its result back on the async
    /// side, less the job's own time: the thread hand-offs.
    Handoff,
}

impl Phase {
    pub const ALL: [Self; 7] = [
        Self::Embed,
        Self::Attend,
        Self::Experts,
        Self::Awaited,
        Self::Apply,
        Self::Logits,
        Self::Handoff,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Embed => "embed",
            Self::Attend => "attend",
            Self::Experts => "experts",
            Self::Awaited => "awaited",
            Self::Apply => "apply",
            Self::Logits => "logits",
            Self::Handoff => "handoff",
        }
    }
}

/// Wall time per [`Phase`] since the last [`Phases::take`], over all
/// generations (a diagnostic: concurrent generations add up together).
#[derive(Debug, Default)]
pub struct Phases([AtomicU64; 7]);

impl Phases {
    fn add(&self, phase: Phase, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0[phase as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// Times `f` as `phase`.
    fn time<R>(&self, phase: Phase, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.add(phase, t.elapsed());
        r
    }

    /// (phase, time) since the last call, and resets them.
    pub fn take(&self) -> Vec<(Phase, Duration)> {
        Phase::ALL
            .iter()
            .map(|&p| {
                let ns = self.0[p as usize].swap(0, Ordering::Relaxed);
                (p, Duration::from_nanos(ns))
            })
            .collect()
    }
}

/// What a job on the pool runs, as owned parts (jobs are `'static`).
#[derive(Clone)]
struct Walk {
    model: Arc<Model>,
    source: Arc<dyn ExpertSource>,
    phases: Arc<Phases>,
    /// For each layer, the next layer (after it) that has experts.
    next_moe: Arc<[Option<usize>]>,
    prefetch: bool,
    stream: Stream,
}

/// Where a job starts.
enum Resume {
    /// A step's first job: embed these tokens, then layer 0.
    Embed(Vec<u32>),
    /// `layer`'s experts came back from the async side: finish it, then
    /// go on from the next layer.
    Finish {
        layer: usize,
        routing: Arc<Routing>,
        sum: Vec<f32>,
        shared: Option<Vec<f32>>,
    },
}

/// Where a job stopped.
enum Outcome {
    /// Every layer done: the logits.
    Logits(Vec<f32>),
    /// `routing`'s experts are not all in RAM: awaited on the async side.
    Routed(Arc<Routing>),
}

/// A job's result: the activations (None after an error or a failed
/// embedding), the cache (always), the expert stats of the layers it ran.
type Ran = (Option<Activations>, KvCache, LayerStats, Result<Outcome>);

impl Walk {
    /// One job on the pool: from `resume`, layer after layer while each
    /// one's experts are in RAM, then the output head.
    fn run(
        &self,
        resume: Resume,
        act: Option<Activations>,
        mut cache: KvCache,
        which: LogitsFor,
    ) -> Ran {
        let mut stats = LayerStats::default();
        let mut act = act;
        let r = self.steps(resume, &mut act, &mut cache, which, &mut stats);
        (act, cache, stats, r)
    }

    fn steps(
        &self,
        resume: Resume,
        act: &mut Option<Activations>,
        cache: &mut KvCache,
        which: LogitsFor,
        stats: &mut LayerStats,
    ) -> Result<Outcome> {
        let from = match resume {
            Resume::Embed(tokens) => {
                let embedded = self.phases.time(Phase::Embed, || {
                    self.model.embed(&tokens, cache, &mut NoTrace)
                })?;
                *act = Some(embedded);
                0
            }
            Resume::Finish {
                layer,
                routing,
                sum,
                shared,
            } => {
                let a = act
                    .as_mut()
                    .expect("a routed layer's activations come back");
                self.finish(layer, a, &routing, sum, shared, stats)?;
                layer + 1
            }
        };
        let a = act.as_mut().expect("activations after the embedding");
        for layer in from..self.model.num_layers() {
            let routing = self.phases.time(Phase::Attend, || {
                self.model.attend_and_route(layer, a, cache, &mut NoTrace)
            })?;
            let Some(routing) = routing else {
                // A dense layer is whole now: its output is what the next
                // MoE layer's router will read (less that layer's attention).
                stats.bytes_read += self.phases.time(Phase::Apply, || self.guess(layer, a));
                continue;
            };
            let routing = Arc::new(routing);
            let t = Instant::now();
            let Some(routed) = self.source.cached_sum(self.stream, &routing) else {
                return Ok(Outcome::Routed(routing));
            };
            let (sum, st) = routed?;
            let shared = self.model.shared_experts(&routing)?;
            self.phases.add(Phase::Experts, t.elapsed());
            *stats += st;
            self.finish(layer, a, &routing, sum, shared, stats)?;
        }
        let logits = self
            .phases
            .time(Phase::Logits, || self.model.logits(a, which, &mut NoTrace))?;
        Ok(Outcome::Logits(logits))
    }

    /// `layer`'s routed and shared outputs into the stream, then the next
    /// MoE layer's guess from that output (less its attention, which runs
    /// while the guess is read).
    fn finish(
        &self,
        layer: usize,
        act: &mut Activations,
        routing: &Routing,
        sum: Vec<f32>,
        shared: Option<Vec<f32>>,
        stats: &mut LayerStats,
    ) -> Result<()> {
        let t = Instant::now();
        self.model
            .apply_routed_and_shared(act, routing, sum, shared, &mut NoTrace)?;
        stats.bytes_read += self.guess(layer, act);
        self.phases.add(Phase::Apply, t.elapsed());
        Ok(())
    }

    /// Guesses and prefetches the experts of the next MoE layer after
    /// `layer`, if prefetching; returns the bytes this asked the disk for
    /// (a guess that failed is only a lost hint).
    fn guess(&self, layer: usize, act: &Activations) -> u64 {
        let next = match self.next_moe[layer] {
            Some(next) if self.prefetch => next,
            _ => return 0,
        };
        match self.model.guess_experts(next, act) {
            Ok(ids) => self.source.prefetch(self.stream, next as u32, &ids),
            Err(_) => 0,
        }
    }
}

pub struct Engine {
    pub model: Arc<Model>,
    pub source: Arc<dyn ExpertSource>,
    pub compute: Compute,
    /// Guess and prefetch the next MoE layer's experts (switchable at run
    /// time, so a benchmark can compare both on one loaded model).
    prefetch: AtomicBool,
    /// For each layer, the next layer (after it) that has experts.
    next_moe: Arc<[Option<usize>]>,
    /// The next generation's stream tag: starts at a random value, so two
    /// nodes sharing a store do not tag alike.
    next_stream: AtomicU64,
    /// Where forward steps spend their time.
    pub phases: Arc<Phases>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.source.mode())
            .field("prefetch", &self.prefetch)
            .finish()
    }
}

impl Engine {
    pub fn new(
        model: Arc<Model>,
        source: Arc<dyn ExpertSource>,
        compute: Compute,
        prefetch: bool,
    ) -> Self {
        let layers = model.num_layers();
        let next_moe = (0..layers)
            .map(|l| (l + 1..layers).find(|&m| model.is_moe_layer(m)))
            .collect();
        Self {
            model,
            source,
            compute,
            prefetch: AtomicBool::new(prefetch),
            next_moe,
            next_stream: AtomicU64::new(RandomState::new().hash_one(std::process::id())),
            phases: Arc::default(),
        }
    }

    pub fn prefetch(&self) -> bool {
        self.prefetch.load(Ordering::Relaxed)
    }

    pub fn set_prefetch(&self, on: bool) {
        self.prefetch.store(on, Ordering::Relaxed);
    }

    /// A tag for a new generation's steps (see [`Stream`]).
    pub fn new_stream(&self) -> Stream {
        self.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    /// One step of `stream`: `tokens` continue the sequence in `cache`.
    /// Returns the cache (always: on error it is inconsistent and must be
    /// cleared by the caller) and the logits of `which` positions with the
    /// step's expert stats.
    pub async fn forward(
        &self,
        stream: Stream,
        tokens: Vec<u32>,
        cache: KvCache,
        which: LogitsFor,
    ) -> (KvCache, Result<(Vec<f32>, LayerStats)>) {
        let walk = Walk {
            model: Arc::clone(&self.model),
            source: Arc::clone(&self.source),
            phases: Arc::clone(&self.phases),
            next_moe: Arc::clone(&self.next_moe),
            prefetch: self.prefetch(),
            stream,
        };
        let mut stats = LayerStats::default();
        let (mut resume, mut act, mut cache) = (Resume::Embed(tokens), None, cache);
        loop {
            let t0 = Instant::now();
            let w = walk.clone();
            let ((a, c, st, outcome), busy) = self
                .compute
                .run(move || {
                    let t = Instant::now();
                    let ran = w.run(resume, act, cache, which);
                    (ran, t.elapsed())
                })
                .await;
            self.phases
                .add(Phase::Handoff, t0.elapsed().saturating_sub(busy));
            cache = c;
            stats += st;
            let routing = match outcome {
                Ok(Outcome::Logits(l)) => return (cache, Ok((l, stats))),
                Ok(Outcome::Routed(r)) => r,
                Err(e) => return (cache, Err(e)),
            };
            act = a;
            let t = Instant::now();
            let demand = self.source.routed_sum(stream, Arc::clone(&routing));
            // The shared experts need no record: computed while those arrive
            // (a dense FFN per layer, otherwise compute the reads wait behind).
            let shared = {
                let (model, routing) = (Arc::clone(&self.model), Arc::clone(&routing));
                self.compute.run(move || model.shared_experts(&routing))
            };
            let (demand, shared) = tokio::join!(demand, shared);
            self.phases.add(Phase::Awaited, t.elapsed());
            let (sum, st) = match demand {
                Ok(r) => r,
                Err(e) => return (cache, Err(e)),
            };
            stats += st;
            let shared = match shared {
                Ok(s) => s,
                Err(e) => return (cache, Err(e.into())),
            };
            resume = Resume::Finish {
                layer: routing.layer,
                routing,
                sum,
                shared,
            };
        }
    }
}
