//! `waste bench kernels` and `waste bench quant`: flag parsing, fixture
//! reading and printing; the measurements live in `waste_kernels::bench` and
//! `waste_kernels::quant::study`. Benchmarks, not tests: outside CI.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use waste_kernels::Format;
use waste_kernels::bench::{self, Figure, Reader};
use waste_kernels::quant::study::Variant;

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
}

#[derive(Debug, clap::Args)]
struct KernelArgs {
    /// Formats, comma-separated.
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
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct QuantArgs {
    /// The shared fixtures folder.
    #[arg(long, default_value = "../shared/fixtures")]
    fixtures: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    match &args.which {
        Which::Kernels(a) => kernels(a),
        Which::Quant(a) => quant(a),
    }
}

/// Last-level cache size of cpu0 from sysfs (32 MiB if unreadable).
fn llc_bytes() -> usize {
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
        .map(str::parse)
        .collect::<waste_kernels::Result<Vec<Format>>>()?;
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
    };
    eprintln!(
        "LLC {} MiB, streaming set >= {} MiB, n = {}, {} repeats",
        llc >> 20,
        cfg.stream_bytes >> 20,
        a.n,
        a.repeats
    );
    let figs = bench::run(&cfg, |f| {
        eprintln!(
            "  {} {}x{} {} {}: {:.2} GB/s",
            f.format,
            f.rows,
            f.cols,
            mode(f),
            f.reader.name(),
            f.gbps
        )
    });
    let find = |f: &Figure, r: Reader| {
        figs.iter()
            .find(|g| {
                (g.format, g.rows, g.cols, g.streaming, g.reader)
                    == (f.format, f.rows, f.cols, f.streaming, r)
            })
            .map_or(0.0, |g| g.gbps)
    };
    let rows: Vec<Value> = figs
        .iter()
        .filter(|f| f.reader != Reader::MemRead)
        .map(|f| {
            let (read, rf) = (find(f, Reader::MemRead), find(f, Reader::Kernel(waste_kernels::Isa::Ref)));
            json!({"format": f.format.name(), "rows": f.rows, "cols": f.cols, "n": f.n, "mode": mode(f),
                   "isa": f.reader.name(), "gbps_per_core": f.gbps, "read_gbps_per_core": read,
                   "ratio_to_read": f.gbps / read, "ratio_to_ref": f.gbps / rf, "bytes_per_pass": f.bytes})
        })
        .collect();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"llc_bytes": llc, "figures": rows}))?
        );
        return Ok(());
    }
    println!(
        "{:6} {:>11} {:9} {:7} {:>8} {:>8} {:>8} {:>8}",
        "format", "shape", "mode", "isa", "GB/s", "read", "x read", "x ref"
    );
    for r in &rows {
        println!(
            "{:6} {:>11} {:9} {:7} {:>8.2} {:>8.2} {:>8.2} {:>8.1}",
            r["format"].as_str().unwrap_or(""),
            format!("{}x{}", r["rows"], r["cols"]),
            r["mode"].as_str().unwrap_or(""),
            r["isa"].as_str().unwrap_or(""),
            r["gbps_per_core"].as_f64().unwrap_or(0.0),
            r["read_gbps_per_core"].as_f64().unwrap_or(0.0),
            r["ratio_to_read"].as_f64().unwrap_or(0.0),
            r["ratio_to_ref"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

fn parse_shape(s: &str) -> Result<(usize, usize)> {
    let (r, c) = s
        .split_once('x')
        .with_context(|| format!("shape {s:?} is not ROWSxCOLS"))?;
    Ok((r.trim().parse()?, c.trim().parse()?))
}

fn mode(f: &Figure) -> &'static str {
    if f.streaming { "streaming" } else { "resident" }
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
    let mut out = Vec::new();
    for (tag, file) in sources {
        for m in read_matrices(&a.fixtures.join(file))? {
            let key = format!("{tag}/{}", m.name);
            let llama = &reference["reference"][&key];
            let mut variants = serde_json::Map::new();
            for v in Variant::ALL {
                let (bpw, err) = v.measure(m.rows, m.cols, &m.values)?;
                variants.insert(v.name(), json!({"bits_per_weight": bpw, "rel_error": err}));
            }
            let llama: serde_json::Map<String, Value> = LLAMA_TYPES
                .iter()
                .map(|t| (t.to_string(), json!({"bits_per_weight": llama[t]["bits_per_weight"], "rel_error": llama[t]["rel_error"]})))
                .collect();
            eprintln!("measured {key}");
            out.push(json!({"matrix": key, "shape": [m.rows, m.cols], "waste": variants, "llama_cpp": llama}));
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"matrices": out}))?
        );
        return Ok(());
    }
    let err = |m: &Value, side: &str, v: &str| m[side][v]["rel_error"].as_f64().unwrap_or(f64::NAN);
    let names: Vec<String> = Variant::ALL.iter().map(|v| v.name()).collect();
    println!(
        "{:52} {:>9} {}",
        "matrix",
        "shape",
        LLAMA_TYPES
            .iter()
            .chain(names.iter().map(String::as_str).collect::<Vec<_>>().iter())
            .map(|n| format!("{n:>8.8}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for m in &out {
        let llama = LLAMA_TYPES
            .iter()
            .map(|t| format!("{:>8.4}", err(m, "llama_cpp", t)));
        let ours = names.iter().map(|n| format!("{:>8.4}", err(m, "waste", n)));
        let shape = format!("{}x{}", m["shape"][0], m["shape"][1]);
        println!(
            "{:52} {shape:>9} {}",
            m["matrix"].as_str().unwrap_or(""),
            llama.chain(ours).collect::<Vec<_>>().join(" ")
        );
    }
    println!(
        "\n{:20} {:>7} {:>9} {:>9} {:>12} {:>14}",
        "variant", "bpw", "mean err", "max err", "max/Q3_K", "max/IQ3_XXS"
    );
    for n in &names {
        let ratio = |t: &str| {
            out.iter()
                .map(|m| err(m, "waste", n) / err(m, "llama_cpp", t))
                .fold(0.0, f64::max)
        };
        let errs: Vec<f64> = out.iter().map(|m| err(m, "waste", n)).collect();
        let bpw = out
            .iter()
            .map(|m| m["waste"][n]["bits_per_weight"].as_f64().unwrap_or(0.0))
            .fold(0.0, f64::max);
        let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
        println!(
            "{n:20} {bpw:>7.4} {mean:>9.4} {:>9.4} {:>12.3} {:>14.3}",
            errs.iter().copied().fold(0.0, f64::max),
            ratio("Q3_K"),
            ratio("IQ3_XXS")
        );
    }
    Ok(())
}
