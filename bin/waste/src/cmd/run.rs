//! `waste run`: generate in-process from a checkpoint folder and stream the
//! text to stdout; statistics go to stderr at the end.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use waste_model::{ChatTemplate, Generation, Message, Piece, SamplingParams, Tokenizer};

use crate::load;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json + *.safetensors), a .gguf file or a converted store.
    #[arg(long)]
    model: PathBuf,
    /// The prompt text (tokenized with the model's tokenizer.json or the GGUF's tokenizer).
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    prompt: Option<String>,
    /// The prompt as comma-separated token ids (no tokenizer needed).
    #[arg(long)]
    tokens: Option<String>,
    /// Render the prompt as a user turn with the checkpoint's chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Folder holding tokenizer.json (default: the model folder).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(long)]
    ctx_size: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// Sampling flags shared by the commands that generate.
#[derive(Debug, clap::Args)]
pub struct SamplingArgs {
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// 0 = greedy (default when generation_config.json does not ask for sampling).
    #[arg(long)]
    temperature: Option<f32>,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long)]
    top_k: Option<usize>,
    /// Nucleus sampling: keep the smallest set with this much probability (1 = off).
    #[arg(long)]
    top_p: Option<f32>,
    /// Drop tokens below this fraction of the top token's probability (0 = off).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Penalise tokens already seen (1 = off; HF rule).
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// Seed of the sampler (default: drawn from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long)]
    stop: Vec<String>,
    /// Keep going past end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
}

impl SamplingArgs {
    /// Flags over the checkpoint's generation_config.json defaults.
    pub fn params(&self, defaults: &load::GenerationDefaults) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            max_tokens: Some(self.max_tokens),
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            ..SamplingParams::default()
        }
    }
}

pub fn run(args: &Args) -> Result<()> {
    let mut loaded = load::open(&args.model)?;
    let model = &loaded.model;
    let tok_dir = args.tokenizer.clone().unwrap_or_else(|| loaded.dir.clone());
    // A GGUF file brings its own tokenizer; --tokenizer overrides it.
    let bundled = loaded.tokenizer.take().filter(|_| args.tokenizer.is_none());
    let tokenizer = if bundled.is_some() {
        bundled
    } else if args.prompt.is_some() || tok_dir.join("tokenizer.json").exists() {
        Some(
            Tokenizer::from_dir(&tok_dir)
                .with_context(|| format!("load tokenizer from {}", tok_dir.display()))?,
        )
    } else {
        None
    };
    let prompt = match (&args.prompt, &args.tokens, &tokenizer) {
        (_, Some(ids), _) => load::parse_tokens(ids)?,
        (Some(text), None, Some(tok)) if args.chat => {
            let template = tok
                .chat_template()
                .context("the tokenizer has no chat template; drop --chat")?;
            let template = ChatTemplate::new(template, tok.bos_token(), tok.eos_token())?;
            let mut messages = Vec::new();
            if let Some(system) = &args.system {
                messages.push(Message {
                    role: "system".into(),
                    content: system.clone(),
                });
            }
            messages.push(Message {
                role: "user".into(),
                content: text.clone(),
            });
            tok.encode(&template.render(&messages, true, None)?, false)?
        }
        (Some(text), None, Some(tok)) => tok.encode(text, true)?,
        _ => bail!("give --prompt or --tokens"),
    };
    if !args.sampling.stop.is_empty() && tokenizer.is_none() {
        bail!("--stop needs a tokenizer (tokenizer.json in the model folder or --tokenizer)");
    }
    let defaults = load::generation_defaults(&loaded.dir);
    let mut eos = model.config().eos_token_ids.clone();
    eos.extend(&defaults.eos_token_ids);
    if let Some(tok) = &tokenizer {
        eos.extend(tok.eos_token_ids());
    }
    let ctx = args
        .ctx_size
        .unwrap_or(model.config().max_position_embeddings.min(4096));
    let experts = loaded.experts();
    let generation = Generation {
        model,
        experts: &experts,
        tokenizer: tokenizer.as_ref(),
        eos_token_ids: &eos,
        params: args.sampling.params(&defaults),
    };
    let mut cache = model.new_cache(ctx);
    let mut out = std::io::stdout().lock();
    let stats = generation.run(&prompt, &mut cache, |piece: Piece<'_>| {
        let written = match (&tokenizer, piece.token) {
            (Some(_), _) => write!(out, "{}", piece.text),
            (None, Some(id)) => write!(out, "{id} "),
            (None, None) => Ok(()),
        };
        written.and_then(|()| out.flush()).is_ok()
    })?;
    writeln!(out)?;
    eprintln!(
        "prompt {} tokens ({:.1} tok/s), generated {} tokens ({:.2} tok/s), time to first token {:.0} ms, finish: {:?}",
        stats.prompt_tokens,
        stats.prefill_tokens_per_second(),
        stats.generated_tokens,
        stats.decode_tokens_per_second(),
        stats.time_to_first_token.as_secs_f64() * 1e3,
        stats.finish,
    );
    Ok(())
}
