//! Token sampling: the request's [`SamplingParams`], the [`Sampler`] that turns one step's
//! logits into a token id, [`logprobs`] for reporting, and the [`StopMatcher`] for stop strings.
//!
//! The processing order is llama.cpp's sampler chain (HF applies the same penalty rules):
//! repetition penalty → presence/frequency penalties → (temperature 0: argmax) → top-k →
//! top-p → min-p → temperature → softmax → seeded draw. It does not decide when generation
//! ends (EOS ids, `max_tokens`, `ignore_eos`): the generation loop reads those fields.

pub mod json;
mod rng;
mod stop;

use std::cmp::Ordering;
use std::collections::HashMap;

pub use stop::{StopMatcher, StopStep};

use rng::Rng;

/// How to pick tokens for one request. Disabled values: `top_k = 0`, `top_p = 1`,
/// `min_p = 0`, `repetition_penalty = 1`, penalties 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 (or less) is greedy: argmax, ties to the lowest id.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to at least `top_p`.
    pub top_p: f32,
    /// Keep tokens at least `min_p` times as likely as the most likely one.
    pub min_p: f32,
    /// HF/CTRL rule over the distinct previous tokens: positive logits divided by it,
    /// negative ones multiplied.
    pub repetition_penalty: f32,
    /// OpenAI rule: subtracted once from every token that appeared before.
    pub presence_penalty: f32,
    /// OpenAI rule: subtracted once per earlier occurrence.
    pub frequency_penalty: f32,
    /// Same seed, same logits → same tokens. `None` seeds from the clock.
    pub seed: Option<u64>,
    /// Most tokens to generate; `None` runs to EOS or the end of the context.
    pub max_tokens: Option<usize>,
    /// Stop strings (see [`StopMatcher`]); the stop string itself is not returned.
    pub stop: Vec<String>,
    /// Keep generating past EOS ids.
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    /// Greedy decoding with nothing filtered or penalised.
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            max_tokens: None,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// A sampling parameter outside its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("sampling parameter {name} = {value}: must be {expected}")]
pub struct SamplingError {
    pub name: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl SamplingParams {
    /// Checks the domains, for rejecting a request up front. The sampler itself never panics
    /// on bad values: it treats them as "disabled".
    pub fn validate(&self) -> Result<(), SamplingError> {
        let check = |ok: bool, name: &'static str, value: f32, expected: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(SamplingError {
                    name,
                    value: value.to_string(),
                    expected,
                })
            }
        };
        let t = self.temperature;
        check(
            t.is_finite() && t >= 0.0,
            "temperature",
            t,
            "finite and >= 0",
        )?;
        check(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "top_p",
            self.top_p,
            "in (0, 1]",
        )?;
        check(
            (0.0..=1.0).contains(&self.min_p),
            "min_p",
            self.min_p,
            "in [0, 1]",
        )?;
        let r = self.repetition_penalty;
        check(
            r.is_finite() && r > 0.0,
            "repetition_penalty",
            r,
            "finite and > 0",
        )?;
        let p = self.presence_penalty;
        check(
            (-2.0..=2.0).contains(&p),
            "presence_penalty",
            p,
            "in [-2, 2]",
        )?;
        let f = self.frequency_penalty;
        check(
            (-2.0..=2.0).contains(&f),
            "frequency_penalty",
            f,
            "in [-2, 2]",
        )?;
        if self.stop.iter().any(String::is_empty) {
            return Err(SamplingError {
                name: "stop",
                value: "\"\"".into(),
                expected: "non-empty strings",
            });
        }
        Ok(())
    }
}

