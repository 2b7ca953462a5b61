//! `waste run`: generate in-process and stream the text to stdout;
//! statistics go to stderr at the end. The model runs in a node loaded in
//! this process (the node's opener, token loop and expert cache), sent one
//! Generate request as a client would send it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_model::FinishReason;
use waste_model::cache::CacheType;
use waste_node::generate::Event;
use waste_node::{Config, Node};
use waste_proto::node::v1 as pb;

use super::prompt::PromptArgs;
use super::sampling::SamplingArgs;
use crate::signal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json + *.safetensors), a .gguf file or a converted store.
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Folder holding tokenizer.json (default: the model folder).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(long)]
    ctx_size: Option<usize>,
    /// Multiply the backbone's q8 matrices and a GGUF's quantized ones
    /// exactly in f32 instead of llama.cpp's int8 arithmetic: no activation
    /// rounding, slower.
    #[arg(long)]
    exact_q8: bool,
    /// The attention cache's value type: f32 (exact) or f16 (half the bytes,
    /// as llama.cpp's default) [default: f32].
    #[arg(long, default_value = "f32")]
    cache_type: CacheType,
    #[command(flatten)]
    sampling: SamplingArgs,
}

pub fn run(args: &Args) -> Result<()> {
    signal::runtime()?.block_on(generate(args))
}

async fn generate(args: &Args) -> Result<()> {
    let mut cfg = Config {
        ctx_size: args.ctx_size,
        max_sessions: 1,
        tokenizer: args.tokenizer.clone(),
        exact_q8: args.exact_q8,
        cache_type: args.cache_type,
        ..Config::default()
    };
    cfg.set_model(&args.model);
    let node = Node::load(cfg)
        .await
        .with_context(|| format!("load {}", args.model.display()))?;
    let req = pb::GenerateRequest {
        input: Some(args.prompt.input()?),
        sampling: Some(args.sampling.options(128)),
        ..Default::default()
    };
    let job = waste_node::request::job(&node, &req)?;
    let tokens_only = node.tokenizer.is_none();
    let mut events = node.start_generation(job, None)?;
    let mut out = std::io::stdout().lock();
    let mut summary = None;
    while let Some(event) = events.recv().await {
        match event? {
            Event::Token { text, ids, .. } => {
                if tokens_only {
                    for id in ids {
                        write!(out, "{id} ")?;
                    }
                } else {
                    write!(out, "{text}")?;
                }
                out.flush()?;
            }
            Event::Done(s) => summary = Some(s),
        }
    }
    writeln!(out)?;
    let s = summary.context("the generation ended without its statistics")?;
    let stopped = super::generate::finish_words(s.finish.unwrap_or(FinishReason::Cancelled));
    eprintln!(
        "stopped: {stopped} · {} tokens · {:.1} tok/s · first token {:.1} s · prompt {} tokens at {:.0} tok/s",
        s.generated_tokens,
        s.decode_tokens_per_second(),
        s.time_to_first_token.as_secs_f64(),
        s.prompt_tokens,
        s.prefill_tokens_per_second(),
    );
    Ok(())
}
