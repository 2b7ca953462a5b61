//! `waste generate`: a Generate client. Streams the text as it arrives and
//! prints the final statistics in words to stderr.

use std::io::Write;

use anyhow::{Context, Result, bail};
use waste_proto::auth::BearerToken;
use waste_proto::node::v1 as pb;
use waste_proto::transport::Endpoint;

use crate::signal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node, e.g. http://127.0.0.1:50052.
    #[arg(long, default_value = "http://127.0.0.1:50052")]
    node: String,
    #[command(flatten)]
    prompt: super::prompt::PromptArgs,
    /// Bearer token the node requires.
    #[arg(long, env = "WASTE_NODE_TOKEN")]
    token: Option<String>,
    /// Keep the conversation state on the node under this id.
    #[arg(long)]
    session: Option<String>,
    #[command(flatten)]
    sampling: super::sampling::SamplingArgs,
}

pub fn run(args: &Args) -> Result<()> {
    signal::runtime()?.block_on(generate(args))
}

async fn generate(args: &Args) -> Result<()> {
    let channel = Endpoint::from_shared(args.node.clone())?
        .connect()
        .await
        .with_context(|| format!("connect to {}", args.node))?;
    let bearer = BearerToken::new(args.token.as_deref()).map_err(anyhow::Error::msg)?;
    let mut client = pb::node_client::NodeClient::with_interceptor(channel, bearer);
    let req = pb::GenerateRequest {
        input: Some(args.prompt.input()?),
        sampling: Some(args.sampling.options(128)),
        session_id: args.session.clone(),
        logprobs: false,
    };
    let mut stream = client
        .generate(req)
        .await
        .map_err(|s| refused(&args.node, &s))?
        .into_inner();
    let mut out = std::io::stdout().lock();
    while let Some(msg) = stream
        .message()
        .await
        .map_err(|s| refused(&args.node, &s))?
    {
        match msg.event {
            Some(pb::generate_response::Event::Token(t)) => {
                write!(out, "{}", t.text)?;
                out.flush()?;
            }
            Some(pb::generate_response::Event::Stats(s)) => {
                writeln!(out)?;
                print_stats(&s);
                return Ok(());
            }
            None => {}
        }
    }
    bail!("the node closed the stream without final statistics")
}

/// A node's refusal in words: the status code's name and the node's reason
/// (tonic's own rendering spells the code as a sentence and quotes both).
pub fn refused(node: &str, status: &waste_proto::Status) -> anyhow::Error {
    anyhow::anyhow!("{node} answered {:?}: {}", status.code(), status.message())
}

/// The final statistics, on stderr, in words: why it stopped, how much and
/// how fast, and what the experts cost (bytes read from disk for the whole
/// answer and the share of experts already in RAM when asked for).
pub fn print_stats(s: &pb::Stats) {
    eprintln!("{}", stats_line(s));
}

fn stats_line(s: &pb::Stats) -> String {
    use waste_model::FinishReason as F;
    let stopped = match pb::FinishReason::try_from(s.finish_reason) {
        Ok(pb::FinishReason::Stop) => finish_words(F::Stop),
        Ok(pb::FinishReason::Length) => finish_words(F::Length),
        Ok(pb::FinishReason::Context) => finish_words(F::Context),
        Ok(pb::FinishReason::Cancelled) => finish_words(F::Cancelled),
        _ => "unknown reason",
    };
    let mut parts = vec![
        format!("stopped: {stopped}"),
        format!("{} tokens", s.generated_tokens),
        format!("{:.1} tok/s", s.tokens_per_second),
        format!("first token {:.1} s", s.time_to_first_token_ms / 1000.0),
    ];
    if s.cached_prompt_tokens > 0 {
        parts.push(format!(
            "{} of {} prompt tokens reused",
            s.cached_prompt_tokens, s.prompt_tokens
        ));
    }
    let read = s.expert_bytes_per_token * f64::from(s.generated_tokens.saturating_sub(1));
    parts.push(format!(
        "experts read {} ({:.0} % from RAM)",
        human_bytes(read),
        100.0 * s.retention
    ));
    if s.prefetch_accuracy > 0.0 {
        parts.push(format!(
            "prefetch guesses right {:.0} %",
            100.0 * s.prefetch_accuracy
        ));
    }
    parts.join(" · ")
}

/// Why a generation stopped, in words.
pub fn finish_words(f: waste_model::FinishReason) -> &'static str {
    use waste_model::FinishReason as F;
    match f {
        F::Stop => "end of answer",
        F::Length => "token limit",
        F::Context => "context full",
        F::Cancelled => "cancelled",
    }
}

/// `1.2 GB`, `340 MB`, `12 kB` (decimal units, as disks are sold).
fn human_bytes(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.1} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_read_as_words() {
        let s = pb::Stats {
            finish_reason: pb::FinishReason::Stop as i32,
            prompt_tokens: 20,
            cached_prompt_tokens: 0,
            generated_tokens: 12,
            tokens_per_second: 3.44,
            time_to_first_token_ms: 612.0,
            expert_bytes_per_token: 100e6,
            retention: 0.384,
            ..Default::default()
        };
        assert_eq!(
            stats_line(&s),
            "stopped: end of answer · 12 tokens · 3.4 tok/s · first token 0.6 s · experts read 1.1 GB (38 % from RAM)"
        );
        let guessed = pb::Stats {
            prefetch_accuracy: 0.561,
            ..s
        };
        assert!(
            stats_line(&guessed).ends_with(" · prefetch guesses right 56 %"),
            "{}",
            stats_line(&guessed)
        );
        assert_eq!(human_bytes(12_345.0), "12 kB");
    }
}