/// Picks tokens for one request. Keeps its buffers between steps, so build one per request.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    seed: u64,
    rng: Rng,
    /// The penalised logits of the last step, for [`Sampler::logprobs`].   // (vocab,)
    logits: Vec<f32>,
    /// (id, logit) still in the running during one step.
    candidates: Vec<(u32, f32)>,
    /// Occurrences of each previous token during one step.
    counts: HashMap<u32, u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(rng::entropy_seed);
        Self {
            params,
            seed,
            rng: Rng::seed_from_u64(seed),
            logits: Vec::new(),
            candidates: Vec::new(),
            counts: HashMap::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed in use (drawn from the clock when the params had none), to replay a request.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Picks the next token from one step's `logits` (vocab,) given the tokens so far (the
    /// penalty window is whatever the caller passes). NaN logits count as -inf; empty logits
    /// or all -inf give the lowest id.
    pub fn sample(&mut self, logits: &[f32], previous_tokens: &[u32]) -> u32 {
        self.logits.clear();
        self.logits.extend(
            logits
                .iter()
                .map(|&l| if l.is_nan() { f32::NEG_INFINITY } else { l }),
        );
        self.apply_penalties(previous_tokens);

        let p = &self.params;
        if p.temperature.is_nan() || p.temperature <= 0.0 {
            return argmax(&self.logits);
        }
        self.candidates.clear();
        self.candidates.extend(
            (0u32..)
                .zip(self.logits.iter().copied())
                .filter(|(_, l)| *l > f32::NEG_INFINITY),
        );
        if self.candidates.is_empty() {
            return argmax(&self.logits);
        }

        // top-k: partial selection, then sort only the k survivors.
        let mut sorted = false;
        if p.top_k > 0 && p.top_k < self.candidates.len() {
            self.candidates
                .select_nth_unstable_by(p.top_k - 1, by_logit_desc);
            self.candidates.truncate(p.top_k);
            self.candidates.sort_unstable_by(by_logit_desc);
            sorted = true;
        }
        // top-p on the untempered distribution, as llama.cpp does.
        if p.top_p < 1.0 && p.top_p.is_finite() {
            if !sorted {
                self.candidates.sort_unstable_by(by_logit_desc);
            }
            let max = self.candidates[0].1;
            let weights = self
                .candidates
                .iter()
                .map(|&(_, l)| f64::from(l - max).exp());
            let total: f64 = weights.clone().sum();
            let target = f64::from(p.top_p.max(0.0)) * total;
            let mut cumulative = 0.0;
            let mut keep = self.candidates.len();
            for (i, w) in weights.enumerate() {
                cumulative += w;
                if cumulative >= target {
                    keep = i + 1;
                    break;
                }
            }
            self.candidates.truncate(keep.max(1));
        }
        // min-p: p_i >= min_p * p_max  <=>  logit_i >= max_logit + ln(min_p).
        if p.min_p > 0.0 {
            let max = self
                .candidates
                .iter()
                .map(|c| c.1)
                .fold(f32::NEG_INFINITY, f32::max);
            let threshold = max + p.min_p.min(1.0).ln();
            self.candidates.retain(|c| c.1 >= threshold);
        }

        // Temperature, softmax and the draw, in f64 so long tails do not round away.
        let inv_t = 1.0 / f64::from(p.temperature);
        let max = self
            .candidates
            .iter()
            .map(|c| c.1)
            .fold(f32::NEG_INFINITY, f32::max);
        let weight = |l: f32| (f64::from(l - max) * inv_t).exp();
        let total: f64 = self.candidates.iter().map(|c| weight(c.1)).sum();
        let mut target = self.rng.next_f64() * total;
        for &(id, l) in &self.candidates {
            target -= weight(l);
            if target < 0.0 {
                return id;
            }
        }
        // Rounding left a sliver past the last weight: that mass belongs to the last token.
        self.candidates.last().map_or(0, |c| c.0)
    }

    /// Log-probabilities of `token` and the `top_n` most likely tokens under the last step's
    /// penalised logits (before top-k/top-p/min-p/temperature, as OpenAI reports them).
    pub fn logprobs(&self, token: u32, top_n: usize) -> Logprobs {
        logprobs(&self.logits, token, top_n)
    }

    fn apply_penalties(&mut self, previous_tokens: &[u32]) {
        let p = &self.params;
        let repetition = p.repetition_penalty;
        let repetition = repetition.is_finite() && repetition > 0.0 && repetition != 1.0;
        let presence = p.presence_penalty.is_finite() && p.presence_penalty != 0.0;
        let frequency = p.frequency_penalty.is_finite() && p.frequency_penalty != 0.0;
        if previous_tokens.is_empty() || !(repetition || presence || frequency) {
            return;
        }
        self.counts.clear();
        for &t in previous_tokens {
            *self.counts.entry(t).or_insert(0) += 1;
        }
        for (&id, &count) in &self.counts {
            // Ids past the vocabulary (a caller bug or a padded embedding) have no logit.
            let Some(l) = usize::try_from(id)
                .ok()
                .and_then(|i| self.logits.get_mut(i))
            else {
                continue;
            };
            if repetition {
                *l = if *l > 0.0 {
                    *l / p.repetition_penalty
                } else {
                    *l * p.repetition_penalty
                };
            }
            if frequency {
                #[allow(clippy::cast_precision_loss)] // counts are far below 2^24
                let n = count as f32;
                *l -= n * p.frequency_penalty;
            }
            if presence {
                *l -= p.presence_penalty;
            }
        }
    }
}

