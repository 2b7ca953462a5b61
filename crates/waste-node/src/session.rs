//! Sessions: a session id keeps a sequence's attention state between
//! requests, so a multi-turn chat prefills only the new turn. A request
//! takes its session out while it runs (a second request on the same id is
//! refused) and puts it back at the end; the least recently used idle
//! session is dropped when there are too many.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

pub use waste_model::SessionState;

use crate::{Error, Result};

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
