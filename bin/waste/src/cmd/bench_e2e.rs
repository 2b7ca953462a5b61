//! `waste bench e2e`: decode on a store (e.g. from `waste synth-store --like
//! deepseek-v3`), experts read with O_DIRECT and nothing cached, against the
//! bound measured in the same run: 1 / max(disk time per token = expert
//! bytes per token / raw O_DIRECT bandwidth, compute time per token with
//! every expert already in RAM). Decode with prefetch and without alternate
//! on one loaded node, round after round, with a raw-bandwidth pass between
//! runs (the disks of shared machines drift): medians are reported, with the
//! spread. With `--store-addr` the decode runs go through a store daemon on
//! this machine (fetch or compute-at-store). Compute time is the median of
//! as many runs as rounds. Also the time to first token of a long prompt,
//! and, where `/proc/stat` tells it, the share of CPU time a hypervisor
//! stole during each kind of run and the machine's busy CPU seconds per
//! decode step: what decode spends beyond the in-RAM runs is the IO path's CPU
//! (the node's reads, and with a store daemon on this machine its reads,
//! checksums and socket too), per GB read, and a second bound counts it:
//! 1 / max(disk, compute, busy CPU per decode step / cores). A benchmark:
//! never run in CI.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use waste_bench::store::cpu::{MachineMeter, steal_note};
use waste_format::ExpertsDir;
use waste_format::io::{DirectFile, Pages, PooledBuf};
use waste_node::generate::Summary;
use waste_node::{Config, ExpertMode, Node};

use crate::signal;

#[derive(Debug, clap::Args)]
pub struct E2eArgs {
    /// The store folder (backbone/ and experts/).
    #[arg(long)]
    store: PathBuf,
    /// Tokens to decode per run.
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    tokens: usize,
    /// Length of the (seeded) prompt whose time to first token is measured (0: not measured).
    #[arg(long, default_value_t = 200)]
    prompt_tokens: usize,
    /// Length of the prompts before each decode run (a new one per round).
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    decode_prompt_tokens: usize,
    /// Rounds of (decode with prefetch, decode without), order alternating.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// GB read by each raw O_DIRECT pass (QD16).
    #[arg(long, default_value_t = 1.0)]
    gb: f64,
    /// Decode through a store daemon serving this store's experts/ on this
    /// machine (`waste store --experts STORE/experts`), e.g.
    /// http://127.0.0.1:50051, instead of reading experts/ in-process.
    #[arg(long)]
    store_addr: Option<String>,
    /// With --store-addr: fetch (records fetched, computed here) or
    /// compute-at-store.
    #[arg(long, default_value = "fetch", requires = "store_addr")]
    expert_mode: ExpertMode,
    /// With --store-addr: fetch every record through gRPC, not on the
    /// store's bulk channel (the node's --no-store-bulk).
    #[arg(long, requires = "store_addr")]
    no_store_bulk: bool,
    /// Bearer token of the store at --store-addr.
    #[arg(long, env = "WASTE_STORE_TOKEN", requires = "store_addr")]
    store_token: Option<String>,
    #[arg(long)]
    json: bool,
}

