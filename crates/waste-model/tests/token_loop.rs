//! Public-API tests of the sans-IO token loop, driven by scripted logits
//! (one-hot, so greedy sampling picks the scripted token): the text it
//! releases against the tokenizer's one-shot decode (SmolLM2 fixture) and
//! `str::find` for stop strings, its end reasons against the rules of
//! `token_loop.rs`, and prefix reuse against the tokens a session holds.

use std::path::{Path, PathBuf};

use anyhow::Result;
use waste_model::cache::CacheType;
use waste_model::token_loop::{Finished, Next, Step, prefill, reuse_prefix};
use waste_model::{
    FinishReason, GenerateJob, KvCache, ModelConfig, SamplingParams, SessionState, TokenLoop,
    Tokenizer,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn tokenizer() -> Result<Tokenizer> {
    Ok(Tokenizer::from_dir(fixtures().join("tokenizer"))?)
}

/// A cache of `capacity` positions for the tiny Qwen3-MoE fixture.
fn cache(capacity: usize) -> Result<KvCache> {
    let json = fs_err::read_to_string(fixtures().join("qwen3_moe_tiny/config.json"))?;
    let config = ModelConfig::from_json(&serde_json::from_str(&json)?)?;
    Ok(KvCache::new(&config, capacity, CacheType::F32))
}

fn one_hot(vocab: usize, token: u32) -> Vec<f32> {
    let mut l = vec![0.0; vocab];
    l[token as usize] = 1.0;
    l
}

/// What a driver saw: every handed-on token with its text, then the end.
#[derive(Debug)]
struct Run {
    tokens: Vec<u32>,
    text: String,
    eos: Option<u32>,
    finished: Finished,
    matched_stop: Option<String>,
    generated: usize,
}

/// Drives the loop over `script` as a driver would; the consumer takes
/// tokens while `take(i)` says so, and `cache` never grows (no forward pass).
fn drive(
    job: &GenerateJob,
    tok: Option<&Tokenizer>,
    vocab: usize,
    script: &[u32],
    cache: &KvCache,
    take: impl Fn(usize) -> bool,
) -> Run {
    let mut lp = TokenLoop::new(job, tok, None);
    let (mut tokens, mut text, mut eos) = (Vec::new(), String::new(), None);
    let mut i = 0;
    let reason = loop {
        let mut logits = one_hot(vocab, script[i.min(script.len() - 1)]);
        let sampled = match lp.step(&mut logits).expect("decode") {
            Step::Token(s) => s,
            Step::End { reason, eos: e } => {
                eos = e;
                break reason;
            }
        };
        let delivered = take(i);
        if delivered {
            tokens.push(sampled.token);
            text.push_str(&sampled.text);
        }
        match lp.next(delivered, cache) {
            Next::Feed(t) => assert_eq!(t, sampled.token, "feeds the token it sampled"),
            Next::End(r) => break r,
        }
        i += 1;
    };
    let finished = lp.finish(reason);
    text.push_str(&finished.tail);
    Run {
        tokens,
        text,
        eos,
        matched_stop: lp.matched_stop().map(str::to_owned),
        generated: lp.generated(),
        finished,
    }
}

/// The loop over `ids` under the SmolLM2 tokenizer, every token taken.
fn text_run(tok: &Tokenizer, ids: &[u32], max_tokens: usize, stop: &[&str]) -> Result<Run> {
    let params = SamplingParams {
        max_tokens: Some(max_tokens),
        stop: stop.iter().map(ToString::to_string).collect(),
        ..SamplingParams::default()
    };
    let job = GenerateJob::new(vec![1, 2, 3], params, Vec::new());
    let cache = cache(64)?;
    Ok(drive(
        &job,
        Some(tok),
        tok.vocab_size(),
        ids,
        &cache,
        |_| true,
    ))
}

const TEXT: &str = "Le café est ouvert: naïve ünïcode, then STOP here and more after.";

#[test]
fn released_text_adds_up_to_the_one_shot_decode_and_length_ends_it() -> Result<()> {
    let tok = tokenizer()?;
    let ids = tok.encode(TEXT, false)?;
    let run = text_run(&tok, &ids, ids.len(), &[])?;
    assert_eq!(run.tokens, ids);
    assert_eq!(run.text, tok.decode(&ids, true)?);
    assert_eq!(run.finished.reason, FinishReason::Length);
    assert_eq!(run.generated, ids.len());
    Ok(())
}

#[test]
fn a_stop_string_ends_at_its_first_occurrence_and_is_not_shown() -> Result<()> {
    let tok = tokenizer()?;
    let ids = tok.encode(TEXT, false)?;
    let full = tok.decode(&ids, true)?;
    for stop in ["STOP", "ï", " here and", "café"] {
        let run = text_run(&tok, &ids, ids.len() + 5, &["never in the text", stop])?;
        let want = &full[..full.find(stop).expect("stop is in the text")];
        assert_eq!(run.text, want, "stop {stop:?}");
        assert_eq!(run.finished.reason, FinishReason::Stop, "stop {stop:?}");
        assert_eq!(run.matched_stop.as_deref(), Some(stop));
        // Ends at the token that completed the stop string.
        assert!(run.tokens.len() < ids.len(), "stop {stop:?}");
    }
    Ok(())
}

#[test]
fn a_stop_string_at_the_very_end_still_ends_the_generation() -> Result<()> {
    let tok = tokenizer()?;
    let ids = tok.encode(TEXT, false)?;
    let full = tok.decode(&ids, true)?;
    // The token limit falls on the token that completes the stop string:
    // whether its last step or the tail flushed at the end completes it,
    // the generation ends on the stop, its text unshown.
    let stop = &full[full.len() - 6..];
    let run = text_run(&tok, &ids, ids.len(), &[stop])?;
    assert_eq!(run.text, &full[..full.len() - 6]);
    assert_eq!(run.finished.reason, FinishReason::Stop);
    assert_eq!(run.matched_stop.as_deref(), Some(stop));
    Ok(())
}

#[test]
fn an_end_of_sequence_token_ends_unless_ignored() -> Result<()> {
    let (vocab, eos) = (16, 7);
    let script = [3, 4, eos, 5, 6];
    let job = GenerateJob::new(vec![1], SamplingParams::default(), vec![eos]);
    let run = drive(&job, None, vocab, &script, &cache(64)?, |_| true);
    assert_eq!(run.tokens, [3, 4]);
    assert_eq!(run.eos, Some(eos));
    assert_eq!(run.finished.reason, FinishReason::Stop);
    assert_eq!(run.generated, 3, "the end-of-sequence token is counted");
    assert!(run.text.is_empty(), "no tokenizer, no text");

    let params = SamplingParams {
        ignore_eos: true,
        max_tokens: Some(5),
        ..SamplingParams::default()
    };
    let job = GenerateJob::new(vec![1], params, vec![eos]);
    let run = drive(&job, None, vocab, &script, &cache(64)?, |_| true);
    assert_eq!(run.tokens, script);
    assert_eq!((run.eos, run.finished.reason), (None, FinishReason::Length));
    Ok(())
}

#[test]
fn a_consumer_leaving_cancels_and_a_full_context_ends() -> Result<()> {
    let script = [3, 4, 5, 6];
    let job = GenerateJob::new(vec![1], SamplingParams::default(), Vec::new());
    let run = drive(&job, None, 16, &script, &cache(64)?, |i| i < 2);
    assert_eq!(run.tokens, [3, 4]);
    assert_eq!(run.finished.reason, FinishReason::Cancelled);
    assert_eq!(run.generated, 3, "the refused token was sampled");

    // No room for the sampled token: it is handed on, never fed.
    let run = drive(&job, None, 16, &script, &cache(0)?, |_| true);
    assert_eq!(run.tokens, [3]);
    assert_eq!(run.finished.reason, FinishReason::Context);
    Ok(())
}

#[test]
fn max_tokens_zero_samples_nothing() -> Result<()> {
    let params = SamplingParams {
        max_tokens: Some(0),
        ..SamplingParams::default()
    };
    let job = GenerateJob::new(vec![1], params, Vec::new());
    let run = drive(&job, None, 16, &[3], &cache(64)?, |_| true);
    assert!(run.tokens.is_empty());
    assert_eq!(
        (run.generated, run.finished.reason),
        (0, FinishReason::Length)
    );
    Ok(())
}

#[test]
fn prefill_reuses_the_common_prefix_and_leaves_a_token_to_feed() -> Result<()> {
    let mut state = SessionState {
        cache: cache(8)?,
        tokens: vec![5, 6, 7, 8],
    };
    // Shares [5, 6] with the session.
    assert_eq!(prefill(&mut state, &[5, 6, 9])?, 2);
    assert_eq!(state.tokens, [5, 6]);
    // The whole prompt is known: the last token is fed again for its logits.
    assert_eq!(reuse_prefix(&mut state, &[5, 6]), 1);
    assert_eq!(state.tokens, [5]);
    assert_eq!(reuse_prefix(&mut state, &[4, 5]), 0);
    assert!(state.tokens.is_empty());
    let err = prefill(&mut state, &[1; 9]).expect_err("9 tokens in a context of 8");
    assert!(
        matches!(
            err,
            waste_model::Error::ContextOverflow {
                needed: 9,
                capacity: 8
            }
        ),
        "{err}"
    );
    Ok(())
}
