//! `waste bench e2e`: decode on a store (e.g. from `waste synth-store --like
//! deepseek-v3`), experts read with O_DIRECT and nothing cached, against the
//! bound measured in the same run: 1 / max(disk time per token = expert
//! bytes per token / raw O_DIRECT bandwidth, compute time per token with
//! every expert already in RAM). Also the figure without prefetch, and the
//! time to first token of a long prompt. A benchmark: never run in CI.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;
use waste_format::ExpertsDir;
use waste_node::generate::Summary;
use waste_node::{Config, ExpertMode, Node};

use crate::signal;

#[derive(Debug, clap::Args)]
pub struct E2eArgs {
    /// The store folder (backbone/ and experts/).
    #[arg(long)]
    store: PathBuf,
    /// Tokens to decode per run.
    #[arg(long, default_value_t = 16)]
    tokens: usize,
    /// Length of the (random) prompt.
    #[arg(long, default_value_t = 200)]
    prompt_tokens: usize,
    /// GB read to measure the raw O_DIRECT bandwidth (QD16).
    #[arg(long, default_value_t = 1.0)]
    gb: f64,
    #[arg(long)]
    json: bool,
}

pub fn run(a: &E2eArgs) -> Result<()> {
    let experts = a.store.join("experts");
    let dir = ExpertsDir::open(&experts).context("open experts/")?;
    let raw = raw_bandwidth(&dir, a.gb)?;
    eprintln!("raw O_DIRECT bandwidth (QD16): {:.2} GB/s", raw / 1e9);
    let node_cfg = |prefetch: bool, cache: Option<u64>| Config {
        backbone: a.store.join("backbone"),
        experts: Some(experts.clone()),
        expert_mode: ExpertMode::Local,
        ctx_size: Some(a.prompt_tokens + a.tokens + 8),
        max_sessions: 1,
        prefetch,
        expert_cache: cache,
        ..Config::default()
    };
    signal::runtime()?.block_on(async {
        let run = |cfg: Config, label: &'static str, twice: bool| async move {
            eprintln!("{label}: loading the node");
            let node = Node::load(cfg).await?;
            let vocab = node.engine.model.config().vocab_size as u64;
            let prompt: Vec<u32> = (0..a.prompt_tokens as u64).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
            let (mut s, _) = waste_node::bench::decode(&node, prompt.clone(), a.tokens).await?;
            if twice {
                // Same prompt, greedy: the same experts, now all in RAM.
                (s, _) = waste_node::bench::decode(&node, prompt, a.tokens).await?;
            }
            eprintln!("{label}: {}", line(&s));
            anyhow::Ok(s)
        };
        let streaming = run(node_cfg(true, Some(0)), "prefetch + overlap, no cache", false).await?;
        let no_prefetch = run(node_cfg(false, Some(0)), "no prefetch, no cache", false).await?;
        let in_ram = run(node_cfg(false, None), "every expert in RAM (second pass)", true).await?;
        // The records the routing chose (no cache, no prefetch), not what a
        // prefetch also read by mistake: the bytes a token must cost.
        let needed = no_prefetch.bytes_per_token();
        let disk_s = needed / raw;
        let compute_s = 1.0 / in_ram.decode_tokens_per_second();
        let bound = 1.0 / disk_s.max(compute_s);
        let report = json!({
            "raw_gbps": raw / 1e9,
            "expert_bytes_per_token": needed,
            "expert_bytes_read_per_token_with_prefetch": streaming.bytes_per_token(),
            "disk_seconds_per_token": disk_s,
            "compute_seconds_per_token": compute_s,
            "bound_tokens_per_second": bound,
            "decode_tokens_per_second": streaming.decode_tokens_per_second(),
            "ratio_to_bound": streaming.decode_tokens_per_second() / bound,
            "no_prefetch_tokens_per_second": no_prefetch.decode_tokens_per_second(),
            "no_prefetch_ratio_to_bound": no_prefetch.decode_tokens_per_second() / bound,
            "prefetch_accuracy": streaming.prefetch_accuracy(),
            "retention": streaming.retention(),
            "time_to_first_token_seconds": streaming.time_to_first_token.as_secs_f64(),
            "prompt_tokens": a.prompt_tokens,
            "in_ram_retention": in_ram.retention(),
        });
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "bound {bound:.3} tok/s = 1/max(disk {disk_s:.3} s, compute {compute_s:.3} s per token)\n\
                 decode {:.3} tok/s = {:.2} x bound (prefetch + overlap); without prefetch {:.3} tok/s = {:.2} x bound\n\
                 expert bytes per token {:.1} MB ({:.1} MB read with prefetch, accuracy {:.1} %), time to first token ({} tokens) {:.2} s",
                streaming.decode_tokens_per_second(),
                streaming.decode_tokens_per_second() / bound,
                no_prefetch.decode_tokens_per_second(),
                no_prefetch.decode_tokens_per_second() / bound,
                needed / 1e6,
                streaming.bytes_per_token() / 1e6,
                100.0 * streaming.prefetch_accuracy(),
                a.prompt_tokens,
                streaming.time_to_first_token.as_secs_f64(),
            );
        }
        Ok(())
    })
}

fn line(s: &Summary) -> String {
    format!(
        "{:.3} tok/s decode, {:.1} MB experts/token, retention {:.1} %, prefetch accuracy {:.1} %, TTFT {:.2} s",
        s.decode_tokens_per_second(),
        s.bytes_per_token() / 1e6,
        100.0 * s.retention(),
        100.0 * s.prefetch_accuracy(),
        s.time_to_first_token.as_secs_f64()
    )
}

/// Bytes per second of expert-sized O_DIRECT reads at queue depth 16 over
/// about `gb` GB of the store's records (median of three passes).
fn raw_bandwidth(dir: &ExpertsDir, gb: f64) -> Result<f64> {
    let files = waste_store::bench::raw::open_direct(dir)?;
    let mut reads = Vec::new();
    let mut bytes = 0u64;
    'fill: for l in &dir.index().layers {
        for e in 0..l.n_experts {
            if bytes as f64 > gb * 1e9 {
                break 'fill;
            }
            reads.push((l.layer, e));
            bytes += l.record_len;
        }
    }
    let mut rates: Vec<f64> = (0..3)
        .map(|_| {
            waste_store::bench::raw::read_all(dir, &files, &reads, 16).map(|(b, s)| b as f64 / s)
        })
        .collect::<waste_store::Result<_>>()?;
    rates.sort_by(f64::total_cmp);
    Ok(rates[1])
}