pub fn run(a: &E2eArgs) -> Result<()> {
    let experts = a.store.join("experts");
    let dir = ExpertsDir::open(&experts).context("open experts/")?;
    // Raw passes into buffers that live as long as the run, laid out in
    // huge pages as the node's IO pool is, and in the 4 KiB pages of a plain
    // heap buffer: the layout sets the device's request size (docs/BENCH.md).
    // The bound takes the faster. The first read into a buffer faults its
    // pages in, so one untimed pass comes first.
    let mut huge_bufs = waste_bench::store::raw::buffers(&dir, 16, Pages::Huge);
    let mut small_bufs = waste_bench::store::raw::buffers(&dir, 16, Pages::Small);
    let files = waste_bench::store::raw::open_direct(&dir)?;
    let mut raw_pass = |raws: &mut Raws| -> Result<()> {
        let seed = 2 * raws.huge.len() as u64 + 1;
        raws.huge
            .push(raw_bandwidth(&dir, &files, a.gb, &mut huge_bufs, seed)?);
        raws.small.push(raw_bandwidth(
            &dir,
            &files,
            a.gb,
            &mut small_bufs,
            seed + 1,
        )?);
        Ok(())
    };
    let mut raws = Raws::default();
    raw_pass(&mut raws)?;
    raws = Raws::default();
    raw_pass(&mut raws)?;
    // Decode runs through the store daemon where one is named; the compute
    // bound, every expert in RAM, reads experts/ locally either way.
    let node_cfg = |cache: Option<u64>, remote: bool| Config {
        backbone: a.store.join("backbone"),
        experts: Some(experts.clone()),
        expert_mode: if remote {
            a.expert_mode
        } else {
            ExpertMode::Local
        },
        store_addr: a.store_addr.clone().filter(|_| remote),
        store_token: a.store_token.clone().filter(|_| remote),
        store_bulk: !a.no_store_bulk,
        ctx_size: Some(a.prompt_tokens.max(a.decode_prompt_tokens) + a.tokens + 8),
        max_sessions: 1,
        prefetch: true,
        expert_cache: cache,
        ..Config::default()
    };
    signal::runtime()?.block_on(async {
        match &a.store_addr {
            Some(addr) => eprintln!(
                "loading the node (no expert cache; experts from {addr}, {:?})",
                a.expert_mode
            ),
            None => eprintln!("loading the node (no expert cache)"),
        }
        let node = Node::load(node_cfg(Some(0), a.store_addr.is_some())).await?;
        let vocab = node.engine.model.config().vocab_size as u64;
        let prompt = |n: usize, seed: u64| -> Vec<u32> {
            (0..n as u64)
                .map(|i| ((i * 7919 + 13 + seed * 104_729) % vocab) as u32)
                .collect()
        };
        let decode = async |p: Vec<u32>| waste_bench::node::decode(&node, p, a.tokens).await;
        let long = if a.prompt_tokens > 0 {
            let long = decode(prompt(a.prompt_tokens, 0)).await?.summary;
            eprintln!("prompt of {} tokens: TTFT {:.2} s", a.prompt_tokens, ttft(&long));
            Some(ttft(&long))
        } else {
            None
        };
        let (mut on, mut off) = (Vec::new(), Vec::new());
        let (mut steal_on, mut steal_off) = (Vec::new(), Vec::new());
        // Busy CPU seconds of the machine per decode step, by run kind, and
        // the seconds the host stole.
        let (mut cpu_on, mut cpu_off) = (Vec::new(), Vec::new());
        let (mut stolen_on, mut stolen_off) = (Vec::new(), Vec::new());
        for r in 0..a.rounds {
            let order = if r % 2 == 0 { [true, false] } else { [false, true] };
            for prefetch in order {
                node.engine.set_prefetch(prefetch);
                let meter = MachineMeter::start();
                let d = decode(prompt(a.decode_prompt_tokens, r as u64 + 1)).await?;
                let (s, steal, cpu) = (d.summary, meter.steal_share(), d.busy_cpu_per_step);
                let stolen = d.stolen_cpu_per_step;
                raw_pass(&mut raws)?;
                let label = if prefetch { "prefetch + overlap" } else { "no prefetch" };
                eprintln!(
                    "round {}: {label}: {}{}; raw {:.2} GB/s (huge pages), {:.2} GB/s (4 KiB pages)",
                    r + 1,
                    line(&s),
                    steal_note(steal),
                    raws.huge[raws.huge.len() - 1] / 1e9,
                    raws.small[raws.small.len() - 1] / 1e9
                );
                if prefetch {
                    on.push(s);
                    steal_on.extend(steal);
                    cpu_on.extend(cpu);
                    stolen_on.extend(stolen);
                } else {
                    off.push(s);
                    steal_off.extend(steal);
                    cpu_off.extend(cpu);
                    stolen_off.extend(stolen);
                }
            }
        }
        drop(node);
        eprintln!("loading the node (every expert cached)");
        let node = Node::load(node_cfg(None, false)).await?;
        node.engine.set_prefetch(false);
        let p = prompt(a.decode_prompt_tokens, 1);
        waste_bench::node::decode(&node, p.clone(), a.tokens).await?;
        // Same prompt, greedy: the same experts, now all in RAM. As many
        // runs as rounds: compute time drifts on a shared machine too.
        let (mut in_ram, mut steal_in_ram, mut cpu_in_ram) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            let meter = MachineMeter::start();
            let d = waste_bench::node::decode(&node, p.clone(), a.tokens).await?;
            let (s, steal, cpu) = (d.summary, meter.steal_share(), d.busy_cpu_per_step);
            eprintln!("every expert in RAM: {}{}", line(&s), steal_note(steal));
            in_ram.push(1.0 / s.decode_tokens_per_second());
            steal_in_ram.extend(steal);
            cpu_in_ram.extend(cpu);
        }

        let (raw_huge, raw_small) = (median(&raws.huge), median(&raws.small));
        let raw = raw_huge.max(raw_small);
        let all_raws: Vec<f64> = raws.huge.iter().chain(&raws.small).copied().collect();
        let tps = |v: &[Summary]| v.iter().map(Summary::decode_tokens_per_second).collect::<Vec<_>>();
        // The records the routing chose (no prefetch, nothing cached): the
        // bytes a token must cost.
        let needed = median(&off.iter().map(Summary::bytes_per_token).collect::<Vec<_>>());
        let disk_s = needed / raw;
        let compute_s = median(&in_ram);
        let bound = 1.0 / disk_s.max(compute_s);
        // The bound a plain reader of 4 KiB-page buffers would set, for comparison.
        let bound_small = 1.0 / (needed / raw_small).max(compute_s);
        let (on_tps, off_tps) = (tps(&on), tps(&off));
        let ratio = |v: &[f64]| (median(v) / bound, min(v) / bound, max(v) / bound);
        let (r_on, r_off) = (ratio(&on_tps), ratio(&off_tps));
        let accuracy = median(&on.iter().map(Summary::prefetch_accuracy).collect::<Vec<_>>());
        let read_on = median(&on.iter().map(Summary::bytes_per_token).collect::<Vec<_>>());
        let io = IoCpu::new(&cpu_on, &stolen_on, &cpu_in_ram, read_on, disk_s, compute_s);
        let io_off = IoCpu::new(&cpu_off, &stolen_off, &cpu_in_ram, needed, disk_s, compute_s);
        let mut report = json!({
            "raw_gbps": raw / 1e9, "raw_gbps_min": min(&all_raws) / 1e9, "raw_gbps_max": max(&all_raws) / 1e9,
            "raw_huge_page_gbps": raw_huge / 1e9, "raw_small_page_gbps": raw_small / 1e9,
            "ratio_to_small_page_bound": median(&on_tps) / bound_small,
            "expert_bytes_per_token": needed,
            "expert_bytes_read_per_token_with_prefetch": read_on,
            "disk_seconds_per_token": disk_s,
            "compute_seconds_per_token": compute_s,
            "compute_seconds_per_token_min": min(&in_ram), "compute_seconds_per_token_max": max(&in_ram),
            "host_steal_share_decode": opt_median(&steal_on),
            "host_steal_share_no_prefetch": opt_median(&steal_off),
            "host_steal_share_in_ram": opt_median(&steal_in_ram),
            "bound_tokens_per_second": bound,
            "rounds": a.rounds,
            "decode_tokens_per_second": median(&on_tps),
            "ratio_to_bound": r_on.0, "ratio_to_bound_min": r_on.1, "ratio_to_bound_max": r_on.2,
            "no_prefetch_tokens_per_second": median(&off_tps),
            "no_prefetch_ratio_to_bound": r_off.0,
            "no_prefetch_ratio_to_bound_min": r_off.1, "no_prefetch_ratio_to_bound_max": r_off.2,
            "prefetch_accuracy": accuracy,
            "busy_cpu_seconds_per_token_decode": opt_median(&cpu_on),
            "busy_cpu_seconds_per_token_no_prefetch": opt_median(&cpu_off),
            "busy_cpu_seconds_per_token_in_ram": opt_median(&cpu_in_ram),
            "io_cpu_seconds_per_gb": io.as_ref().map(|io| io.per_gb),
            "cpu_bound_tokens_per_second": io.as_ref().map(|io| io.bound),
            "ratio_to_cpu_bound": io.as_ref().map(|io| median(&on_tps) / io.bound),
            "time_to_first_token_seconds": long,
            "prompt_tokens": a.prompt_tokens,
            "store_addr": a.store_addr,
            "expert_mode": a.store_addr.as_ref().map_or(ExpertMode::Local, |_| a.expert_mode),
            "store_bulk": a.store_addr.is_some() && !a.no_store_bulk,
        });
        // A second object: one json! of every field passes the macro's recursion limit.
        let steal_fields = json!({
            "stolen_cpu_seconds_per_token_decode": io.as_ref().map(|io| io.stolen),
            "cpu_and_steal_bound_tokens_per_second": io.as_ref().map(|io| io.bound_with_steal),
            "ratio_to_cpu_and_steal_bound": io.as_ref().map(|io| median(&on_tps) / io.bound_with_steal),
            "no_prefetch_ratio_to_cpu_bound": io_off.as_ref().map(|io| median(&off_tps) / io.bound),
            "no_prefetch_ratio_to_cpu_and_steal_bound": io_off.as_ref().map(|io| median(&off_tps) / io.bound_with_steal),
        });
        if let (Some(all), serde_json::Value::Object(more)) = (report.as_object_mut(), steal_fields) {
            all.extend(more);
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(());
        }
        println!(
            "raw O_DIRECT {:.2} GB/s (median of {} passes: huge-page buffers {:.2}, 4 KiB pages {:.2}; all {:.2}..{:.2})\n\
             bound {bound:.3} tok/s = 1/max(disk {disk_s:.3} s, compute {compute_s:.3} s [{:.3}, {:.3}] per token)\n\
             decode {:.3} tok/s = {:.2} x bound [{:.2}, {:.2}] (prefetch + overlap, median of {}){}\n\
             without prefetch {:.3} tok/s = {:.2} x bound [{:.2}, {:.2}]\n\
             expert bytes per token {:.1} MB ({:.1} MB read with prefetch, accuracy {:.1} %)\n\
             time to first token ({} tokens) {}\n\
             against 4 KiB-page raw passes alone: bound {bound_small:.3} tok/s, decode {:.2} x{}",
            raw / 1e9, raws.huge.len(), raw_huge / 1e9, raw_small / 1e9,
            min(&all_raws) / 1e9, max(&all_raws) / 1e9,
            min(&in_ram), max(&in_ram),
            median(&on_tps), r_on.0, r_on.1, r_on.2, a.rounds,
            a.store_addr.as_ref().map_or(String::new(), |addr| format!(", experts {:?} from {addr}", a.expert_mode)),
            median(&off_tps), r_off.0, r_off.1, r_off.2,
            needed / 1e6, read_on / 1e6, 100.0 * accuracy,
            a.prompt_tokens,
            long.map_or("not measured".into(), |s| format!("{s:.2} s")),
            median(&on_tps) / bound_small,
            steal_summary(&steal_on, &steal_off, &steal_in_ram),
        );
        if let Some(io) = io {
            let off = |f: fn(&IoCpu) -> f64| {
                io_off.as_ref().map_or(String::new(), |o| {
                    format!("; without prefetch {:.2} x (its own CPU)", median(&off_tps) / f(o))
                })
            };
            println!(
                "busy CPU per decode step (all cores, every process): {:.3} s decoding, {:.3} s with every expert in RAM, \
                 so the IO path costs {:.2} CPU s per GB read\n\
                 bound counting that CPU {:.3} tok/s = 1/max(disk, compute, {:.3} s / {} cores): decode {:.2} x{}\n\
                 counting the {:.3} s per step the host stole as busy too (on a VM its work for the guest's reads shows \
                 only there): bound {:.3} tok/s, decode {:.2} x{}",
                io.decode,
                io.in_ram,
                io.per_gb,
                io.bound,
                io.decode,
                io.cores,
                median(&on_tps) / io.bound,
                off(|o| o.bound),
                io.stolen,
                io.bound_with_steal,
                median(&on_tps) / io.bound_with_steal,
                off(|o| o.bound_with_steal),
            );
        }
        Ok(())
    })
}

