//! Decode measurements on a loaded node, for `waste bench e2e`: one
//! generation (prompt, then greedy tokens) run in-process through the same
//! engine and sources Generate uses, with its timing and expert statistics.
//! A benchmark helper, never a test of speed.

use tokio::sync::mpsc;
use waste_model::SamplingParams;

use waste_node::Node;
use waste_node::generate::{self, Event, GenerateJob, Summary};
use waste_node::{Error, Result};

/// Generates `n` greedy tokens after `prompt` (end-of-sequence ignored) on a
/// fresh context; returns the final statistics and the tokens.
pub async fn decode(node: &Node, prompt: Vec<u32>, n: usize) -> Result<(Summary, Vec<u32>)> {
    let params = SamplingParams {
        max_tokens: Some(n),
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let job = GenerateJob::new(prompt, params, Vec::new());
    let (tx, mut rx) = mpsc::channel(n + 8);
    let state = generate::fresh_state(node, node.ctx_size);
    let collect = async {
        let mut tokens = Vec::new();
        while let Some(e) = rx.recv().await {
            match e? {
                Event::Token { ids, .. } => tokens.extend(ids),
                Event::Done(s) => return Ok((s, tokens)),
            }
        }
        Err(Error::Transport(
            "the generation ended without statistics".into(),
        ))
    };
    let (_, result) = tokio::join!(
        generate::run(&node.engine, None, None, state, job, &tx),
        collect
    );
    result
}
