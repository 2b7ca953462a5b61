//! `waste run`: generate in-process from a checkpoint folder and stream the
//! text to stdout; statistics go to stderr at the end.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use waste_model::{ChatTemplate, Generation, Message, Piece, Tokenizer};

use super::sampling::SamplingArgs;
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
        params: args.sampling.params(&defaults, 128),
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
    let stopped = super::generate::finish_words(stats.finish);
    eprintln!(
        "stopped: {stopped} · {} tokens · {:.1} tok/s · first token {:.1} s · prompt {} tokens at {:.0} tok/s",
        stats.generated_tokens,
        stats.decode_tokens_per_second(),
        stats.time_to_first_token.as_secs_f64(),
        stats.prompt_tokens,
        stats.prefill_tokens_per_second(),
    );
    Ok(())
}