/// The IO path's CPU and the bounds that count it, from the machine's busy
/// CPU per token: a kind of decode run against every expert in RAM.
#[derive(Debug)]
struct IoCpu {
    decode: f64,
    /// CPU seconds per step the host stole during the decode runs.
    stolen: f64,
    in_ram: f64,
    /// (decode - in RAM) per GB read.
    per_gb: f64,
    cores: usize,
    /// 1 / max(disk, compute, decode's busy CPU / cores), tokens per second.
    bound: f64,
    /// The same with the stolen seconds counted as busy: cores the host
    /// held were not the guest's to use.
    bound_with_steal: f64,
}

impl IoCpu {
    fn new(
        busy: &[f64],
        stolen: &[f64],
        in_ram: &[f64],
        read: f64,
        disk_s: f64,
        compute_s: f64,
    ) -> Option<Self> {
        let (decode, in_ram) = (opt_median(busy)?, opt_median(in_ram)?);
        if read <= 0.0 {
            return None;
        }
        let stolen = opt_median(stolen).unwrap_or(0.0);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
        let bound = |cpu: f64| 1.0 / disk_s.max(compute_s).max(cpu / cores);
        Some(Self {
            decode,
            stolen,
            in_ram,
            per_gb: (decode - in_ram) / (read / 1e9),
            cores: cores as usize,
            bound: bound(decode),
            bound_with_steal: bound(decode + stolen),
        })
    }
}

