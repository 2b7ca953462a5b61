//! PrefetchExperts: the one guess a node sent of the experts its next
//! ComputeExperts will use. Each guessed record is read at prefetch
//! priority into a slot, where ComputeExperts takes it instead of reading
//! it. A new guess replaces the old: slots it asks for again carry over
//! (no second read), the others are dropped and their reads not started
//! yet are skipped. The records a guess holds stay under half the IO
//! engine's buffer bound, so demand reads always find buffers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use waste_format::io::{OnRecord, Priority, Record};

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

/// The current guess: a slot per (layer, expert).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    slots: Mutex<HashMap<(u32, u32), Arc<Slot>>>,
}

impl Staging {
    fn lock(&self) -> MutexGuard<'_, HashMap<(u32, u32), Arc<Slot>>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The slot of `id`, removed from the guess (its record is used once).
    pub(crate) fn take(&self, id: (u32, u32)) -> Option<Arc<Slot>> {
        self.lock().remove(&id)
    }
}

impl Store {
    /// Serves one PrefetchExperts request: (records staged, bytes queued).
    pub fn prefetch(&self, ids: &[(u32, u32)]) -> Result<(u32, u64)> {
        let _permit = self.admit(Priority::Prefetch)?;
        let r = self.prefetch_admitted(ids);
        self.count_outcome(&r);
        r
    }

    fn prefetch_admitted(&self, ids: &[(u32, u32)]) -> Result<(u32, u64)> {
        if !ids.is_empty() {
            validate_fetch(self.index(), ids, self.limits().max_fetch_experts)?;
        }
        let bound = self.reader().engine().pool().limit_bytes() as u64 / 2;
        let mut to_read = Vec::new();
        let (staged, queued) = {
            let mut slots = self.staging().lock();
            let mut old = std::mem::take(&mut *slots);
            let mut held = 0u64;
            for &id in ids {
                let carried = old.remove(&id);
                let bytes = match &carried {
                    Some(s) => s.bytes,
                    None => self.reader().experts().locate(id.0, id.1)?.len as u64,
                };
                // Guesses come most likely first: keep those that fit.
                if held + bytes > bound {
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
            for s in old.values() {
                s.cancel.store(true, Ordering::Relaxed);
            }
            let queued = to_read.iter().map(|(_, s)| s.bytes).sum();
            (slots.len() as u32, queued)
        };
        // One read per slot, each with its slot's cancel flag.
        for (id, slot) in to_read {
            let target = Arc::clone(&slot);
            let on_record: OnRecord = Arc::new(move |_, r| target.land(r));
            self.reader()
                .read(&[id], Priority::Prefetch, &on_record, Some(&slot.cancel))?;
        }
        Ok((staged, queued))
    }
}
