//! `waste doctor`: what this machine means for running a model, before a
//! long conversion: the CPU's features and the kernels waste will use, the
//! cores, RAM and cgroup limit (the node's default budget), free disk at the
//! target, the disk's O_DIRECT read rate at the size of one expert record,
//! and, for a store or a release's shape, `waste plan`'s plan with the
//! measured rate: whether it fits and the decode bound.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use waste_format::io::{BufferPool, DirectFile, DirectMode, EngineConfig, available_bytes};
use waste_kernels::quant::kernels;
use waste_node::parse_size;
use waste_node::plan as node_plan;

use waste_node::plan::Target;

use super::plan::{self, RamFlags};

/// CPU flags (as /proc/cpuinfo spells them) that decide which kernels run.
const FEATURES: [&str; 12] = [
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512vbmi",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
];

/// Read size when no model is named: a mid-sized expert record.
const DEFAULT_READ_BYTES: u64 = 4 << 20;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    plan: plan::TargetArgs,
    /// The folder a store would be written to (free space, read rate).
    #[arg(long, default_value = ".")]
    target: PathBuf,
    /// Size of the scratch file read back to measure the disk, e.g. 512M.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    scratch: u64,
    #[command(flatten)]
    ram: RamFlags,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    cpu: String,
    /// The features of [`FEATURES`] this CPU has.
    features: Vec<&'static str>,
    /// The kernel table every product will use (`WASTE_KERNELS` may force one).
    kernels: &'static str,
    cores: usize,
    mem_total_bytes: Option<u64>,
    mem_available_bytes: Option<u64>,
    cgroup_limit_bytes: Option<u64>,
    /// The node's default RAM budget here.
    default_budget_bytes: Option<u64>,
    target: PathBuf,
    free_bytes: u64,
    disk: DiskRate,
    plan: Option<node_plan::Report>,
    advice: Vec<String>,
}

#[derive(Debug, Serialize)]
struct DiskRate {
    /// Whether reads bypassed the page cache (O_DIRECT).
    direct: bool,
    read_bytes: u64,
    reads: usize,
    threads: usize,
    seconds: f64,
    gbps: f64,
}

pub fn run(args: &Args) -> Result<()> {
    let target = args.plan.target();
    let flags = args.ram;
    // The read size comes from the model; the measured rate then bounds
    // its decode.
    let mut plan = target
        .as_ref()
        .map(|t| node_plan::report(t, flags.into(), 1.0))
        .transpose()?;
    let read_bytes = plan
        .as_ref()
        .map_or(DEFAULT_READ_BYTES, |p| p.largest_record_bytes.max(4096));
    let free_bytes = available_bytes(&args.target)
        .with_context(|| format!("free space at {}", args.target.display()))?;
    if args.scratch.saturating_add(1 << 30) > free_bytes {
        bail!(
            "{} has {:.2} GB free: too little for a {:.2} GB scratch file and 1 GiB to spare (give --scratch smaller or --target elsewhere)",
            args.target.display(),
            free_bytes as f64 / 1e9,
            args.scratch as f64 / 1e9
        );
    }
    let disk = measure_disk(&args.target, args.scratch, read_bytes)?;
    if let Some(p) = plan.as_mut() {
        p.set_disk_rate(disk.gbps);
    }

    let mut report = Report {
        cpu: cpu_model().unwrap_or_else(|| "unknown".into()),
        features: cpu_features(),
        kernels: kernels().name(),
        cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        mem_total_bytes: meminfo("MemTotal:"),
        mem_available_bytes: meminfo("MemAvailable:"),
        cgroup_limit_bytes: node_plan::cgroup_limit(),
        default_budget_bytes: node_plan::default_budget(),
        target: args.target.clone(),
        free_bytes,
        disk,
        plan,
        advice: Vec::new(),
    };
    report.advice = advice(&report, target.as_ref().is_some_and(Target::to_convert));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

/// Writes `size` bytes to a scratch file in `dir`, then reads them back in
/// `read_bytes` pieces, in a shuffled order, from as many threads as the
/// node's IO engine uses, bypassing the page cache where the file system
/// allows. The file is removed either way.
fn measure_disk(dir: &Path, size: u64, read_bytes: u64) -> Result<DiskRate> {
    let piece = waste_format::align_up(read_bytes);
    let reads = (size / piece).max(1) as usize;
    let path = dir.join(format!(".waste-doctor-{}", std::process::id()));
    let _remove = RemoveOnDrop(path.clone());
    eprintln!(
        "measuring {}: writing a {:.2} GB scratch file, then reading it back in {:.2} MB pieces",
        dir.display(),
        (piece * reads as u64) as f64 / 1e9,
        piece as f64 / 1e6
    );
    write_scratch(&path, piece * reads as u64)?;
    let file = DirectFile::open(&path, DirectMode::Prefer)?;
    let threads = EngineConfig::default().threads.max(1);
    let pool = BufferPool::new(threads * piece as usize);
    // A fixed shuffle: consecutive reads land apart, as a layer's experts do.
    let mut order: Vec<usize> = (0..reads).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut buf = pool.acquire(piece as usize);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&slot) = order.get(i) else {
                            return Ok(());
                        };
                        file.read_into(slot as u64 * piece, piece as usize, &mut buf)?;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a disk reader panicked")?;
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(DiskRate {
        direct: file.is_direct(),
        read_bytes: piece,
        reads,
        threads,
        seconds,
        gbps: (piece * reads as u64) as f64 / seconds / 1e9,
    })
}

