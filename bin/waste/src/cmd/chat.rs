//! `waste chat`: an interactive chat, against a running node (`--node URL`)
//! or in-process on a store (`--model STORE`). The conversation is resent
//! each turn under one session id, so the node prefills only the new turn.
//! Answers stream as they are sampled; Ctrl-C stops the current answer (not
//! the program); `/reset` starts over, `/stats` shows the last answer's
//! statistics, `/exit` or Ctrl-D quits. A line ending in `\` continues on
//! the next one; input history is kept between runs.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use rustyline::error::ReadlineError;
use waste_proto::node::v1 as pb;

use crate::chat_backend::{Backend, Piece};
use crate::signal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A running node [default: http://127.0.0.1:50052].
    #[arg(long, conflicts_with = "model")]
    node: Option<String>,
    /// Run in this process instead: a store folder (backbone/ + experts/), or
    /// a GGUF file or Hugging Face folder straight from its files.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Bearer token the node requires.
    #[arg(long, env = "WASTE_NODE_TOKEN")]
    token: Option<String>,
    /// A system message that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    #[command(flatten)]
    sampling: super::sampling::SamplingArgs,
    /// Context size with --model [default: the model's, at most 4096].
    #[arg(long)]
    ctx_size: Option<usize>,
    /// The attention cache's value type with --model: f32 (exact) or f16
    /// (half the bytes, as llama.cpp's default) [default: f32].
    #[arg(long, default_value = "f32")]
    cache_type: waste_model::cache::CacheType,
}

const HELP: &str = "/reset clears the conversation, /stats shows the last answer's statistics, \
                    /exit or Ctrl-D quits; end a line with \\ to go on; Ctrl-C stops an answer";

pub fn run(a: &Args) -> Result<()> {
    let rt = signal::runtime()?;
    let mut backend = rt.block_on(async {
        match &a.model {
            Some(store) => Backend::local(store, a.ctx_size, a.cache_type).await,
            None => {
                let url = a.node.as_deref().unwrap_or("http://127.0.0.1:50052");
                Backend::remote(url, a.token.as_deref()).await
            }
        }
    })?;
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = history_file();
    let _ = editor.load_history(&history);
    let opening: Vec<pb::ChatMessage> = a.system.iter().map(|s| message("system", s)).collect();
    let mut messages = opening.clone();
    let mut session = session_id();
    let mut last: Option<pb::Stats> = None;
    println!("waste chat: {HELP}");
    loop {
        let input = match read_input(&mut editor) {
            Ok(Some(text)) => text,
            Ok(None) => break,
            Err(e) => return Err(e.into()),
        };
        match input.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/help" => println!("{HELP}"),
            "/reset" => {
                messages.clone_from(&opening);
                session = session_id();
                last = None;
                println!("(conversation cleared)");
            }
            "/stats" => match &last {
                Some(s) => crate::cmd::generate::print_stats(s),
                None => println!("(no statistics: no answer yet, or the last one was stopped)"),
            },
            cmd if cmd.starts_with('/') => println!("unknown command {cmd}; {HELP}"),
            _ => {
                let _ = editor.add_history_entry(input.as_str());
                messages.push(message("user", &input));
                let req = request(a, &messages, &session);
                match rt.block_on(turn(&mut backend, req)) {
                    Ok((answer, stats)) => {
                        messages.push(message("assistant", &answer));
                        last = stats;
                    }
                    Err(e) => {
                        messages.pop();
                        println!("\nerror: {e:#}");
                    }
                }
            }
        }
    }
    let _ = editor.save_history(&history);
    Ok(())
}

/// One input, lines ending in `\` joined; None at end of input (Ctrl-D).
/// Ctrl-C at the prompt discards the line being typed.
fn read_input(editor: &mut rustyline::DefaultEditor) -> rustyline::Result<Option<String>> {
    let mut text = String::new();
    loop {
        let prompt = if text.is_empty() { ">>> " } else { "... " };
        match editor.readline(prompt) {
            Ok(line) => match line.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push('\n');
                }
                None => {
                    text.push_str(&line);
                    return Ok(Some(text));
                }
            },
            Err(ReadlineError::Interrupted) => text.clear(),
            Err(ReadlineError::Eof) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Streams one answer to stdout; Ctrl-C stops it (no statistics then).
async fn turn(
    backend: &mut Backend,
    req: pb::GenerateRequest,
) -> Result<(String, Option<pb::Stats>)> {
    let mut answer = backend.send(req).await?;
    let mut text = String::new();
    let mut out = std::io::stdout();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            piece = answer.next() => match piece? {
                Some(Piece::Text(t)) => {
                    write!(out, "{t}")?;
                    out.flush()?;
                    text.push_str(&t);
                }
                Some(Piece::Done(s)) => {
                    writeln!(out)?;
                    return Ok((text, Some(s)));
                }
                None => bail!("the answer ended without statistics"),
            },
            _ = &mut ctrl_c => {
                // Dropping the stream cancels the generation on the node.
                drop(answer);
                writeln!(out, "\n[stopped]")?;
                return Ok((text, None));
            }
        }
    }
}

fn request(a: &Args, messages: &[pb::ChatMessage], session: &str) -> pb::GenerateRequest {
    pb::GenerateRequest {
        input: Some(pb::generate_request::Input::Messages(pb::Chat {
            messages: messages.to_vec(),
            ..Default::default()
        })),
        sampling: Some(a.sampling.options(512)),
        session_id: Some(session.to_string()),
        logprobs: false,
    }
}

/// A chat turn of `role`.
pub fn message(role: &str, content: &str) -> pb::ChatMessage {
    pb::ChatMessage {
        role: role.into(),
        content: content.into(),
    }
}

/// A session id no other chat is using: process id and start time.
fn session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("chat-{}-{nanos:x}", std::process::id())
}

fn history_file() -> PathBuf {
    let base = std::env::var_os("WASTE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/waste")))
        .unwrap_or_else(|| PathBuf::from("."));
    let _ = std::fs::create_dir_all(&base);
    base.join("chat_history")
}
