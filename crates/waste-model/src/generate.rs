//! The in-process generation loop: prefill the prompt, then sample and feed
//! back one token at a time, streaming text pieces, until an end-of-sequence
//! token, a stop string, the token limit or the end of the context.

use std::time::{Duration, Instant};

use crate::cache::KvCache;
use crate::experts::ExpertProvider;
use crate::model::{LogitsFor, Model};
use crate::sampling::{Sampler, SamplingParams, StopMatcher};
use crate::tokenizer::{DecodeStream, Tokenizer};
use crate::trace::NoTrace;
use crate::{Error, Result};

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The context (cache capacity) is full.
    Context,
    /// The caller's callback asked to stop.
    Cancelled,
}

/// What a generation did, and how fast.
#[derive(Debug, Clone)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Prompt processing up to the first sampled token.
    pub time_to_first_token: Duration,
    /// Everything after the first token.
    pub decode_time: Duration,
    pub finish: FinishReason,
}

impl GenerationStats {
    /// Decode speed over the tokens after the first.
    pub fn decode_tokens_per_second(&self) -> f64 {
        let secs = self.decode_time.as_secs_f64();
        if self.generated_tokens > 1 && secs > 0.0 {
            (self.generated_tokens - 1) as f64 / secs
        } else {
            0.0
        }
    }

    pub fn prefill_tokens_per_second(&self) -> f64 {
        let secs = self.time_to_first_token.as_secs_f64();
        if secs > 0.0 {
            self.prompt_tokens as f64 / secs
        } else {
            0.0
        }
    }
}

/// What the loop hands the caller after each step.
#[derive(Debug, Clone, Copy)]
pub struct Piece<'s> {
    /// The sampled token; None for text released when the stream ends.
    pub token: Option<u32>,
    /// Text now safe to show (empty while a stop string or a UTF-8 sequence is pending).
    pub text: &'s str,
}

/// One generation request against a model whose experts come from `experts`.
pub struct Generation<'a> {
    pub model: &'a Model,
    pub experts: &'a dyn ExpertProvider,
    /// Needed for text output and stop strings; without it only ids are produced.
    pub tokenizer: Option<&'a Tokenizer>,
    /// Tokens that end the generation (unless `ignore_eos`).
    pub eos_token_ids: &'a [u32],
    pub params: SamplingParams,
}

impl std::fmt::Debug for Generation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Generation<'_> {
    /// Generates after `prompt`, continuing the sequence in `cache`.
    /// `on_piece` receives every sampled token with the text it released;
    /// returning false cancels.
    pub fn run(
        &self,
        prompt: &[u32],
        cache: &mut KvCache,
        mut on_piece: impl FnMut(Piece<'_>) -> bool,
    ) -> Result<GenerationStats> {
        let start = Instant::now();
        let mut sampler = Sampler::new(self.params.clone());
        let mut stops = StopMatcher::new(&self.params.stop);
        let mut detok = DecodeStream::new(true);
        let mut history: Vec<u32> = prompt.to_vec();
        let mut logits =
            self.model
                .forward(prompt, cache, self.experts, LogitsFor::Last, &mut NoTrace)?;
        let mut first_token_at = None;
        let mut generated = 0;
        let finish = loop {
            if self.params.max_tokens.is_some_and(|m| generated >= m) {
                break FinishReason::Length;
            }
            let token = sampler.sample(&logits, &history);
            first_token_at.get_or_insert_with(Instant::now);
            generated += 1;
            history.push(token);
            if !self.params.ignore_eos && self.eos_token_ids.contains(&token) {
                on_piece(Piece {
                    token: Some(token),
                    text: &stops.finish(),
                });
                break FinishReason::Stop;
            }
            let mut text = String::new();
            if let Some(tok) = self.tokenizer
                && let Some(piece) = detok.step(tok, token)?
            {
                let step = stops.push(&piece);
                text = step.text;
                if step.stop.is_some() {
                    on_piece(Piece {
                        token: Some(token),
                        text: &text,
                    });
                    break FinishReason::Stop;
                }
            }
            if !on_piece(Piece {
                token: Some(token),
                text: &text,
            }) {
                break FinishReason::Cancelled;
            }
            match self
                .model
                .forward(&[token], cache, self.experts, LogitsFor::Last, &mut NoTrace)
            {
                Ok(l) => logits = l,
                Err(Error::ContextOverflow { .. }) => break FinishReason::Context,
                Err(e) => return Err(e),
            }
        };
        if finish != FinishReason::Stop
            && let Some(tok) = self.tokenizer
        {
            let tail = detok.flush(tok)?.unwrap_or_default();
            let mut rest = stops.push(&tail).text;
            rest.push_str(&stops.finish());
            if !rest.is_empty() {
                on_piece(Piece {
                    token: None,
                    text: &rest,
                });
            }
        }
        let first = first_token_at.unwrap_or_else(Instant::now);
        Ok(GenerationStats {
            prompt_tokens: prompt.len(),
            generated_tokens: generated,
            time_to_first_token: first - start,
            decode_time: first.elapsed(),
            finish,
        })
    }
}