/// Incompressible bytes, written and synced so that the reads find them on
/// the device.
fn write_scratch(path: &Path, size: u64) -> Result<()> {
    use std::io::Write;
    // A new file: never one already there, nor through a link.
    let mut f = fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut written = 0;
    while written < size {
        for b in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        let n = (size - written).min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        written += n as u64;
    }
    f.sync_all()?;
    Ok(())
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs_err::remove_file(&self.0);
    }
}

fn cpu_model() -> Option<String> {
    let info = fs_err::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

fn cpu_features() -> Vec<&'static str> {
    let info = fs_err::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map_or(Vec::new(), |(_, f)| f.split_whitespace().collect());
    FEATURES.into_iter().filter(|f| flags.contains(f)).collect()
}

/// A /proc/meminfo value (`key` with its colon), in bytes.
fn meminfo(key: &str) -> Option<u64> {
    let text = fs_err::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn gb(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
}

/// What the figures mean, in sentences. `to_convert`: the plan is of a
/// release shape, whose store is yet to be written (a store is on disk).
fn advice(r: &Report, to_convert: bool) -> Vec<String> {
    let mut out = Vec::new();
    let forced = std::env::var("WASTE_KERNELS").is_ok();
    out.push(match r.kernels {
        _ if forced => format!("kernels: {} (chosen by WASTE_KERNELS)", r.kernels),
        "ref" => "no AVX2 on this CPU: every product runs the portable scalar kernels, several times slower than AVX2".into(),
        "avx2" => "kernels: AVX2 (no AVX-512 here)".into(),
        "avx2-vnni" => "kernels: AVX2 with AVX-VNNI (no AVX-512 here)".into(),
        "avx512-bw" => "kernels: AVX-512 F/BW/VL without VNNI and VBMI: the block formats use the AVX2 integer kernels".into(),
        other => format!("kernels: {other}, the fastest waste has"),
    });
    if !r.disk.direct {
        out.push(format!(
            "{} refuses O_DIRECT (tmpfs, some network file systems): the read rate includes the page cache and says little about a store there",
            r.target.display()
        ));
    }
    let Some(p) = &r.plan else {
        out.push("name a model (a STORE, or --like kimi-k3 and the others) to see whether it fits here and its decode bound".into());
        return out;
    };
    if p.fits {
        out.push(format!(
            "{}: fits in a {} budget, leaving {} for the expert cache",
            p.source,
            gb(p.budget_bytes),
            gb(p.expert_cache_bytes)
        ));
    } else {
        let fixed = p.resident_bytes - p.expert_cache_bytes.min(p.experts_bytes);
        out.push(format!(
            "{}: does not fit: backbone, state and buffers need {}, the budget is {}: lower --ctx-size or --max-sessions, choose a smaller backbone format, or use a machine with more RAM",
            p.source,
            gb(fixed),
            gb(p.budget_bytes)
        ));
    }
    let store = p.experts_bytes + p.backbone_bytes;
    if to_convert && store > r.free_bytes {
        out.push(format!(
            "the store needs about {} on disk, {} has {} free",
            gb(store),
            r.target.display(),
            gb(r.free_bytes)
        ));
    }
    if p.expert_bytes_per_token > 0 {
        out.push(format!(
            "a token reads {} of experts: at {:.2} GB/s that bounds decoding at {:.2} tok/s when every expert comes from disk; the expert cache and cores raise or lower what you get",
            gb(p.expert_bytes_per_token),
            r.disk.gbps,
            p.decode_bound_tok_s
        ));
    }
    out
}

fn text(r: &Report) -> String {
    let opt = |b: Option<u64>| b.map_or("unknown".into(), gb);
    let mut s = format!(
        "cpu:     {} ({} cores for waste)\n         features: {}\n         kernels: {}\n",
        r.cpu,
        r.cores,
        if r.features.is_empty() {
            "none of AVX2/AVX-512/AMX".into()
        } else {
            r.features.join(" ")
        },
        r.kernels
    );
    s += &format!(
        "memory:  {} total, {} available, cgroup limit {}; the node's default budget {}\n",
        opt(r.mem_total_bytes),
        opt(r.mem_available_bytes),
        r.cgroup_limit_bytes.map_or("none".into(), gb),
        opt(r.default_budget_bytes)
    );
    s += &format!(
        "disk:    {} free at {}; {} reads of {:.2} MB from {} threads: {:.2} GB/s\n",
        gb(r.free_bytes),
        r.target.display(),
        if r.disk.direct {
            "O_DIRECT"
        } else {
            "buffered"
        },
        r.disk.read_bytes as f64 / 1e6,
        r.disk.threads,
        r.disk.gbps
    );
    if let Some(p) = &r.plan {
        s += &format!("\n{}\n", plan::text(p));
    }
    s += "\n";
    for a in &r.advice {
        s += &format!("- {a}\n");
    }
    s
}
