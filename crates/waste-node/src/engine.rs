//! Drives the model's step API for one forward step, layer by layer:
//! attention and routing on the forward pool, then the layer's routed
//! contribution from the expert source (awaited, so other requests run
//! meanwhile), then the layer's finish. Once a layer's output is known
//! (a dense layer's, or a MoE layer's after its experts), the next MoE
//! layer's likely experts are guessed from it, by that layer's router, and
//! prefetched: the disk reads them while the next layer's attention runs.
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

use waste_model::{Activations, KvCache, LogitsFor, Model, NoTrace};

use crate::Result;
use crate::compute::Compute;
use crate::source::{ExpertSource, LayerStats, Stream};

/// A guess made on the forward pool: the MoE layer and its likely experts.
type Guess = Option<(usize, waste_model::Result<Vec<u32>>)>;

pub struct Engine {
    pub model: Arc<Model>,
    pub source: Arc<dyn ExpertSource>,
    pub compute: Compute,
    /// Guess and prefetch the next MoE layer's experts (switchable at run
    /// time, so a benchmark can compare both on one loaded model).
    prefetch: AtomicBool,
    /// For each layer, the next layer (after it) that has experts.
    next_moe: Vec<Option<usize>>,
    /// The next generation's stream tag: starts at a random value, so two
    /// nodes sharing a store do not tag alike.
    next_stream: AtomicU64,
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

    /// Prefetches `guess`, if one was made (a guess that failed is only a
    /// lost hint); returns the bytes this asked the disk for.
    fn prefetch_guess(&self, stream: Stream, guess: Guess) -> u64 {
        match guess {
            Some((layer, Ok(ids))) => self.source.prefetch(stream, layer as u32, &ids),
            _ => 0,
        }
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
        let model = Arc::clone(&self.model);
        let (cache, embedded) = self
            .compute
            .run(move || {
                let r = model.embed(&tokens, &cache, &mut NoTrace);
                (cache, r)
            })
            .await;
        let mut stats = LayerStats::default();
        let act = match embedded {
            Ok(a) => a,
            Err(e) => return (cache, Err(e.into())),
        };
        let mut state = (act, cache);
        for layer in 0..self.model.num_layers() {
            match self.layer(stream, layer, state).await {
                (s, Ok(st)) => {
                    stats += st;
                    state = s;
                }
                ((_, cache), Err(e)) => return (cache, Err(e)),
            }
        }
        let (act, cache) = state;
        let model = Arc::clone(&self.model);
        let logits = self
            .compute
            .run(move || model.logits(&act, which, &mut NoTrace))
            .await;
        (cache, logits.map(|l| (l, stats)).map_err(Into::into))
    }

    async fn layer(
        &self,
        stream: Stream,
        layer: usize,
        (act, cache): (Activations, KvCache),
    ) -> ((Activations, KvCache), Result<LayerStats>) {
        let model = Arc::clone(&self.model);
        let guess_next = if self.prefetch() {
            self.next_moe[layer]
        } else {
            None
        };
        let (mut act, cache, routed, guess) = self
            .compute
            .run(move || {
                let (mut act, mut cache) = (act, cache);
                let routing = model.attend_and_route(layer, &mut act, &mut cache, &mut NoTrace);
                // A dense layer is whole now: its output is what the next
                // MoE layer's router will read (less that layer's attention).
                let guess = guess_next
                    .filter(|_| matches!(routing, Ok(None)))
                    .map(|next| (next, model.guess_experts(next, &act)));
                (act, cache, routing, guess)
            })
            .await;
        let routing = match routed {
            Ok(Some(r)) => Arc::new(r),
            Ok(None) => {
                let stats = LayerStats {
                    bytes_read: self.prefetch_guess(stream, guess),
                    ..LayerStats::default()
                };
                return ((act, cache), Ok(stats));
            }
            Err(e) => return ((act, cache), Err(e.into())),
        };
        let demand = self.source.routed_sum(stream, Arc::clone(&routing));
        // The shared experts need no record: computed while those arrive
        // (a dense FFN per layer, otherwise compute the reads wait behind).
        let shared = {
            let (model, routing) = (Arc::clone(&self.model), Arc::clone(&routing));
            self.compute.run(move || model.shared_experts(&routing))
        };
        let (demand, shared) = tokio::join!(demand, shared);
        let (sum, mut stats) = match demand {
            Ok(r) => r,
            Err(e) => return ((act, cache), Err(e)),
        };
        let shared = match shared {
            Ok(s) => s,
            Err(e) => return ((act, cache), Err(e.into())),
        };
        let model = Arc::clone(&self.model);
        let (act, done, guess) = self
            .compute
            .run(move || {
                let r =
                    model.apply_routed_and_shared(&mut act, &routing, sum, shared, &mut NoTrace);
                // The layer's output is what the next layer's router reads,
                // less its attention, which runs while the guess is read.
                let guess = guess_next.map(|next| (next, model.guess_experts(next, &act)));
                (act, r, guess)
            })
            .await;
        stats.bytes_read += self.prefetch_guess(stream, guess);
        ((act, cache), done.map(|()| stats).map_err(Into::into))
    }
}
