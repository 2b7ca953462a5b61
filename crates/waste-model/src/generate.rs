//! The in-process driver of the [token loop](crate::token_loop): prefill the
//! prompt, then sample and feed back one token at a time on this thread,
//! handing text pieces to a callback, until the loop ends. The node drives
//! the same loop asynchronously, its experts streamed from a store.

use std::time::{Duration, Instant};

use crate::Result;
use crate::cache::KvCache;
use crate::experts::ExpertProvider;
use crate::model::{LogitsFor, Model};
use crate::sampling::SamplingParams;
use crate::token_loop::{FinishReason, GenerateJob, Next, Step, TokenLoop};
use crate::tokenizer::Tokenizer;
use crate::trace::NoTrace;

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
        let job = GenerateJob::new(
            prompt.to_vec(),
            self.params.clone(),
            self.eos_token_ids.to_vec(),
        );
        let mut tokens = TokenLoop::new(&job, self.tokenizer, None);
        let mut logits =
            self.model
                .forward(prompt, cache, self.experts, LogitsFor::Last, &mut NoTrace)?;
        let mut first_token_at = None;
        let finish = loop {
            let sampled = match tokens.step(&mut logits)? {
                Step::Token(s) => s,
                Step::End { reason, eos } => {
                    if let Some(token) = eos {
                        first_token_at.get_or_insert_with(Instant::now);
                        on_piece(Piece {
                            token: Some(token),
                            text: "",
                        });
                    }
                    break reason;
                }
            };
            first_token_at.get_or_insert_with(Instant::now);
            let delivered = on_piece(Piece {
                token: Some(sampled.token),
                text: &sampled.text,
            });
            match tokens.next(delivered, cache) {
                Next::Feed(token) => {
                    logits = self.model.forward(
                        &[token],
                        cache,
                        self.experts,
                        LogitsFor::Last,
                        &mut NoTrace,
                    )?;
                }
                Next::End(reason) => break reason,
            }
        };
        let finished = tokens.finish(finish);
        if !finished.tail.is_empty() {
            on_piece(Piece {
                token: None,
                text: &finished.tail,
            });
        }
        let first = first_token_at.unwrap_or_else(Instant::now);
        Ok(GenerationStats {
            prompt_tokens: prompt.len(),
            generated_tokens: tokens.generated(),
            time_to_first_token: first - start,
            decode_time: first.elapsed(),
            finish: finished.reason,
        })
    }
}
