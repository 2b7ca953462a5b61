//! The token loop, without IO: what to prefill, and after each forward step
//! which token to sample, which text that releases (streaming detokenizer,
//! stop strings), whether to feed the token back and why the generation
//! ended. Its drivers own the IO: [`crate::generate`] runs the forward pass
//! in-process and hands pieces to a callback; the node's `generate.rs`
//! awaits the expert source and streams pieces to a client. Both call the
//! same steps in the same order, so they end alike and emit the same text:
//!
//! 1. [`prefill`] keeps the prefix a session already holds and says how
//!    many prompt tokens the driver need not feed;
//! 2. the driver feeds the rest of the prompt and gets the last logits;
//! 3. [`TokenLoop::step`] samples from the logits: a token to hand on
//!    ([`Step::Token`]) or the end ([`Step::End`]);
//! 4. the driver hands the token on, then [`TokenLoop::next`] says whether
//!    to feed it ([`Next::Feed`]: a forward step, back to 3) or to end;
//! 5. [`TokenLoop::finish`] releases the text still held back.

use crate::cache::{CacheType, KvCache};
use crate::config::ModelConfig;
use crate::sampling::json::JsonConstraint;
use crate::sampling::{Logprobs, Sampler, SamplingParams, StopMatcher};
use crate::tokenizer::{DecodeStream, Tokenizer, TokenizerError};
use crate::{Error, Result};

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token, a stop string or a closed JSON object.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The context (cache capacity) is full.
    Context,
    /// The consumer stopped taking tokens.
    Cancelled,
}

/// The state a sequence carries between requests: the cache and the tokens
/// it holds.
#[derive(Debug)]
pub struct SessionState {
    pub cache: KvCache,
    /// Exactly the tokens whose state is in `cache`.
    pub tokens: Vec<u32>,
}

impl SessionState {
    /// A fresh state for a new sequence of up to `ctx` positions, its
    /// cache rows in `cache`.
    pub fn new(config: &ModelConfig, ctx: usize, cache: CacheType) -> Self {
        Self {
            cache: KvCache::new(config, ctx, cache),
            tokens: Vec::new(),
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

/// Step 1: reuses what `state` holds of `prompt` and returns how many of
/// its tokens are covered; the driver feeds `prompt[covered..]`. A prompt
/// longer than the context is refused before any work.
pub fn prefill(state: &mut SessionState, prompt: &[u32]) -> Result<usize> {
    let cached = reuse_prefix(state, prompt);
    let capacity = state.cache.capacity();
    if prompt.len() > capacity {
        return Err(Error::ContextOverflow {
            needed: prompt.len(),
            capacity,
        });
    }
    Ok(cached)
}

/// What to generate, tokenized.
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

/// A sampled token to hand on, with the text it released.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub token: u32,
    /// Text now safe to show (empty while a stop string or a UTF-8
    /// sequence is pending).
    pub text: String,
    /// With [`GenerateJob::logprobs`]: the token's and the top alternatives'.
    pub logprobs: Option<Logprobs>,
}

/// What [`TokenLoop::step`] decided.
#[derive(Debug, Clone)]
pub enum Step {
    /// Hand this token on, then ask [`TokenLoop::next`].
    Token(Sampled),
    /// The generation ended without a token to hand on; `eos` is the
    /// end-of-sequence token that ended it, when one did.
    End {
        reason: FinishReason,
        eos: Option<u32>,
    },
}

/// What [`TokenLoop::next`] decided after a token was handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run a forward step on this token, then [`TokenLoop::step`] again.
    Feed(u32),
    End(FinishReason),
}

/// Text released when the generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The reason, which a stop string completed by the released text
    /// turns into [`FinishReason::Stop`].
    pub reason: FinishReason,
    /// Text held back until the end (an incomplete character, a partial
    /// stop string); empty when there is none.
    pub tail: String,
}

/// One generation's sampling, detokenizing and stop matching.
pub struct TokenLoop<'a> {
    job: &'a GenerateJob,
    /// Needed for text output and stop strings; without it only ids are produced.
    tokenizer: Option<&'a Tokenizer>,
    json: Option<JsonConstraint<'a>>,
    sampler: Sampler,
    stops: StopMatcher,
    detok: DecodeStream,
    /// The prompt and every sampled token (the repetition penalties' window).
    history: Vec<u32>,
    generated: usize,
    /// Index into `stops.stops()` of the stop string that ended the generation.
    matched_stop: Option<usize>,
    /// The last token closed the JSON object.
    closed: bool,
}

