//! One Generate request, end to end: reuse the session's state for the
//! prompt's known prefix, prefill the rest (each routed expert read once per
//! layer for the whole prompt), then sample and feed back one token at a
//! time, streaming text pieces, until an end-of-sequence token, a stop
//! string, the token limit, the end of the context or the client leaving.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use waste_model::sampling::Logprobs;
use waste_model::sampling::json::JsonConstraint;
use waste_model::{
    DecodeStream, FinishReason, KvCache, LogitsFor, Sampler, SamplingParams, StopMatcher, Tokenizer,
};

use crate::engine::Engine;
use crate::session::{SessionState, reuse_prefix};
use crate::source::LayerStats;
use crate::{Error, Result};

/// What the caller asked for, tokenized.
#[derive(Debug, Clone)]
pub struct GenerateJob {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Tokens that end the generation (unless `params.ignore_eos`).
    pub eos: Vec<u32>,
    pub logprobs: bool,
    /// Alternatives reported with each token's logprob (0..=20).
    pub top_logprobs: usize,
    /// JSON mode: only tokens that continue a JSON object; the generation
    /// ends when the object closes.
    pub json: bool,
    /// Decode special tokens into the text too (tool-call markers are
    /// special tokens in most vocabularies).
    pub keep_special_text: bool,
}

impl GenerateJob {
    /// A job with the given prompt and sampling, no extras.
    pub fn new(prompt: Vec<u32>, params: SamplingParams, eos: Vec<u32>) -> Self {
        Self {
            prompt,
            params,
            eos,
            logprobs: false,
            top_logprobs: 0,
            json: false,
            keep_special_text: false,
        }
    }
}

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
    let cached = reuse_prefix(&mut state, &job.prompt);
    summary.cached_prompt_tokens = cached;
    let capacity = state.cache.capacity();
    if job.prompt.len() > capacity {
        let _ = tx
            .send(Err(Error::ContextOverflow {
                needed: job.prompt.len(),
                capacity,
            }))
            .await;
        return (Some(state), None);
    }
    let stream = engine.new_stream();
    let (cache, logits) = engine
        .forward(
            stream,
            job.prompt[cached..].to_vec(),
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

    let mut sampler = Sampler::new(job.params.clone());
    let mut stops = StopMatcher::new(&job.params.stop);
    let mut detok = DecodeStream::new(!job.keep_special_text);
    let mut history = job.prompt.clone();
    let mut json = match (job.json, json_vocab) {
        (true, Some(v)) => Some(JsonConstraint::object(v)),
        (true, None) => {
            let e = Error::BadRequest("JSON mode needs a tokenizer; this backbone has none".into());
            let _ = tx.send(Err(e)).await;
            return (Some(state), None);
        }
        (false, _) => None,
    };
    let finish = loop {
        if job
            .params
            .max_tokens
            .is_some_and(|m| summary.generated_tokens >= m)
        {
            break FinishReason::Length;
        }
        if let Some(j) = &json
            && j.mask(&mut logits) == 0
        {
            // Nothing in the vocabulary continues the JSON text.
            break FinishReason::Stop;
        }
        let token = sampler.sample(&logits, &history);
        let logprobs = job
            .logprobs
            .then(|| sampler.logprobs(token, job.top_logprobs));
        summary.generated_tokens += 1;
        history.push(token);
        if json.is_none() && !job.params.ignore_eos && job.eos.contains(&token) {
            break FinishReason::Stop;
        }
        let closed = json
            .as_mut()
            .is_some_and(|j| j.advance(token) && j.is_complete());
        let mut text = String::new();
        if let Some(tok) = tokenizer {
            match detok.step(tok, token) {
                Ok(Some(piece)) => {
                    let step = stops.push(&piece);
                    text = step.text;
                    if let Some(i) = step.stop {
                        summary.matched_stop = job.params.stop.get(i).cloned();
                        let _ = tx
                            .send(Ok(Event::Token {
                                text,
                                ids: vec![token],
                                logprobs,
                            }))
                            .await;
                        break FinishReason::Stop;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let _ = tx.send(Err(Error::Tokenizer(e))).await;
                    return (None, None);
                }
            }
        }
        if tx
            .send(Ok(Event::Token {
                text,
                ids: vec![token],
                logprobs,
            }))
            .await
            .is_err()
        {
            break FinishReason::Cancelled;
        }
        if closed {
            break FinishReason::Stop;
        }
        if state.tokens.len() + 1 > capacity {
            break FinishReason::Context;
        }
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
    // Text held back (an incomplete character, a partial stop string) is
    // released unless a stop string ended the generation; a stop string
    // completed by the released text still ends it there.
    let mut finish = finish;
    if summary.matched_stop.is_none()
        && let Some(tok) = tokenizer
    {
        let step = stops.push(&detok.flush(tok).ok().flatten().unwrap_or_default());
        let mut rest = step.text;
        match step.stop {
            Some(i) => {
                summary.matched_stop = job.params.stop.get(i).cloned();
                finish = FinishReason::Stop;
            }
            None => rest.push_str(&stops.finish()),
        }
        if !rest.is_empty() {
            let _ = tx
                .send(Ok(Event::Token {
                    text: rest,
                    ids: Vec::new(),
                    logprobs: None,
                }))
                .await;
        }
    }
    summary.finish = Some(finish);
    summary.total = start.elapsed();
    let _ = tx.send(Ok(Event::Done(summary.clone()))).await;
    (Some(state), Some(summary))
}

/// A fresh state for a new sequence of up to `ctx` positions.
pub fn fresh_state(engine: &Engine, ctx: usize) -> SessionState {
    SessionState {
        cache: KvCache::new(engine.model.config(), ctx),
        tokens: Vec::new(),
    }
}
