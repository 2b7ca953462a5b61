//! One Generate request, end to end: the node's asynchronous driver of
//! [`waste_model::token_loop`]. The loop decides what to prefill (the
//! session's known prefix is reused), which token to sample, which text it
//! releases and when to end; this file runs each forward step through the
//! [`Engine`] (each routed expert read once per layer for the whole prompt),
//! streams the pieces to the client and keeps the request's statistics.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use waste_model::sampling::Logprobs;
use waste_model::sampling::json::JsonConstraint;
use waste_model::token_loop::{self, Next, Step};
use waste_model::{FinishReason, LogitsFor, TokenLoop, Tokenizer};

use crate::engine::Engine;
use crate::node::Node;
use crate::source::LayerStats;
use crate::{Error, Result};

pub use waste_model::{GenerateJob, SessionState};

/// Streamed to the client.
#[derive(Debug, Clone)]
pub enum Event {
    Token {
        text: String,
        ids: Vec<u32>,
        /// With `GenerateJob::logprobs`: the token's and the top alternatives'.
        logprobs: Option<Logprobs>,
    },
    Done(Summary),
}

/// The final statistics of a generation.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub finish: Option<FinishReason>,
    pub prompt_tokens: usize,
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
    pub time_to_first_token: Duration,
    pub total: Duration,
    /// Expert statistics of the decode steps (after the first token).
    pub decode: LayerStats,
    pub decode_steps: usize,
    pub prefill: LayerStats,
    pub matched_stop: Option<String>,
    /// Seconds of each decode step, in order.
    pub step_seconds: Vec<f32>,
}

impl Summary {
    pub fn decode_tokens_per_second(&self) -> f64 {
        let secs = (self.total - self.time_to_first_token).as_secs_f64();
        if self.decode_steps > 0 && secs > 0.0 {
            self.decode_steps as f64 / secs
        } else {
            0.0
        }
    }

    pub fn prefill_tokens_per_second(&self) -> f64 {
        let secs = self.time_to_first_token.as_secs_f64();
        let fed = self.prompt_tokens - self.cached_prompt_tokens;
        if secs > 0.0 { fed as f64 / secs } else { 0.0 }
    }

    /// Expert bytes read per decoded token.
    pub fn bytes_per_token(&self) -> f64 {
        if self.decode_steps > 0 {
            self.decode.bytes_read as f64 / self.decode_steps as f64
        } else {
            0.0
        }
    }

    /// Share of the decode steps' experts already in RAM when asked for.
    pub fn retention(&self) -> f64 {
        let s = if self.decode.requested > 0 {
            self.decode
        } else {
            self.prefill
        };
        if s.requested > 0 {
            s.retained as f64 / s.requested as f64
        } else {
            1.0
        }
    }

    /// Share of the experts the prefetch guessed that were then used.
    pub fn prefetch_accuracy(&self) -> f64 {
        let s = self.decode;
        if s.guessed > 0 {
            s.guessed_right as f64 / s.guessed as f64
        } else {
            0.0
        }
    }
}

