//! `waste bench dense`: flag parsing and printing for the dense (backbone)
//! product benchmark; the measurement lives in `waste_bench::dense`.
//! A benchmark, not a test: outside CI.

use anyhow::{Context, Result};
use serde_json::{Value, json};
use waste_bench::dense as bench;

#[derive(Debug, clap::Args)]
pub struct DenseArgs {
    /// Shapes ROWSxCOLS, comma-separated (default: SmolLM2-135M q/o, up/gate, down; a DeepSeek-V3 expert).
    #[arg(long, default_value = "576x576,1536x576,576x1536,7168x2048")]
    shapes: String,
    /// Activation rows of the prefill figures (decode is n = 1).
    #[arg(long, default_value_t = 64)]
    n: usize,
    /// Rayon threads (0 = the default pool: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// f32 weights only (default: f32, bf16, q8 with integer and exact
    /// products, q4, q3 and q3-tcq).
    #[arg(long)]
    f32_only: bool,
    /// Interleaved repetitions (medians reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Least seconds per timed repetition.
    #[arg(long, default_value_t = 0.2)]
    min_seconds: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &DenseArgs) -> Result<()> {
    let shapes = a
        .shapes
        .split(',')
        .map(|s| {
            let (r, c) = s
                .split_once('x')
                .with_context(|| format!("shape {s:?} is not ROWSxCOLS"))?;
            Ok((r.trim().parse()?, c.trim().parse()?))
        })
        .collect::<Result<Vec<(usize, usize)>>>()?;
    let llc = super::bench::llc_bytes();
    let cfg = bench::Config {
        shapes,
        n: a.n,
        bf16: !a.f32_only,
        stream_bytes: 4 * llc,
        repeats: a.repeats,
        min_seconds: a.min_seconds,
        threads: a.threads,
    };
    eprintln!(
        "prefill n = {}, decode streaming set >= {} MiB, {} repeats",
        a.n,
        cfg.stream_bytes >> 20,
        a.repeats
    );
    let (threads, figs) = bench::run(&cfg, |f| eprintln!("  {f}"))?;
    let read = bench::stream_read_gbps(cfg.stream_bytes, a.repeats, a.min_seconds);
    eprintln!("{threads} threads; one core's streaming read: {read:.2} GB/s");
    if !a.json {
        print!("{}", bench::table(&figs));
        println!(
            "one core's streaming read of {} MiB: {read:.2} GB/s",
            cfg.stream_bytes >> 20
        );
        for f in figs.iter().filter(|f| f.streaming) {
            println!(
                "{:5} {:>10} decode streaming {:7}: {:.2} x one core's read",
                f.dtype,
                format!("{}x{}", f.rows, f.cols),
                f.isa.name(),
                f.gbps / read
            );
        }
        return Ok(());
    }
    let rows: Vec<Value> = figs
        .iter()
        .map(|f| {
            let r = bench::ref_of(&figs, f);
            json!({"dtype": f.dtype, "rows": f.rows, "cols": f.cols, "n": f.n, "mode": f.mode(),
                   "isa": f.isa.name(), "gflops": f.gflops, "gbps": f.gbps,
                   "ratio_to_ref": r.map(|r| f.gflops / r.gflops),
                   "ratio_to_1core_read": f.streaming.then(|| f.gbps / read)})
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({"threads": threads, "stream_read_1core_gbps": read, "figures": rows})
        )?
    );
    Ok(())
}
