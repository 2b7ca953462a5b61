//! The sampling flags every generating command shares (`run`, `generate`,
//! `chat`), as the Generate request's options: the node, remote or in this
//! process, applies them over the checkpoint's generation_config.json
//! defaults.

use waste_proto::node::v1 as pb;

/// Sampling flags shared by the commands that generate.
#[derive(Debug, clap::Args)]
pub struct SamplingArgs {
    /// Tokens to generate at most [default: 128; chat: 512].
    #[arg(long)]
    max_tokens: Option<usize>,
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
    /// Penalise tokens already seen (1 = off; HF rule) [default: the checkpoint's, else 1].
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Seed of the sampler (default: drawn from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep going past end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
}

impl SamplingArgs {
    /// The flags as a Generate request's options; unset ones are left to
    /// the node (the checkpoint's defaults).
    pub fn options(&self, max_tokens: usize) -> pb::SamplingOptions {
        pb::SamplingOptions {
            max_tokens: u32::try_from(self.max_tokens.unwrap_or(max_tokens)).unwrap_or(u32::MAX),
            temperature: self.temperature,
            top_k: self.top_k.map(|k| u32::try_from(k).unwrap_or(u32::MAX)),
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            ..Default::default()
        }
    }
}
