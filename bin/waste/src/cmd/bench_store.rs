//! `waste bench store`: served bandwidth (in-process and over gRPC) against
//! the raw O_DIRECT bandwidth of the same files, as interleaved pairs
//! (waste_bench::store). A benchmark: never run in CI.

use std::path::PathBuf;

use anyhow::Result;
use waste_bench::store::{self as bench, BenchConfig};

#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The store's experts/ folder: raw figures, served in-process and over loopback gRPC.
    #[arg(long, required_unless_present = "addr")]
    experts: Option<PathBuf>,
    /// A running store (served over its gRPC); raw figures need --experts on this machine too.
    #[arg(long)]
    addr: Option<String>,
    /// Bearer token of the store at --addr.
    #[arg(long, env = "WASTE_STORE_TOKEN")]
    token: Option<String>,
    /// Interleaved raw/served pairs (the median needs at least 5).
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// GB each run reads.
    #[arg(long, default_value_t = 1.0)]
    gb: f64,
    /// Batches (one layer's top-k each) in flight: 1 = no prefetch, 2 = next layer overlapped.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Reads in flight in the store's engine.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// The engine's read segment in MiB (0: one read per record; the
    /// store's default is 2).
    #[arg(long, default_value_t = 2)]
    segment_mib: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &StoreArgs) -> Result<()> {
    let cfg = BenchConfig {
        experts: a.experts.clone(),
        addr: a.addr.clone(),
        token: a.token.clone(),
        pairs: a.pairs,
        bytes_per_run: (a.gb * 1e9) as u64,
        window: a.window,
        threads: a.threads,
        segment_bytes: a.segment_mib << 20,
        seed: a.seed,
    };
    let report = bench::run(&cfg, |line| eprintln!("{line}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", bench::table(&report));
    }
    Ok(())
}
