//! `waste bench kernels` and `waste bench quant`: flag parsing, fixture
//! reading and printing; the measurements live in `waste_bench::kernels` and
//! `waste_bench::quant_study`. Benchmarks, not tests: outside CI.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use waste_bench::kernels as bench;
use waste_bench::quant_study::{self as study, MatrixReport, Measured, Variant};
use waste_kernels::Format;

use super::quantize::read_matrices;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, clap::Subcommand)]
enum Which {
    /// Per-core GB/s of packed weights consumed, per ISA, vs one core's plain read.
    Kernels(KernelArgs),
    /// Bits per weight and relative error of every variant on the real matrices, beside llama.cpp's.
    Quant(QuantArgs),
    /// Expert store GB/s, served (in-process, gRPC) over raw O_DIRECT, with batch latencies.
    Store(super::bench_store::StoreArgs),
    /// Dense (backbone) products: prefill GFLOP/s and decode GB/s per ISA, vs `_ref`.
    Dense(super::bench_dense::DenseArgs),
    /// Decode on a store against 1/max(disk time, compute time) per token, measured in the same run.
    E2e(super::bench_e2e::E2eArgs),
    /// Stop strings: the matcher per piece, and generations with and without the maximum stops.
    Stops(super::bench_stops::StopsArgs),
}

#[derive(Debug, clap::Args)]
struct KernelArgs {
    /// Formats, comma-separated: waste's block formats (q3, q4, q8) or GGUF types with an integer kernel (q2_k, q3_k, q4_k, q5_k, q6_k, q8_0, q4_0, iq4_xs, iq4_nl, iq2_xxs, iq2_xs, iq3_xxs, iq3_s).
    #[arg(long, default_value = "q3")]
    formats: String,
    /// Activation rows per product (1 = decode; a few = prefill).
    #[arg(long, default_value_t = 1)]
    n: usize,
    /// Interleaved repetitions (medians reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Shapes ROWSxCOLS, comma-separated (default: DeepSeek-V3 and Qwen3-30B-A3B expert matrices).
    #[arg(long, default_value = "7168x2048,2048x7168,2048x768,768x2048")]
    shapes: String,
    /// Measure Q4_0, IQ4_NL, Q4_K and IQ4_XS in a GGUF's row-major order (as a
    /// backbone holds them) instead of interleaved by sixteen (as a
    /// store's expert records do).
    #[arg(long)]
    row_major: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct QuantArgs {
    /// The shared fixtures folder.
    #[arg(long, default_value = "../shared/fixtures")]
    fixtures: PathBuf,
    /// Only these study variants (comma-separated names as the table prints them).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// Threads measuring (default: every core); 1 makes the M w/s column a one-core rate.
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    match &args.which {
        Which::Kernels(a) => kernels(a),
        Which::Quant(a) => quant(a),
        Which::Store(a) => super::bench_store::run(a),
        Which::Dense(a) => super::bench_dense::run(a),
        Which::E2e(a) => super::bench_e2e::run(a),
        Which::Stops(a) => super::bench_stops::run(a),
    }
}

/// Last-level cache size of cpu0 from sysfs (32 MiB if unreadable).
pub(super) fn llc_bytes() -> usize {
    let dir = "/sys/devices/system/cpu/cpu0/cache";
    let sizes = (0..8).filter_map(|i| fs_err::read_to_string(format!("{dir}/index{i}/size")).ok());
    let parse = |s: String| {
        let s = s.trim();
        let (num, mul) = match s.strip_suffix('K') {
            Some(n) => (n, 1 << 10),
            None => s.strip_suffix('M').map_or((s, 1), |n| (n, 1 << 20)),
        };
        num.parse::<usize>().ok().map(|v| v * mul)
    };
    sizes.filter_map(parse).max().unwrap_or(32 << 20)
}

fn kernels(a: &KernelArgs) -> Result<()> {
    let formats = a
        .formats
        .split(',')
        .map(kernel_format)
        .collect::<Result<Vec<Format>>>()?;
    let llc = llc_bytes();
    let cfg = bench::Config {
        shapes: a
            .shapes
            .split(',')
            .map(parse_shape)
            .collect::<Result<_>>()?,
        formats,
        n: a.n,
        stream_bytes: 4 * llc,
        repeats: a.repeats,
        row_major: a.row_major,
    };
    eprintln!(
        "LLC {} MiB, streaming set >= {} MiB, n = {}, {} repeats",
        llc >> 20,
        cfg.stream_bytes >> 20,
        a.n,
        a.repeats
    );
    let figs = bench::run(&cfg, |f| eprintln!("  {f}"));
    let rows = bench::with_ratios(&figs);
    if !a.json {
        print!("{}", bench::table(&rows));
        return Ok(());
    }
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let f = &r.fig;
            // the table a product of this format runs here (the ggml types' own)
            let dispatched = if matches!(f.format, Format::Ggml(_)) {
                waste_kernels::ggml::dot::kernels().name()
            } else {
                waste_kernels::quant::kernels().name()
            };
            json!({"format": f.format.name(), "rows": f.rows, "cols": f.cols, "n": f.n, "mode": r.mode(),
                   "isa": f.reader.name(), "dispatched": f.reader.name() == dispatched,
                   "gbps_per_core": f.gbps, "read_gbps_per_core": r.read_gbps,
                   "ratio_to_read": f.gbps / r.read_gbps, "ratio_to_ref": f.gbps / r.ref_gbps, "bytes_per_pass": f.bytes})
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"llc_bytes": llc, "figures": rows}))?
    );
    Ok(())
}

