//! `waste forward`: one full-sequence forward pass in float32, logits of every
//! position written as a safetensors file. Outside checks call this exact
//! interface: keep it stable.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use waste_kernels::Q8Products;
use waste_model::{LogitsFor, NoTrace};

use crate::load;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json + *.safetensors), a .gguf file or a converted store.
    #[arg(long)]
    model: PathBuf,
    /// Comma-separated token ids, e.g. 1,2,3.
    #[arg(long)]
    tokens: String,
    /// Output file; receives the float32 tensor `logits` of shape [n_tokens, vocab].
    #[arg(long)]
    out: PathBuf,
    /// Multiply q8 (and a GGUF's quantized) backbone matrices as the node does by
    /// default, on llama.cpp's int8 arithmetic (activations rounded to int8
    /// per 32), instead of exactly in f32 (this command's default: it is
    /// the reference pass that logits are checked with).
    #[arg(long)]
    int8_q8: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let tokens = load::parse_tokens(&args.tokens)?;
    let loaded = load::open_with(&args.model, Q8Products::exact_if(!args.int8_q8))?;
    let model = &loaded.model;
    let experts = loaded.experts();
    let mut cache = model.new_cache(tokens.len());
    let logits = model.forward(&tokens, &mut cache, &experts, LogitsFor::All, &mut NoTrace)?;

    let vocab = model.config().vocab_size;
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, vec![tokens.len(), vocab], &bytes)?;
    let tensors = HashMap::from([("logits".to_string(), view)]);
    safetensors::serialize_to_file(&tensors, None, &args.out)
        .with_context(|| format!("write {}", args.out.display()))?;
    tracing::info!(
        "wrote logits [{}, {vocab}] to {}",
        tokens.len(),
        args.out.display()
    );
    Ok(())
}
