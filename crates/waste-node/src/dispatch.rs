//! Starting a generation, for every front end (gRPC Generate and the HTTP
//! API alike): the session's state is taken (one request per session at a
//! time), the request waits its turn for a generation slot (first come,
//! first served; counted in the queue gauge), runs, its statistics go to the
//! metrics, and the session gets its state back.

use std::sync::Arc;

use tokio::sync::mpsc;
use waste_model::sampling::json::vocab_bytes;

use crate::Result;
use crate::generate::{self, Event, GenerateJob};
use crate::node::Node;

impl Node {
    /// Starts `job` (on session `session`, if given); its events arrive on
    /// the returned channel. Dropping the receiver cancels the generation.
    pub fn start_generation(
        self: &Arc<Self>,
        job: GenerateJob,
        session: Option<String>,
    ) -> Result<mpsc::Receiver<Result<Event>>> {
        let state = match &session {
            Some(id) => self.sessions.take(id)?,
            None => None,
        };
        let node = Arc::clone(self);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            node.metrics.queued.inc();
            let slot = node.slots.acquire().await;
            node.metrics.queued.dec();
            let Ok(_slot) = slot else {
                return;
            };
            node.metrics.active.inc();
            let state = state.unwrap_or_else(|| generate::fresh_state(&node.engine, node.ctx_size));
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

    /// The bytes of every token, for JSON mode (built on first use).
    pub fn json_vocab(&self) -> Option<&[Option<Box<[u8]>>]> {
        let tokenizer = self.tokenizer.as_ref()?;
        Some(self.json_vocab.get_or_init(|| vocab_bytes(tokenizer)))
    }
}
