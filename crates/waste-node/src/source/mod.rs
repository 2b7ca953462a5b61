//! Where a MoE layer's routed contribution comes from. One interface,
//! [`ExpertSource`], three implementations: local files and remote fetch
//! (both hand records to [`records::RecordSource`], which owns the RAM cache,
//! prefetch and the compute of each expert as it arrives), and
//! compute-at-store ([`remote::ComputeSource`]), where the store runs the
//! experts next to its disk and returns the weighted sum.

pub mod gate;
pub mod local;
pub mod records;
pub mod release;
pub mod remote;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use waste_kernels::PackedExpert;
use waste_model::Routing;

use crate::Result;

pub use waste_format::io::{Priority, RecordBytes};

/// A parsed expert record, ready for the kernels.
pub type Expert = PackedExpert<RecordBytes>;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Called once per requested expert, on any thread, with its record bytes.
pub type Done = Arc<dyn Fn(u32, u32, Result<RecordBytes>) + Send + Sync>;

/// Reads expert records (local files or a remote store).
pub trait RecordReader: Send + Sync + 'static {
    /// Starts reading `ids` of `layer`; `done(layer, expert, bytes)` runs
    /// once for each as it completes (or fails).
    fn fetch(&self, layer: u32, ids: &[u32], priority: Priority, done: Done);
    /// `layer` needs `chosen` now: prefetch reads of it not started yet are
    /// promoted (chosen) or withdrawn (the rest). Returns the withdrawn
    /// experts, whose `done` will never run. Readers that cannot reach
    /// their queue keep everything.
    fn settle(&self, layer: u32, chosen: &[u32]) -> Vec<u32> {
        let _ = (layer, chosen);
        Vec::new()
    }
    /// A newer guess for `layer` replaces the last: its prefetch reads not
    /// finished yet outside `guess` are withdrawn (returned; their `done`
    /// will never run).
    fn revise(&self, layer: u32, guess: &[u32]) -> Vec<u32> {
        let _ = (layer, guess);
        Vec::new()
    }
    /// Bytes of one record of `layer`, if the layer has experts.
    fn record_bytes(&self, layer: u32) -> Option<u64>;
    /// Bytes of the plan's in-flight share this reader's buffers do not
    /// hold now: never made, or detached into the cache with the records
    /// read into them. The cache may hold that much beyond its own share,
    /// and gives back what reads are about to take of it
    /// ([`Self::reserve_taken_by`]) before they are issued, so cache and
    /// buffers together stay within the two shares (the plan's in-flight
    /// term is the pool's cap; a decode step uses a small part of it).
    fn idle_reserve(&self) -> u64 {
        0
    }
    /// How much of [`Self::idle_reserve`] `reads` reads of `layer`'s
    /// records issued now would take: what they need beyond the buffers
    /// free for reuse. A cache holding the idle reserve gives that much
    /// back first.
    fn reserve_taken_by(&self, layer: u32, reads: usize) -> u64 {
        let _ = (layer, reads);
        0
    }
    /// `local` or `fetch`.
    fn mode(&self) -> &'static str;
}

/// What one layer's expert step cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerStats {
    /// Distinct experts the layer needed.
    pub requested: u64,
    /// Of those, already in RAM when asked for.
    pub retained: u64,
    /// Expert bytes this step asked the disk (or the store) for: its
    /// demand reads and its guesses, less the guesses it withdrew (never
    /// read, or only the segments already running). Over a generation, the
    /// bytes it read, to within those segments.
    pub bytes_read: u64,
    /// Of the requested, how many the prefetch had guessed.
    pub guessed_right: u64,
    /// Experts the prefetch guessed for this layer.
    pub guessed: u64,
}

impl std::ops::AddAssign for LayerStats {
    fn add_assign(&mut self, o: Self) {
        self.requested += o.requested;
        self.retained += o.retained;
        self.bytes_read += o.bytes_read;
        self.guessed_right += o.guessed_right;
        self.guessed += o.guessed;
    }
}

/// Tags one generation's forward steps, so a source can keep concurrent
/// generations' guesses apart (the store keeps one per stream). Unique
/// within a node and unrelated across nodes ([`crate::engine::Engine`]
/// hands them out).
pub type Stream = u64;

/// Produces a MoE layer's routed contribution.
pub trait ExpertSource: Send + Sync + 'static {
    /// The routed experts' weighted sum in the expert space, (n, d_expert),
    /// for `routing` (which stays valid for the call), a step of `stream`.
    fn routed_sum(
        &self,
        stream: Stream,
        routing: Arc<Routing>,
    ) -> BoxFuture<'_, Result<(Vec<f32>, LayerStats)>>;
    /// [`Self::routed_sum`] computed now on the calling thread, which must
    /// be one of the forward pool's (its experts split over the pool there),
    /// when every expert `routing` needs is in RAM: a warm step then never
    /// leaves the pool. None, with nothing changed, when one must be read
    /// (or the source has no RAM of its own): call `routed_sum` then.
    fn cached_sum(
        &self,
        stream: Stream,
        routing: &Arc<Routing>,
    ) -> Option<Result<(Vec<f32>, LayerStats)>> {
        let _ = (stream, routing);
        None
    }
    /// A hint: `stream`'s next step at `layer` will probably need `ids`.
    /// Sources without a cache ignore it; the node's own cache keeps one
    /// guess per layer for all streams. Returns the bytes of the reads it
    /// issued, less those of an earlier guess it withdrew (see
    /// [`LayerStats::bytes_read`]).
    fn prefetch(&self, stream: Stream, layer: u32, ids: &[u32]) -> u64;
    /// `local`, `fetch` or `compute-at-store`.
    fn mode(&self) -> &'static str;
    /// Bytes of one expert record of `layer` (for the RAM plan and stats).
    fn record_bytes(&self, layer: u32) -> Option<u64>;
    /// Bytes read from disk (or received) so far, demand and prefetch.
    fn total_bytes_read(&self) -> u64;
    /// Resolves once the reads the source issued at load to fill its cache
    /// have landed (or failed); at once for a source that warms nothing.
    fn warmed(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use waste_kernels::{Format, quantize_expert};

    use super::Expert;

    /// A small valid q8 record with deterministic weights.
    pub fn tiny_expert(seed: u32) -> Arc<Expert> {
        let (d, f) = (64, 32);
        let w = |n: usize, off: u32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as f32 + off as f32 * 7.0) * 0.37).sin() * 0.1)
                .collect()
        };
        let (bytes, _) = quantize_expert(
            [Format::Q8; 3],
            d,
            f,
            &w(d * f, seed),
            &w(d * f, seed + 1),
            &w(d * f, seed + 2),
        )
        .unwrap();
        Arc::new(Expert::parse(super::RecordBytes::Owned(bytes)).unwrap())
    }
}
