//! `waste perplexity` and `waste kl`: llama-perplexity's two measures on
//! real text, to judge a converted store against the exact path. The text
//! is tokenized with the model's tokenizer and cut into chunks of `--ctx`
//! tokens, each run through one full forward pass; every position of a
//! chunk predicts the next token. `kl` reports KL(reference || model), its
//! mean, median and max over positions, top-1 agreement and both
//! perplexities (the arithmetic is `waste_convert::quality`). The
//! reference runs the exact path (q8 matrices widened to f32); the judged
//! model runs what the node runs, int8 q8 products, unless `--exact-q8`.
//! Models with no tokenizer file (Kimi releases ship a tiktoken file or
//! nothing) take `--tokens` ids instead of `--text`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use waste_convert::quality::{Divergence, Perplexity, chunks};
use waste_kernels::Q8Products;
use waste_model::{LogitsFor, NoTrace, Tokenizer};

use crate::load::{self, Loaded};

#[derive(Debug, clap::Args)]
pub struct PerplexityArgs {
    /// A store, a Hugging Face folder or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    scored: Scored,
}

#[derive(Debug, clap::Args)]
pub struct KlArgs {
    /// The model judged: a store, a Hugging Face folder or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// The reference (exact path), e.g. the release the store was converted from.
    #[arg(long)]
    against: PathBuf,
    #[command(flatten)]
    scored: Scored,
}

/// What `perplexity` and `kl` score, and how.
#[derive(Debug, clap::Args)]
struct Scored {
    /// UTF-8 text to score (`kl` tokenizes it with the reference's tokenizer).
    #[arg(long, required_unless_present = "tokens")]
    text: Option<PathBuf>,
    /// Token ids to score instead of text, comma-separated.
    #[arg(long, conflicts_with = "text", value_delimiter = ',')]
    tokens: Option<Vec<u32>>,
    /// Tokens per chunk (each chunk is scored on its own).
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Score only the first N tokens of the text (0 = all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// q8 (and a GGUF's quantized) backbone products exact in f32, not int8: slower, no activation rounding.
    #[arg(long)]
    exact_q8: bool,
}

/// The ids given, or the text's tokens under `loaded`'s tokenizer.
fn tokenize(loaded: &mut Loaded, scored: &Scored) -> Result<Vec<u32>> {
    let mut tokens = match (scored.tokens.as_deref(), scored.text.as_deref()) {
        (Some(ids), _) => ids.to_vec(),
        (None, Some(text)) => encode(loaded, text)?,
        (None, None) => anyhow::bail!("give --text FILE or --tokens IDS"),
    };
    let vocab = loaded.model.config().vocab_size;
    if let Some(id) = tokens.iter().find(|&&t| t as usize >= vocab) {
        anyhow::bail!("token id {id} is outside the vocabulary of {vocab}");
    }
    if scored.limit > 0 {
        tokens.truncate(scored.limit);
    }
    ensure!(tokens.len() >= 2, "fewer than 2 tokens to score");
    Ok(tokens)
}

fn encode(loaded: &mut Loaded, text: &Path) -> Result<Vec<u32>> {
    let tokenizer = match loaded.tokenizer.take() {
        Some(t) => t,
        None => Tokenizer::from_dir(&loaded.dir)
            .with_context(|| format!("load the tokenizer of {}", loaded.dir.display()))?,
    };
    let text = fs_err::read_to_string(text)?;
    Ok(tokenizer.encode(&text, true)?)
}

/// Logits of every position of `chunk`, (n, vocab).
fn logits(loaded: &Loaded, experts: &load::Experts<'_>, chunk: &[u32]) -> Result<Vec<f32>> {
    let mut cache = loaded.model.new_cache(chunk.len());
    Ok(loaded
        .model
        .forward(chunk, &mut cache, experts, LogitsFor::All, &mut NoTrace)?)
}

pub fn perplexity(args: &PerplexityArgs) -> Result<()> {
    let scored = &args.scored;
    let mut loaded = load::open_with(&args.model, Q8Products::exact_if(scored.exact_q8))?;
    let tokens = tokenize(&mut loaded, scored)?;
    let experts = loaded.experts();
    let vocab = loaded.model.config().vocab_size;
    let mut ppl = Perplexity::default();
    for chunk in chunks(&tokens, scored.ctx) {
        let l = logits(&loaded, &experts, chunk)?;
        for (t, row) in l.chunks(vocab).take(chunk.len() - 1).enumerate() {
            ppl.add(row, chunk[t + 1]);
        }
    }
    if scored.json {
        let json = serde_json::json!({
            "tokens": ppl.tokens(), "mean_nll": ppl.mean_nll(), "perplexity": ppl.perplexity()
        });
        println!("{json}");
    } else {
        println!(
            "{}: perplexity {:.4} (mean NLL {:.4} nats) over {} predicted tokens",
            args.model.display(),
            ppl.perplexity(),
            ppl.mean_nll(),
            ppl.tokens()
        );
    }
    Ok(())
}

pub fn kl(args: &KlArgs) -> Result<()> {
    // The reference takes the exact path throughout.
    let scored = &args.scored;
    let mut reference = load::open_with(&args.against, Q8Products::Exact)?;
    let q8 = Q8Products::exact_if(scored.exact_q8);
    let model = load::open_with(&args.model, q8)?;
    let vocab = reference.model.config().vocab_size;
    ensure!(
        model.model.config().vocab_size == vocab,
        "{} has a vocabulary of {}, {} of {vocab}",
        args.model.display(),
        model.model.config().vocab_size,
        args.against.display()
    );
    let tokens = tokenize(&mut reference, scored)?;
    let (ref_experts, experts) = (reference.experts(), model.experts());
    let mut d = Divergence::default();
    for chunk in chunks(&tokens, scored.ctx) {
        let p = logits(&reference, &ref_experts, chunk)?;
        let q = logits(&model, &experts, chunk)?;
        let rows = p.chunks(vocab).zip(q.chunks(vocab)).take(chunk.len() - 1);
        for (t, (p, q)) in rows.enumerate() {
            d.add(q, p, chunk[t + 1]);
        }
    }
    if scored.json {
        let mut json = d.to_json();
        json["q8_products"] = q8.name().into();
        println!("{json}");
    } else {
        println!(
            "{} ({} q8 products) against {}: mean KL {:.4} nats (median {:.4}, max {:.3}), top-1 agreement {:.1} %, perplexity {:.3} vs {:.3}, {} positions",
            args.model.display(),
            q8.name(),
            args.against.display(),
            d.mean_kl(),
            d.median_kl(),
            d.max_kl(),
            100.0 * d.top1_agreement(),
            d.model.perplexity(),
            d.reference.perplexity(),
            d.positions()
        );
    }
    Ok(())
}
