//! PrefetchExperts: each stream's guess (a node's generation) of the
//! experts its next ComputeExperts will use. Each guessed record is read
//! at prefetch priority into a slot, where that stream's ComputeExperts
//! takes it instead of reading it; the layer's other slots are then
//! dropped. A new guess replaces its stream's old one: slots it asks for
//! again carry over (no second read), the others are dropped and their
//! reads not started yet are skipped. All guesses together stay under
//! half the IO engine's buffer bound, so demand reads always find buffers.
//! Room goes first come, first served: evicting another stream's guess
//! would waste the reads it already made, and that stream is likely to
//! use them sooner than the new guess. A guess older than the TTL lost its
//! stream (a cancelled generation, a node gone) and gives its room up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use waste_format::io::{Check, OnRecord, Priority, Record};

use crate::error::Result;

/// A read's outcome, as the IO engine gives it.
type RecordResult = waste_format::Result<Record>;
use crate::fetch::validate_fetch;
use crate::store::Store;

/// One guessed record: its read's outcome once it lands.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    result: Mutex<Option<RecordResult>>,
    landed: Notify,
    /// Skips the read if it has not started when the guess is dropped.
    cancel: Arc<AtomicBool>,
    bytes: u64,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Option<RecordResult>> {
        self.result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn land(&self, r: RecordResult) {
        *self.lock() = Some(r);
        // One waiter at most (the request that took the slot); a permit is
        // stored if it is not waiting yet.
        self.landed.notify_one();
    }

    /// Skips the read if it has not started (the slot is being dropped).
    fn cancel_read(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// True once the read finished (well or not).
    pub(crate) fn has_landed(&self) -> bool {
        self.lock().is_some()
    }

    /// The read's outcome, waiting for it to land.
    pub(crate) async fn take(&self) -> RecordResult {
        loop {
            if let Some(r) = self.lock().take() {
                return r;
            }
            self.landed.notified().await;
        }
    }
}

/// One stream's guess: a slot per (layer, expert).
#[derive(Debug)]
struct Guess {
    slots: HashMap<(u32, u32), Arc<Slot>>,
    made: Instant,
}

impl Guess {
    fn bytes(&self) -> u64 {
        self.slots.values().map(|s| s.bytes).sum()
    }

    /// Skips the reads of every slot not started yet (the guess is being
    /// dropped).
    fn cancel_reads(&self) {
        self.slots.values().for_each(|s| s.cancel_read());
    }
}

/// The guesses of every stream (a node's generation).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    guesses: Mutex<HashMap<u64, Guess>>,
}

impl Staging {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Guess>> {
        self.guesses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// For a ComputeExperts of `stream` on `layer`: the slot of each of
    /// `experts` that the stream's guess holds (its record is used once).
    /// The guess's other slots of `layer` are dropped: the layer has routed.
    pub(crate) fn take_layer(
        &self,
        stream: u64,
        layer: u32,
        experts: &[u32],
    ) -> Vec<Option<Arc<Slot>>> {
        let mut guesses = self.lock();
        let Some(g) = guesses.get_mut(&stream) else {
            return vec![None; experts.len()];
        };
        let taken = experts
            .iter()
            .map(|&e| g.slots.remove(&(layer, e)))
            .collect();
        g.slots.retain(|&(l, _), s| {
            l != layer || {
                s.cancel_read();
                false
            }
        });
        if g.slots.is_empty() {
            guesses.remove(&stream);
        }
        taken
    }
}

impl Store {
    /// Serves one PrefetchExperts request: (records staged, bytes queued).
    pub fn prefetch(&self, stream: u64, ids: &[(u32, u32)]) -> Result<(u32, u64)> {
        let _permit = self.admit(Priority::Prefetch)?;
        let r = self.prefetch_admitted(stream, ids);
        self.count_outcome(&r);
        r
    }

    fn prefetch_admitted(&self, stream: u64, ids: &[(u32, u32)]) -> Result<(u32, u64)> {
        if !ids.is_empty() {
            validate_fetch(self.index(), ids, self.limits().max_fetch_experts)?;
        }
        let bound = self.reader().engine().pool().limit_bytes() as u64 / 2;
        let ttl = Duration::from_millis(self.limits().guess_ttl_ms);
        let now = Instant::now();
        let mut to_read = Vec::new();
        let (staged, queued) = {
            let mut guesses = self.staging().lock();
            let mut old = guesses.remove(&stream).map(|g| g.slots).unwrap_or_default();
            // Guesses of streams that went away give their room up.
            guesses.retain(|_, g| {
                now.duration_since(g.made) <= ttl || {
                    g.cancel_reads();
                    false
                }
            });
            let others: u64 = guesses.values().map(Guess::bytes).sum();
            let room = bound.saturating_sub(others);
            let mut slots = HashMap::new();
            let mut held = 0u64;
            for &id in ids {
                let carried = old.remove(&id);
                let bytes = match &carried {
                    Some(s) => s.bytes,
                    None => self.reader().experts().locate(id.0, id.1)?.len as u64,
                };
                // Guesses come most likely first: keep those that fit.
                if held + bytes > room {
                    // A carried slot is dropped with the old guess below.
                    old.extend(carried.map(|s| (id, s)));
                    break;
                }
                held += bytes;
                let slot = carried.unwrap_or_else(|| {
                    let s = Arc::new(Slot {
                        bytes,
                        ..Slot::default()
                    });
                    to_read.push((id, Arc::clone(&s)));
                    s
                });
                slots.insert(id, slot);
            }
            old.values().for_each(|s| s.cancel_read());
            let queued = to_read.iter().map(|(_, s)| s.bytes).sum();
            let staged = slots.len() as u32;
            if !slots.is_empty() {
                guesses.insert(stream, Guess { slots, made: now });
            }
            (staged, queued)
        };
        // One read per slot, each with its slot's cancel flag.
        for (id, slot) in to_read {
            let target = Arc::clone(&slot);
            let on_record: OnRecord = Arc::new(move |_, r| target.land(r));
            self.reader().read(
                &[id],
                Priority::Prefetch,
                Check::Here,
                &on_record,
                Some(&slot.cancel),
            )?;
        }
        Ok((staged, queued))
    }
}