/// Descending logit, ties to the lower id, so every selection is deterministic.
fn by_logit_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Index of the largest logit, ties to the lowest id; NaN never wins; 0 for an empty slice.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || (logits[best].is_nan() && !l.is_nan()) {
            best = i;
        }
    }
    u32::try_from(best).unwrap_or(u32::MAX)
}

/// A chosen token's log-probability and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprobs {
    pub token: u32,
    /// -inf when `token` is outside the logits.
    pub logprob: f32,
    /// (id, logprob), most likely first, ties to the lower id.
    pub top: Vec<(u32, f32)>,
}

/// Log-softmax of `logits` (vocab,) at `token`, plus the `top_n` most likely tokens.
pub fn logprobs(logits: &[f32], token: u32, top_n: usize) -> Logprobs {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| f64::from(l - max).exp())
        .sum();
    // f64 → f32 only loses digits nobody reports.
    #[allow(clippy::cast_possible_truncation)]
    let log_z = max + sum.ln() as f32;
    let logprob_of = |l: f32| {
        if l.is_nan() {
            f32::NEG_INFINITY
        } else {
            l - log_z
        }
    };
    let logprob = usize::try_from(token)
        .ok()
        .and_then(|i| logits.get(i))
        .map_or(f32::NEG_INFINITY, |&l| logprob_of(l));

    let mut ranked: Vec<(u32, f32)> = (0u32..)
        .zip(
            logits
                .iter()
                .map(|&l| if l.is_nan() { f32::NEG_INFINITY } else { l }),
        )
        .collect();
    let n = top_n.min(ranked.len());
    if n > 0 && n < ranked.len() {
        ranked.select_nth_unstable_by(n - 1, by_logit_desc);
    }
    ranked.truncate(n);
    ranked.sort_unstable_by(by_logit_desc);
    let top = ranked
        .into_iter()
        .map(|(id, l)| (id, logprob_of(l)))
        .collect();
    Logprobs {
        token,
        logprob,
        top,
    }
}

/// Sampling defaults and extra end-of-sequence ids from a checkpoint folder's
/// `generation_config.json`. Its temperature, top-k and top-p apply only when
/// it sets `do_sample`, as in transformers; otherwise decoding is greedy. A
/// missing or unreadable file means greedy with no extra ids.
pub fn generation_defaults(dir: &std::path::Path) -> (SamplingParams, Vec<u32>) {
    let json: serde_json::Value = fs_err::read_to_string(dir.join("generation_config.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    generation_defaults_of(&json)
}

/// [`generation_defaults`] of a parsed `generation_config.json` (`Null`: none).
pub fn generation_defaults_of(json: &serde_json::Value) -> (SamplingParams, Vec<u32>) {
    let sample = json
        .get("do_sample")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let f = |k: &str, d: f64| json.get(k).and_then(serde_json::Value::as_f64).unwrap_or(d);
    let params = SamplingParams {
        temperature: if sample {
            f("temperature", 1.0) as f32
        } else {
            0.0
        },
        top_k: if sample { f("top_k", 0.0) as usize } else { 0 },
        top_p: if sample { f("top_p", 1.0) as f32 } else { 1.0 },
        ..SamplingParams::default()
    };
    let eos = json
        .get("eos_token_id")
        .map(crate::tokenizer::token_ids_from_json)
        .unwrap_or_default();
    (params, eos)
}
