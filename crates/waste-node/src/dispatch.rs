//! Starting a generation, for every front end (gRPC Generate and the HTTP
//! API alike): the session's state is taken (one request per session at a
//! time), the request is admitted when fewer than `generating +
//! max_queue` are in the node (else refused with `Overloaded`), waits its
//! turn for a generation slot (first come, first served; counted in the
//! queue gauge), runs, its statistics go to the metrics, and the session
//! gets its state back. Refusals are counted by reason. At most
//! `max_sessions` generate at once whatever `max_concurrent` says: each
//! holds a context's state, and the RAM plan holds that many.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, mpsc};
use waste_model::sampling::json::vocab_bytes;

use crate::generate::{self, Event, GenerateJob};
use crate::node::Node;
use crate::session::SessionState;
use crate::{Error, Result};

impl Node {
    /// Starts `job` (on session `session`, if given); its events arrive on
    /// the returned channel. Dropping the receiver cancels the generation.
    pub fn start_generation(
        self: &Arc<Self>,
        job: GenerateJob,
        session: Option<String>,
    ) -> Result<mpsc::Receiver<Result<Event>>> {
        let admitted = self.admit(session.as_deref());
        if let Err(e) = &admitted {
            self.metrics.rejected(e);
        }
        let (admission, state) = admitted?;
        let node = Arc::clone(self);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let _admission = admission;
            node.metrics.queued.inc();
            let slot = node.slots.acquire().await;
            node.metrics.queued.dec();
            let Ok(_slot) = slot else {
                return;
            };
            node.metrics.active.inc();
            // Counted before its state is made: an idle session may go for it.
            let _unnamed = session.is_none().then(|| node.sessions.unnamed());
            let state = state.unwrap_or_else(|| generate::fresh_state(&node, node.ctx_size));
            let vocab = if job.json { node.json_vocab() } else { None };
            let (state, summary) = generate::run(
                &node.engine,
                node.tokenizer.as_ref(),
                vocab,
                state,
                job,
                &tx,
            )
            .await;
            node.metrics.active.dec();
            match &summary {
                Some(s) => node.metrics.finished(s),
                None => node.metrics.failed(),
            }
            if let Some(id) = session {
                node.sessions.put(&id, state);
            }
        });
        Ok(rx)
    }

    /// A place in the node (queued or generating) and the session's state.
    fn admit(&self, session: Option<&str>) -> Result<(OwnedSemaphorePermit, Option<SessionState>)> {
        let permit = Arc::clone(&self.admission)
            .try_acquire_owned()
            .map_err(|_| Error::Overloaded {
                running: self.config.generating(),
                queued: self.config.max_queue,
            })?;
        let state = match session {
            Some(id) => self.sessions.take(id)?,
            None => None,
        };
        Ok((permit, state))
    }

    /// The bytes of every token, for JSON mode (built on first use).
    pub fn json_vocab(&self) -> Option<&[Option<Box<[u8]>>]> {
        let tokenizer = self.tokenizer.as_ref()?;
        Some(self.json_vocab.get_or_init(|| vocab_bytes(tokenizer)))
    }
}
