//! Sessions: a session id keeps a sequence's attention state between
//! requests, so a multi-turn chat prefills only the new turn. A request
//! takes its session out while it runs (a second request on the same id is
//! refused) and puts it back at the end; the least recently used idle
//! session is dropped when there are too many.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use waste_model::KvCache;

use crate::{Error, Result};

/// The state a session carries: the cache and the tokens it holds.
#[derive(Debug)]
pub struct SessionState {
    pub cache: KvCache,
    /// Exactly the tokens whose state is in `cache`.
    pub tokens: Vec<u32>,
}

#[derive(Debug)]
enum Slot {
    Idle(SessionState, Instant),
    Busy,
}

#[derive(Debug)]
pub struct Sessions {
    max: usize,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Sessions {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Takes session `id` for a request: its state, or None for a new one.
    pub fn take(&self, id: &str) -> Result<Option<SessionState>> {
        let mut slots = self.slots.lock().expect("sessions");
        match slots.insert(id.to_string(), Slot::Busy) {
            Some(Slot::Busy) => Err(Error::SessionBusy(id.to_string())),
            Some(Slot::Idle(s, _)) => Ok(Some(s)),
            None => Ok(None),
        }
    }

    /// Returns a session's state after its request; None drops it (the
    /// request failed and its state cannot be trusted).
    pub fn put(&self, id: &str, state: Option<SessionState>) {
        let mut slots = self.slots.lock().expect("sessions");
        match state {
            Some(s) => {
                slots.insert(id.to_string(), Slot::Idle(s, Instant::now()));
            }
            None => {
                slots.remove(id);
            }
        }
        while slots.len() > self.max {
            let oldest = slots
                .iter()
                .filter_map(|(k, v)| match v {
                    Slot::Idle(_, t) => Some((*t, k.clone())),
                    Slot::Busy => None,
                })
                .min();
            match oldest {
                Some((_, k)) => {
                    slots.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// Makes `state` hold a prefix of `prompt` and returns how many prompt
/// tokens it already covers. At least one token is left to feed (its logits
/// start the generation). A state that cannot rewind (recurrent layers) is
/// reset unless it is a prefix already.
pub fn reuse_prefix(state: &mut SessionState, prompt: &[u32]) -> usize {
    let common = state
        .tokens
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count();
    let keep = common.min(prompt.len().saturating_sub(1));
    if keep == state.tokens.len() || state.cache.truncate(keep).is_ok() {
        state.tokens.truncate(keep);
        keep
    } else {
        state.cache.clear();
        state.tokens.clear();
        0
    }
}