fn ttft(s: &Summary) -> f64 {
    s.time_to_first_token.as_secs_f64()
}

fn line(s: &Summary) -> String {
    format!(
        "{:.3} tok/s decode, {:.1} MB experts/token, retention {:.1} %, prefetch accuracy {:.1} %",
        s.decode_tokens_per_second(),
        s.bytes_per_token() / 1e6,
        100.0 * s.retention(),
        100.0 * s.prefetch_accuracy(),
    )
}

/// A line on the hypervisor's steal, where `/proc/stat` gave it: on a VM
/// the host's work for the guest's reads shows only there, and explains a
/// decode that overlaps reads with compute less than the bound assumes.
fn steal_summary(on: &[f64], off: &[f64], in_ram: &[f64]) -> String {
    match (opt_median(on), opt_median(off), opt_median(in_ram)) {
        (Some(on), Some(off), Some(in_ram)) => format!(
            "\nCPU time stolen by the host (median): {:.0} % decoding with prefetch, {:.0} % without, {:.0} % with every expert in RAM",
            100.0 * on,
            100.0 * off,
            100.0 * in_ram
        ),
        _ => String::new(),
    }
}

fn opt_median(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| median(v))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// The raw passes so far, by layout of the destination buffers.
#[derive(Debug, Default)]
struct Raws {
    huge: Vec<f64>,
    small: Vec<f64>,
}

/// Bytes per second of expert-sized O_DIRECT reads, one reader per buffer
/// of `bufs`, over about `gb` GB of decode-shaped traffic (each layer's
/// top-k of random experts, token after token). `seed` differs per pass:
/// re-reading the same records would measure the host's cache, not the disk.
fn raw_bandwidth(
    dir: &ExpertsDir,
    files: &HashMap<u32, Arc<DirectFile>>,
    gb: f64,
    bufs: &mut [PooledBuf],
    seed: u64,
) -> Result<f64> {
    let reads =
        waste_bench::store::traffic::decode_batches(dir.index(), (gb * 1e9) as u64, seed).concat();
    let (b, secs) = waste_bench::store::raw::read_all(dir, files, &reads, bufs)?;
    Ok(b as f64 / secs)
}