/// Runs `job` on `state` (a fresh one or a session's). Events go to `tx`;
/// when its receiver is gone the generation stops. Returns the state (None
/// when an error left it inconsistent) and the statistics when it finished.
/// `json_vocab` ([`waste_model::sampling::json::vocab_bytes`]) is needed
/// for `job.json`.
pub async fn run(
    engine: &Engine,
    tokenizer: Option<&Tokenizer>,
    json_vocab: Option<&[Option<Box<[u8]>>]>,
    mut state: SessionState,
    job: GenerateJob,
    tx: &mpsc::Sender<Result<Event>>,
) -> (Option<SessionState>, Option<Summary>) {
    let start = Instant::now();
    let mut summary = Summary {
        prompt_tokens: job.prompt.len(),
        ..Summary::default()
    };
    summary.cached_prompt_tokens = match token_loop::prefill(&mut state, &job.prompt) {
        Ok(cached) => cached,
        Err(e) => {
            let _ = tx.send(Err(overflow(e))).await;
            return (Some(state), None);
        }
    };
    let stream = engine.new_stream();
    let (cache, logits) = engine
        .forward(
            stream,
            job.prompt[summary.cached_prompt_tokens..].to_vec(),
            state.cache,
            LogitsFor::Last,
        )
        .await;
    let mut logits = match logits {
        Ok((l, stats)) => {
            summary.prefill = stats;
            l
        }
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return (None, None);
        }
    };
    let mut state = SessionState {
        cache,
        tokens: job.prompt.clone(),
    };
    summary.time_to_first_token = start.elapsed();
    // The decode steps' phases only.
    engine.phases.take();

    let json = match (job.json, json_vocab) {
        (true, Some(v)) => Some(JsonConstraint::object(v)),
        (true, None) => {
            let e = Error::BadRequest("JSON mode needs a tokenizer; this backbone has none".into());
            let _ = tx.send(Err(e)).await;
            return (Some(state), None);
        }
        (false, _) => None,
    };
    let mut tokens = TokenLoop::new(&job, tokenizer, json);
    let finish = loop {
        let sampled = match tokens.step(&mut logits) {
            Ok(Step::Token(s)) => s,
            Ok(Step::End { reason, .. }) => break reason,
            Err(e) => {
                let _ = tx.send(Err(Error::Tokenizer(e))).await;
                return (None, None);
            }
        };
        let delivered = tx
            .send(Ok(Event::Token {
                text: sampled.text,
                ids: vec![sampled.token],
                logprobs: sampled.logprobs,
            }))
            .await
            .is_ok();
        let token = match tokens.next(delivered, &state.cache) {
            Next::Feed(token) => token,
            Next::End(reason) => break reason,
        };
        let step_start = Instant::now();
        let (cache, step) = engine
            .forward(stream, vec![token], state.cache, LogitsFor::Last)
            .await;
        state.cache = cache;
        match step {
            Ok((l, stats)) => {
                logits = l;
                summary.decode += stats;
                summary.decode_steps += 1;
                summary
                    .step_seconds
                    .push(step_start.elapsed().as_secs_f32());
                state.tokens.push(token);
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return (None, None);
            }
        }
    };
    let finished = tokens.finish(finish);
    summary.generated_tokens = tokens.generated();
    summary.matched_stop = tokens.matched_stop().map(str::to_owned);
    if !finished.tail.is_empty() {
        let _ = tx
            .send(Ok(Event::Token {
                text: finished.tail,
                ids: Vec::new(),
                logprobs: None,
            }))
            .await;
    }
    summary.finish = Some(finished.reason);
    summary.total = start.elapsed();
    if *LOG_PHASES {
        log_phases(engine, &summary);
    }
    let _ = tx.send(Ok(Event::Done(summary.clone()))).await;
    (Some(state), Some(summary))
}

/// `WASTE_PHASES` set: each generation logs where its decode steps spent
/// their time.
static LOG_PHASES: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("WASTE_PHASES").is_some());

/// One log line: milliseconds per decode step in each phase of the
/// forward step ([`crate::engine::Phase`]), the step in all, and outside
/// it (sampling, detokenizing and streaming the token).
fn log_phases(engine: &Engine, s: &Summary) {
    let steps = s.decode_steps.max(1) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / steps;
    let phases: Vec<String> = engine
        .phases
        .take()
        .into_iter()
        .map(|(p, t)| format!("{} {:.3}", p.name(), ms(t)))
        .collect();
    let forward: f64 = s.step_seconds.iter().map(|&x| f64::from(x)).sum();
    let decode = (s.total - s.time_to_first_token).as_secs_f64();
    tracing::info!(
        "decode ms per step: {}; forward {:.3}, outside it {:.3} ({} steps)",
        phases.join(", "),
        forward * 1e3 / steps,
        (decode - forward).max(0.0) * 1e3 / steps,
        s.decode_steps
    );
}

/// The node's own error for a prompt past the context, so that gRPC and
/// HTTP report it as they report the request checks' refusal.
fn overflow(e: waste_model::Error) -> Error {
    match e {
        waste_model::Error::ContextOverflow { needed, capacity } => {
            Error::ContextOverflow { needed, capacity }
        }
        other => other.into(),
    }
}

/// A fresh state for a new sequence of up to `ctx` positions, its cache
/// of the node's type.
pub fn fresh_state(node: &Node, ctx: usize) -> SessionState {
    SessionState::new(node.engine.model.config(), ctx, node.config.cache_type)
}
