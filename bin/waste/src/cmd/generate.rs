//! `waste generate`: a Generate client. Streams the text as it arrives and
//! prints the final statistics (token counts, time to first token, tok/s,
//! expert bytes read per token, retention) to stderr.

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
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// Send the prompt as a user message rendered with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
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
    let input = if args.chat {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(pb::ChatMessage {
                role: "system".into(),
                content: s.clone(),
            });
        }
        messages.push(pb::ChatMessage {
            role: "user".into(),
            content: args.prompt.clone(),
        });
        pb::generate_request::Input::Messages(pb::Chat {
            messages,
            ..Default::default()
        })
    } else {
        pb::generate_request::Input::Prompt(args.prompt.clone())
    };
    let req = pb::GenerateRequest {
        input: Some(input),
        sampling: Some(args.sampling.options(128)),
        session_id: args.session.clone(),
        logprobs: false,
    };
    let mut stream = client.generate(req).await?.into_inner();
    let mut out = std::io::stdout().lock();
    while let Some(msg) = stream.message().await? {
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

/// The final statistics, on stderr.
pub fn print_stats(s: &pb::Stats) {
    let finish = pb::FinishReason::try_from(s.finish_reason).map_or("unknown", |f| f.as_str_name());
    eprintln!(
        "prompt {} tokens ({} cached, {:.1} tok/s), generated {} tokens ({:.2} tok/s), time to first token {:.0} ms, \
         expert bytes read {:.2} MiB/token, retention {:.1} %, prefetch accuracy {:.1} %, finish {finish}",
        s.prompt_tokens,
        s.cached_prompt_tokens,
        s.prefill_tokens_per_second,
        s.generated_tokens,
        s.tokens_per_second,
        s.time_to_first_token_ms,
        s.expert_bytes_per_token / f64::from(1u32 << 20),
        100.0 * s.retention,
        100.0 * s.prefetch_accuracy,
    );
}
