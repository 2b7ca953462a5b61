//! Sessions: a session id keeps a sequence's attention state between
//! requests, so a multi-turn chat prefills only the new turn. A request
//! takes its session out while it runs (a second request on the same id is
//! refused) and puts it back at the end. The RAM plan holds `max` states at
//! the full context: every kept session (idle or taken) and every request
//! generating without one counts, and the least recently used idle sessions
//! are dropped before a new state would pass that count, not after.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

pub use waste_model::SessionState;

use crate::{Error, Result};

#[derive(Debug)]
enum Slot<S> {
    Idle(S, Instant),
    Busy,
}

#[derive(Debug)]
struct Slots<S> {
    named: HashMap<String, Slot<S>>,
    /// Requests generating without a session, each with a state of its own.
    unnamed: usize,
}

impl<S> Slots<S> {
    /// Drops least recently used idle sessions while the states counted
    /// pass `max` (taken sessions and unnamed requests cannot be dropped).
    fn fit(&mut self, max: usize) {
        while self.named.len() + self.unnamed > max {
            let oldest = self
                .named
                .iter()
                .filter_map(|(k, v)| match v {
                    Slot::Idle(_, t) => Some((*t, k.clone())),
                    Slot::Busy => None,
                })
                .min();
            match oldest {
                Some((_, k)) => {
                    self.named.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// The sessions of a node (`S`: a sequence's state).
#[derive(Debug)]
pub struct Sessions<S = SessionState> {
    max: usize,
    slots: Mutex<Slots<S>>,
}

/// A request generating without a session, counted while it lives.
#[derive(Debug)]
pub struct Unnamed<'a, S> {
    sessions: &'a Sessions<S>,
}

impl<S> Drop for Unnamed<'_, S> {
    fn drop(&mut self) {
        self.sessions.lock().unnamed -= 1;
    }
}

impl<S> Sessions<S> {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            slots: Mutex::new(Slots {
                named: HashMap::new(),
                unnamed: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots<S>> {
        self.slots.lock().expect("sessions")
    }

    /// Takes session `id` for a request: its state, or None for a new one
    /// (for which room is made at once).
    pub fn take(&self, id: &str) -> Result<Option<S>> {
        let mut slots = self.lock();
        match slots.named.insert(id.to_string(), Slot::Busy) {
            Some(Slot::Busy) => Err(Error::SessionBusy(id.to_string())),
            Some(Slot::Idle(s, _)) => Ok(Some(s)),
            None => {
                slots.fit(self.max);
                Ok(None)
            }
        }
    }

    /// Counts a request about to generate without a session (its state
    /// made after this), making room for it; the count drops with the
    /// returned guard.
    pub fn unnamed(&self) -> Unnamed<'_, S> {
        let mut slots = self.lock();
        slots.unnamed += 1;
        slots.fit(self.max);
        Unnamed { sessions: self }
    }

    /// Returns a session's state after its request; None drops it (the
    /// request failed and its state cannot be trusted).
    pub fn put(&self, id: &str, state: Option<S>) {
        let mut slots = self.lock();
        match state {
            Some(s) => {
                slots
                    .named
                    .insert(id.to_string(), Slot::Idle(s, Instant::now()));
            }
            None => {
                slots.named.remove(id);
            }
        }
        slots.fit(self.max);
    }

    /// Idle sessions kept now.
    pub fn idle(&self) -> usize {
        self.lock()
            .named
            .values()
            .filter(|s| matches!(s, Slot::Idle(..)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_state_drops_the_oldest_idle_session_before_it_is_made() {
        let s = Sessions::<u32>::new(2);
        for id in ["a", "b"] {
            assert!(s.take(id).unwrap().is_none());
            s.put(id, Some(1));
        }
        assert_eq!(s.idle(), 2);
        // A new session: the oldest idle one goes now, not when it ends.
        assert!(s.take("c").unwrap().is_none());
        assert_eq!(s.idle(), 1);
        assert!(s.take("a").unwrap().is_none(), "a was dropped");
        assert_eq!(s.idle(), 0, "b went for a");
        assert!(matches!(s.take("a"), Err(Error::SessionBusy(_))));
        // Two taken sessions fill the count: a request without one cannot
        // drop them (the node lets at most `max` generate at once).
        let u = s.unnamed();
        s.put("c", Some(3));
        assert_eq!(s.idle(), 0, "c's state went: a and the unnamed fill 2");
        drop(u);
        s.put("a", Some(4));
        let _u = s.unnamed();
        assert_eq!(s.idle(), 1, "a and the unnamed request");
        assert_eq!(s.take("a").unwrap(), Some(4));
    }
}
