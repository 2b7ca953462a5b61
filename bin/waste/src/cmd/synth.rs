//! `waste synth --like RELEASE OUT`: a Hugging Face checkpoint folder with
//! a release's real tensor names, dtypes and per-expert shapes and seeded
//! random weights (shards of at most 1 GB + index), for tests and converter
//! benchmarks without downloading a model.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use waste_convert::convert::human_bytes;
use waste_convert::synth::{self, Like, Options};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The release to imitate: deepseek-v3, kimi-k2, kimi-k2-thinking, qwen3-30b-a3b, kimi-k3.
    #[arg(long, value_parser = |s: &str| s.parse::<Like>())]
    like: Like,
    /// Decoder layers (default: the release's; fewer keep one dense layer in front).
    #[arg(long)]
    layers: Option<usize>,
    /// Routed experts per MoE layer (default: the release's).
    #[arg(long)]
    experts: Option<usize>,
    /// Vocabulary size (default: the release's).
    #[arg(long)]
    vocab: Option<usize>,
    /// Weight dtype: `release` (fp8 / int4 / MXFP4 as the release stores them) or `bf16`.
    #[arg(long, default_value = "release")]
    dtype: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Folder to write (created).
    out: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let bf16 = match args.dtype.as_str() {
        "release" => false,
        "bf16" => true,
        other => bail!("--dtype {other:?}: release or bf16"),
    };
    let options = Options {
        like: args.like,
        layers: args.layers,
        experts: args.experts,
        vocab: args.vocab,
        bf16,
        seed: args.seed,
    };
    let s = synth::synth(&options, &args.out).with_context(|| {
        format!(
            "synthesise {} into {}",
            args.like.name(),
            args.out.display()
        )
    })?;
    eprintln!(
        "{}: {} tensors in {} shards, {} ({} of routed experts)",
        args.out.display(),
        s.tensors,
        s.shards,
        human_bytes(s.bytes),
        human_bytes(s.expert_bytes)
    );
    println!("{}", args.out.display());
    Ok(())
}