impl std::fmt::Debug for TokenLoop<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenLoop")
            .field("generated", &self.generated)
            .field("matched_stop", &self.matched_stop)
            .finish_non_exhaustive()
    }
}

impl<'a> TokenLoop<'a> {
    /// The loop for `job`, after its prompt. `json` constrains the tokens
    /// when given (the driver builds it for [`GenerateJob::json`]).
    pub fn new(
        job: &'a GenerateJob,
        tokenizer: Option<&'a Tokenizer>,
        json: Option<JsonConstraint<'a>>,
    ) -> Self {
        Self {
            job,
            tokenizer,
            json,
            sampler: Sampler::new(job.params.clone()),
            stops: StopMatcher::new(&job.params.stop),
            detok: DecodeStream::new(!job.keep_special_text),
            history: job.prompt.clone(),
            generated: 0,
            matched_stop: None,
            closed: false,
        }
    }

    /// Step 3: samples the next token from `logits` (the last position's;
    /// JSON mode masks them in place).
    pub fn step(&mut self, logits: &mut [f32]) -> std::result::Result<Step, TokenizerError> {
        let end = |reason| Ok(Step::End { reason, eos: None });
        if self
            .job
            .params
            .max_tokens
            .is_some_and(|m| self.generated >= m)
        {
            return end(FinishReason::Length);
        }
        if let Some(j) = &self.json
            && j.mask(logits) == 0
        {
            // Nothing in the vocabulary continues the JSON text.
            return end(FinishReason::Stop);
        }
        let token = self.sampler.sample(logits, &self.history);
        let logprobs = self
            .job
            .logprobs
            .then(|| self.sampler.logprobs(token, self.job.top_logprobs));
        self.generated += 1;
        self.history.push(token);
        if self.json.is_none() && !self.job.params.ignore_eos && self.job.eos.contains(&token) {
            return Ok(Step::End {
                reason: FinishReason::Stop,
                eos: Some(token),
            });
        }
        self.closed = self
            .json
            .as_mut()
            .is_some_and(|j| j.advance(token) && j.is_complete());
        let mut text = String::new();
        if let Some(tok) = self.tokenizer
            && let Some(piece) = self.detok.step(tok, token)?
        {
            let step = self.stops.push(&piece);
            text = step.text;
            self.matched_stop = step.stop;
        }
        Ok(Step::Token(Sampled {
            token,
            text,
            logprobs,
        }))
    }

    /// Step 4: after the last sampled token was handed on (`delivered`:
    /// the consumer took it), whether to feed it into `cache`.
    pub fn next(&self, delivered: bool, cache: &KvCache) -> Next {
        // A stop string ends the generation whether or not its text arrived.
        if self.matched_stop.is_some() {
            return Next::End(FinishReason::Stop);
        }
        if !delivered {
            return Next::End(FinishReason::Cancelled);
        }
        if self.closed {
            return Next::End(FinishReason::Stop);
        }
        if cache.check_room(1).is_err() {
            return Next::End(FinishReason::Context);
        }
        match self.history.last() {
            Some(&token) if self.generated > 0 => Next::Feed(token),
            // Only reached when `step` ended the loop; ending again is harmless.
            _ => Next::End(FinishReason::Stop),
        }
    }

    /// Step 5: text held back (an incomplete character, a partial stop
    /// string) is released unless a stop string ended the generation; a
    /// stop string completed by the released text still ends it there.
    pub fn finish(&mut self, reason: FinishReason) -> Finished {
        let mut finished = Finished {
            reason,
            tail: String::new(),
        };
        if self.matched_stop.is_some() {
            return finished;
        }
        let Some(tok) = self.tokenizer else {
            return finished;
        };
        // A tail the tokenizer cannot decode is dropped: the tokens were
        // already handed on, and the generation is over.
        let step = self
            .stops
            .push(&self.detok.flush(tok).ok().flatten().unwrap_or_default());
        finished.tail = step.text;
        match step.stop {
            Some(i) => {
                self.matched_stop = Some(i);
                finished.reason = FinishReason::Stop;
            }
            None => finished.tail.push_str(&self.stops.finish()),
        }
        finished
    }

    /// Tokens sampled so far (an end-of-sequence token included).
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// The stop string that ended the generation.
    pub fn matched_stop(&self) -> Option<&str> {
        self.matched_stop
            .and_then(|i| self.stops.stops().get(i))
            .map(String::as_str)
    }
}
