//! A request to stop a conversion early (SIGINT or SIGTERM, set by the
//! command line). The converter looks at it between backbone shards and
//! after each expert written and stops with [`crate::Error::Interrupted`]:
//! what is finished stays journaled, so the same command resumes there.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks the running conversion to stop at its next check.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
