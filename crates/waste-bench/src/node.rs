//! Decode measurements on a loaded node, for `waste bench e2e`: one
//! generation (prompt, then greedy tokens) run in-process through the same
//! engine and sources Generate uses, with its timing and expert statistics.
//! A benchmark helper, never a test of speed.

use tokio::sync::mpsc;
use waste_model::SamplingParams;

use waste_node::Node;
use waste_node::generate::{self, Event, GenerateJob, Summary};
use waste_node::{Error, Result};

use crate::store::cpu::MachineMeter;

/// One generation's statistics and tokens.
#[derive(Debug)]
pub struct Decoded {
    pub summary: Summary,
    pub tokens: Vec<u32>,
    /// The machine's busy CPU seconds (all cores, every process) per decode
    /// step, counted from the first token on as the decode rate is; `None`
    /// where `/proc/stat` is unreadable or no step ran.
    pub busy_cpu_per_step: Option<f64>,
    /// The CPU seconds the host stole from the machine's cores per decode
    /// step, counted the same way (on a VM its work for the guest's disk
    /// reads shows only here).
    pub stolen_cpu_per_step: Option<f64>,
}

/// Generates `n` greedy tokens after `prompt` (end-of-sequence ignored) on a
/// fresh context.
pub async fn decode(node: &Node, prompt: Vec<u32>, n: usize) -> Result<Decoded> {
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
        let mut meter = None;
        while let Some(e) = rx.recv().await {
            match e? {
                Event::Token { ids, .. } => {
                    meter.get_or_insert_with(MachineMeter::start);
                    tokens.extend(ids);
                }
                Event::Done(summary) => {
                    let steps = summary.decode_steps;
                    let per_step =
                        |s: Option<f64>| s.filter(|_| steps > 0).map(|s| s / steps as f64);
                    return Ok(Decoded {
                        summary,
                        tokens,
                        busy_cpu_per_step: per_step(
                            meter.as_ref().and_then(MachineMeter::busy_seconds),
                        ),
                        stolen_cpu_per_step: per_step(
                            meter.as_ref().and_then(MachineMeter::stolen_seconds),
                        ),
                    });
                }
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
