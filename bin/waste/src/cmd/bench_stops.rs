//! `waste bench stops`: what stop strings cost. The matcher alone on a token-sized stream
//! (no stops, the maximum of 16 stops of 256 bytes, and far longer ones), and with `--model`
//! whole greedy generations with and without the 16 stops. The stops are windows of the
//! text itself with a last byte that never occurs, so the matcher holds back long partial
//! matches all the time and no stop ever fires. A benchmark, not a test: outside CI.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use waste_model::{Generation, SamplingParams, StopMatcher};

use crate::load;

#[derive(Debug, clap::Args)]
pub struct StopsArgs {
    /// A model to generate with (a .gguf, HF folder or store); without it only the matcher runs.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Tokens per generation.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Interleaved repetitions (medians reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
}

/// The documented maximum: 16 stop strings of 256 bytes.
const MAX_STOPS: usize = 16;
const MAX_STOP_BYTES: usize = 256;

pub fn run(a: &StopsArgs) -> Result<()> {
    let text =
        "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. "
            .repeat(1 << 12);
    let pieces: Vec<&str> = text
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).expect("ASCII"))
        .collect();
    println!(
        "matcher alone, {} pieces of 4 bytes, median of {}:",
        pieces.len(),
        a.repeats
    );
    let cases = [
        ("no stops", Vec::new()),
        ("16 x 256 B", windows(&text, MAX_STOPS, MAX_STOP_BYTES)),
        ("12 x 256 KiB", windows(&text, 12, 256 << 10)),
    ];
    let mut base = None;
    for (name, stops) in &cases {
        let t = median(a.repeats, || {
            let mut m = StopMatcher::new(stops);
            let start = Instant::now();
            let mut released = 0;
            for p in &pieces {
                released += m.push(p).text.len();
            }
            released += m.finish().len();
            assert_eq!(released, text.len(), "a stop fired");
            start.elapsed()
        });
        let per_piece = t.as_secs_f64() * 1e9 / pieces.len() as f64;
        let base = *base.get_or_insert(per_piece);
        println!(
            "  {name:>12}: {per_piece:8.1} ns/piece ({:.1}x no stops)",
            per_piece / base
        );
    }
    if let Some(model) = &a.model {
        generations(model, a)?;
    }
    Ok(())
}

/// `n` stops of `len` bytes cut from `text` at spread offsets, each ending in a byte the
/// text never holds.
fn windows(text: &str, n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut from = (i * 37) % text.len().saturating_sub(len).max(1);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            let mut s: String = text[from..].chars().cycle().take(len - 1).collect();
            s.push('\u{7}');
            s
        })
        .collect()
}

fn median(repeats: usize, mut f: impl FnMut() -> Duration) -> Duration {
    mid(&mut (0..repeats.max(1)).map(|_| f()).collect::<Vec<_>>())
}

fn generations(path: &std::path::Path, a: &StopsArgs) -> Result<()> {
    let loaded = load::open(path)?;
    let tokenizer = loaded.tokenizer.as_ref().ok_or_else(|| {
        anyhow::anyhow!("bench stops needs a model that carries its tokenizer (a .gguf)")
    })?;
    let experts = loaded.experts();
    let prompt = tokenizer.encode("Once upon a time, in a small village by the sea,", true)?;
    let run = |stop: Vec<String>| -> Result<(Duration, String)> {
        let generation = Generation {
            model: &loaded.model,
            experts: &experts,
            tokenizer: Some(tokenizer),
            eos_token_ids: &[],
            params: SamplingParams {
                max_tokens: Some(a.tokens),
                ignore_eos: true,
                stop,
                ..SamplingParams::default()
            },
        };
        let mut cache = loaded.model.new_cache(a.tokens + prompt.len() + 1);
        let mut text = String::new();
        let start = Instant::now();
        generation.run(&prompt, &mut cache, |p| {
            text.push_str(p.text);
            true
        })?;
        Ok((start.elapsed(), text))
    };
    // Greedy: every run writes this text, so windows of it are partial matches throughout.
    let (_, text) = run(Vec::new())?;
    let stops = windows(&text, MAX_STOPS, MAX_STOP_BYTES);
    let (mut none, mut with) = (Vec::new(), Vec::new());
    for _ in 0..a.repeats.max(1) {
        none.push(run(Vec::new())?.0);
        let (t, out) = run(stops.clone())?;
        anyhow::ensure!(out == text, "the stops changed the output");
        with.push(t);
    }
    let (none, with) = (mid(&mut none), mid(&mut with));
    println!(
        "generation of {} tokens, median of {}: no stops {:.1} ms, 16 x 256 B stops {:.1} ms, ratio {:.3}",
        a.tokens,
        a.repeats,
        none.as_secs_f64() * 1e3,
        with.as_secs_f64() * 1e3,
        with.as_secs_f64() / none.as_secs_f64()
    );
    Ok(())
}

fn mid(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}