/// A format with a measurable block kernel: waste's own (`q3`, `q3-tcq`), or a GGUF
/// type with an integer kernel, named either case (`q4_k`, `Q4_K`).
fn kernel_format(name: &str) -> Result<Format> {
    let format = name
        .parse::<Format>()
        .or_else(|_| name.to_ascii_uppercase().parse::<Format>())?;
    let ggml_int = matches!(format, Format::Ggml(t) if waste_kernels::ggml::dot::has_kernel(t));
    anyhow::ensure!(
        !format.is_exact() || ggml_int || Format::ROTATED.contains(&format),
        "{name}: no block kernel to measure (its products decode rows to f32)"
    );
    Ok(format)
}

fn parse_shape(s: &str) -> Result<(usize, usize)> {
    let (r, c) = s
        .split_once('x')
        .with_context(|| format!("shape {s:?} is not ROWSxCOLS"))?;
    Ok((r.trim().parse()?, c.trim().parse()?))
}

const LLAMA_TYPES: [&str; 5] = ["Q2_K", "Q3_K", "IQ3_XXS", "IQ3_S", "Q4_K"];

fn quant(a: &QuantArgs) -> Result<()> {
    let ref_path = a.fixtures.join("real_weights_ref/llama_cpp_reference.json");
    let reference: Value = serde_json::from_str(&fs_err::read_to_string(&ref_path)?)
        .context("parse llama.cpp reference")?;
    let sources = [
        (
            "smollm2",
            "real_weights/smollm2_135m_ffn_attn_bf16.safetensors",
        ),
        ("minilm", "real_weights_ref/minilm_l6_f32.safetensors"),
    ];
    let variants: Vec<Variant> = if a.variants.is_empty() {
        Variant::ALL.to_vec()
    } else {
        a.variants
            .iter()
            .map(|n| {
                Variant::ALL
                    .into_iter()
                    .find(|v| v.name() == *n)
                    .with_context(|| format!("no study variant {n:?}"))
            })
            .collect::<Result<_>>()?
    };
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = a.threads {
        pool = pool.num_threads(t);
    }
    let pool = pool.build().context("start the measuring threads")?;
    let mut reports = Vec::new();
    for (tag, file) in sources {
        for m in read_matrices(&a.fixtures.join(file))? {
            let key = format!("{tag}/{}", m.name);
            let llama = LLAMA_TYPES
                .iter()
                .map(|t| {
                    let fig = &reference["reference"][&key][t];
                    let get = |k: &str| {
                        fig[k]
                            .as_f64()
                            .with_context(|| format!("{key} {t} {k} in {}", ref_path.display()))
                    };
                    Ok(Measured {
                        name: t.to_string(),
                        bits_per_weight: get("bits_per_weight")?,
                        rel_error: get("rel_error")?,
                        seconds: 0.0,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            eprintln!("measuring {key}");
            reports.push(pool.install(|| {
                MatrixReport::measure(key, m.rows, m.cols, &m.values, &variants, llama)
            })?);
        }
    }
    if !a.json {
        print!("{}", study::table(&reports));
        return Ok(());
    }
    let figs = |v: &[Measured]| -> serde_json::Map<String, Value> {
        v.iter()
            .map(|m| {
                (
                    m.name.clone(),
                    json!({"bits_per_weight": m.bits_per_weight, "rel_error": m.rel_error, "seconds": m.seconds}),
                )
            })
            .collect()
    };
    let out: Vec<Value> = reports
        .iter()
        .map(|r| json!({"matrix": r.matrix, "shape": [r.rows, r.cols], "waste": figs(&r.waste), "llama_cpp": figs(&r.reference)}))
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"matrices": out}))?
    );
    Ok(())
}
