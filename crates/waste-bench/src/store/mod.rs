//! `waste bench store`: served bandwidth against the raw O_DIRECT bandwidth
//! of the same files, measured in the same run as interleaved pairs (raw
//! QD1, raw QD16 and each served mode, their order rotated each pair), so
//! drift of a noisy disk hits both sides alike. Reports per mode the
//! median over pairs of served / raw (raw: the pair's run of the best
//! raw mode by median), its spread, GB/s and batch latency percentiles.
//! One untimed round of every mode comes first: it faults in the buffers
//! (the engine's pool and the raw ones) and opens the gRPC windows, which a
//! long-running store has done long before. Benchmarks, not tests: never
//! run in CI.

pub mod cpu;
pub mod raw;
pub mod served;
pub mod traffic;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use waste_format::ExpertsDir;
use waste_format::io::Pages;
use waste_proto::bulk::BulkClient;
use waste_proto::transport::{Channel, Endpoint};

use waste_store::config::{Config, Direct};
use waste_store::error::{Error, Result};
use waste_store::store::Store;

pub use served::Served;

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The store's experts/ folder: raw figures, and served in-process and
    /// over loopback gRPC (a store started here on 127.0.0.1:0).
    pub experts: Option<PathBuf>,
    /// A running store instead (then raw figures need `experts` too, on this machine).
    pub addr: Option<String>,
    pub token: Option<String>,
    /// Interleaved pairs (at least 5 for the reported median).
    pub pairs: usize,
    /// Bytes each run reads.
    pub bytes_per_run: u64,
    /// Batches in flight in served runs.
    pub window: usize,
    /// Reads in flight of the store's engine.
    pub threads: usize,
    /// The engine's segment size (0: whole-record reads).
    pub segment_bytes: u64,
    pub seed: u64,
}

/// The mode name of [`Mode::RawSmallPages`].
const RAW_SMALL: &str = "raw QD16, 4 KiB pages";

/// What one run of a pair measures.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Plain O_DIRECT preads, this many at once, into the benchmark's
    /// buffers, laid out in huge pages as the engine's are.
    Raw(usize),
    /// 16 plain preads at once into heap buffers of 4 KiB pages.
    RawSmallPages,
    /// Through the store's engine, no gRPC.
    InProcess,
    /// FetchExperts over gRPC.
    Grpc,
    /// The same fetches on the store's bulk channel, where it offers one.
    Bulk,
    /// The same bytes over a plain loopback socket ([`served::plain_socket`]).
    PlainSocket,
}

/// The mode name of [`Mode::PlainSocket`].
const PLAIN: &str = "plain TCP loopback";
/// The mode name of [`Mode::InProcess`].
const IN_PROCESS: &str = "served in-process";

/// One figure over the pairs.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub mode: String,
    /// GB/s of each run, in pair order.
    pub gbps: Vec<f64>,
    /// served / raw of each pair, raw being that pair's run of the raw mode
    /// (QD1 or QD16) with the better median (raw modes: empty).
    pub ratios: Vec<f64>,
    pub median_gbps: f64,
    pub median_ratio: Option<f64>,
    pub min_ratio: Option<f64>,
    pub max_ratio: Option<f64>,
    /// CPU seconds this process spent per GB moved, each run (user +
    /// system, every thread): with the loopback server in this process
    /// that is the client and the store together; with `--addr`, the client.
    pub cpu_s_per_gb: Vec<f64>,
    pub median_cpu_s_per_gb: Option<f64>,
    /// The share of the machine's CPU time the hypervisor stole during each
    /// run (empty where `/proc/stat` is unreadable): on a VM, disk reads
    /// cost host CPU that shows only here.
    pub steal_shares: Vec<f64>,
    pub median_steal_share: Option<f64>,
    /// Batch latency percentiles over all runs, milliseconds.
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub record_bytes: u64,
    pub top_k: u32,
    pub bytes_per_run: u64,
    pub pairs: usize,
    pub window: usize,
    pub figures: Vec<Figure>,
    /// The CPU seconds per GB of loopback gRPC over those of the plain
    /// socket, each pair (both in this process, both ends counted; empty
    /// with `--addr`).
    pub grpc_cpu_vs_plain: Vec<f64>,
    pub median_grpc_cpu_vs_plain: Option<f64>,
    /// The same for the bulk channel (empty where the store offers none).
    pub bulk_cpu_vs_plain: Vec<f64>,
    pub median_bulk_cpu_vs_plain: Option<f64>,
    /// The transport alone: the bulk channel's CPU seconds per GB less
    /// those of the same pair's in-process run, over the plain socket's.
    /// The in-process run is the store's engine reading the same records
    /// from the disk and checking each one's checksum; the bulk channel
    /// does both too (the store reads, the client checks), the plain
    /// socket neither. What is left over 1 is framing, the async runtime
    /// and the socket calls (empty with `--addr` or without the bulk
    /// channel).
    pub bulk_transport_vs_plain: Vec<f64>,
    pub median_bulk_transport_vs_plain: Option<f64>,
}

/// The median of `v`, if it has values and all are finite.
fn finite_median(v: &[f64]) -> Option<f64> {
    (!v.is_empty() && v.iter().all(|c| c.is_finite())).then(|| median(v))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// The runs of one mode so far: GB/s and CPU s/GB of each, and every batch latency.
#[derive(Debug)]
struct ModeRuns {
    mode: String,
    gbps: Vec<f64>,
    cpu: Vec<f64>,
    steal: Vec<f64>,
    latencies: Vec<Duration>,
}

/// What one run cost the machine: this process's CPU seconds, and the
/// share of all CPU time the host stole meanwhile.
#[derive(Debug, Clone, Copy)]
struct RunCost {
    cpu_s: f64,
    steal: Option<f64>,
}

fn percentile(sorted: &[Duration], p: f64) -> Option<f64> {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map(|d| d.as_secs_f64() * 1e3)
}

/// Runs the benchmark; `log` gets a line per run.
pub fn run(cfg: &BenchConfig, mut log: impl FnMut(&str)) -> Result<Report> {
    // The node's allocator settings, so the gRPC client here pays what the
    // node's fetch path pays for its buffers.
    waste_format::io::heap::return_large_blocks();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            path: "tokio runtime".into(),
            source,
        })?;
    let dir = cfg
        .experts
        .as_ref()
        .map(|d| ExpertsDir::open(d))
        .transpose()?;
    let files = dir.as_ref().map(raw::open_direct).transpose()?;
    // The in-process store and, without --addr, a loopback server on it.
    let store = match &cfg.experts {
        Some(e) => {
            let mut sc = Config {
                experts: e.clone(),
                metrics_log_secs: 0,
                ..Config::default()
            };
            sc.io.direct = Direct::Require;
            sc.io.threads = cfg.threads;
            sc.io.segment_bytes = cfg.segment_bytes;
            Some(Arc::new(Store::open(&sc)?))
        }
        None => None,
    };
    let shutdown = CancellationToken::new();
    let (url, server) = match (&cfg.addr, &store) {
        (Some(a), _) => (a.clone(), None),
        (None, Some(s)) => {
            let listener = rt
                .block_on(TcpListener::bind("127.0.0.1:0"))
                .map_err(|source| Error::Io {
                    path: "127.0.0.1:0".into(),
                    source,
                })?;
            let url = format!(
                "http://{}",
                listener.local_addr().map_err(|source| Error::Io {
                    path: "listener".into(),
                    source
                })?
            );
            let sc = Config {
                experts: cfg.experts.clone().unwrap_or_default(),
                metrics_log_secs: 0,
                ..Config::default()
            };
            let h = rt.spawn(waste_store::server::serve_owned(
                sc,
                Arc::clone(s),
                listener,
                shutdown.clone(),
            ));
            (url, Some(h))
        }
        (None, None) => {
            return Err(Error::Config {
                reason: "bench store needs --experts DIR or --addr URL".into(),
            });
        }
    };
    let channel: Channel = rt.block_on(async {
        let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| Error::Config {
            reason: format!("--addr {url}: {e}"),
        })?;
        waste_proto::fetch::client_endpoint(endpoint)
            .connect()
            .await
            .map_err(Error::from)
    })?;
    let mut client =
        waste_proto::store::v1::expert_store_client::ExpertStoreClient::new(channel.clone());
    let mut info_req = waste_proto::Request::new(waste_proto::store::v1::InfoRequest {});
    if let Some(t) = &cfg.token {
        let v = format!("Bearer {t}").parse().map_err(|_| Error::Config {
            reason: "bad token".into(),
        })?;
        info_req.metadata_mut().insert("authorization", v);
    }
    let info = rt
        .block_on(client.info(info_req))
        .map_err(|s| Error::Internal {
            what: format!("Info: {s}"),
        })?
        .into_inner();
    // The node's choice: the bulk channel where the store offers one.
    let bulk = if info.bulk_fetch {
        let client = BulkClient::new(&url, cfg.token.as_deref())
            .map_err(|reason| Error::Config { reason })?;
        Some(Arc::new(client))
    } else {
        None
    };
    let record_len: HashMap<u32, u64> = info
        .layers
        .iter()
        .map(|l| (l.layer, l.record_bytes))
        .collect();
    let index = waste_format::ExpertsIndex {
        layers: info
            .layers
            .iter()
            .map(|l| waste_format::LayerEntry {
                layer: l.layer,
                file: String::new(),
                n_experts: l.n_experts,
                d_model: l.d_model,
                d_ff: l.d_ff,
                record_len: l.record_bytes,
                stride: 0,
                data_offset: 0,
                checksums: Vec::new(),
            })
            .collect(),
        ..waste_format::ExpertsIndex::new(&info.architecture, &info.expert_format, 0, info.top_k)
    };

    let mut runs: Vec<ModeRuns> = Vec::new();
    let mut add = |mode: &str, s: &Served, cost: RunCost, log: &mut dyn FnMut(&str)| {
        let gb = s.bytes as f64 / 1e9;
        let (gbps, cpu) = (gb / s.secs, cost.cpu_s / gb);
        let steal = cpu::steal_note(cost.steal);
        log(&format!(
            "  {mode:<22} {gbps:6.3} GB/s ({gb:.2} GB in {:.2} s, {cpu:.2} CPU s/GB{steal})",
            s.secs
        ));
        let r = match runs.iter().position(|r| r.mode == mode) {
            Some(i) => &mut runs[i],
            None => {
                runs.push(ModeRuns {
                    mode: mode.to_string(),
                    gbps: Vec::new(),
                    cpu: Vec::new(),
                    steal: Vec::new(),
                    latencies: Vec::new(),
                });
                runs.last_mut().expect("just pushed")
            }
        };
        r.gbps.push(gbps);
        r.cpu.push(cpu);
        r.steal.extend(cost.steal);
        r.latencies.extend(&s.latencies);
    };
    // The modes of a pair, rotated by one each pair: a disk that drifts
    // (bursts, throttling) or a run that warms the next then favours no
    // mode by its position.
    let mut modes: Vec<Mode> = Vec::new();
    if dir.is_some() {
        modes.extend([Mode::Raw(1), Mode::Raw(16), Mode::RawSmallPages]);
    }
    if store.is_some() {
        modes.push(Mode::InProcess);
    }
    modes.push(Mode::Grpc);
    if bulk.is_some() {
        modes.push(Mode::Bulk);
    }
    if cfg.addr.is_none() {
        modes.push(Mode::PlainSocket);
    }
    let (grpc_mode, bulk_mode) = if cfg.addr.is_some() {
        ("served gRPC", "served bulk")
    } else {
        ("served gRPC loopback", "served bulk loopback")
    };
    // Raw reads go into buffers allocated once, as the served reads go into
    // the engine's long-lived pool: in huge pages as the pool's are, and
    // (RAW_SMALL) in the 4 KiB pages of a plain heap buffer, which cut each
    // read into smaller device requests (io::buffer). The bound is whichever
    // raw mode has the best median.
    let (mut raw_bufs, mut small_bufs) = match &dir {
        Some(d) => (
            raw::buffers(d, 16, Pages::Huge),
            raw::buffers(d, 16, Pages::Small),
        ),
        None => Default::default(),
    };
    // Pair 0 is the untimed warm-up round.
    for pair in 0..=cfg.pairs {
        let warm_up = pair == 0;
        log(&if warm_up {
            "warm-up (not counted)".to_string()
        } else {
            format!("pair {pair}/{}", cfg.pairs)
        });
        let mut add = |mode: &str, s: &Served, cost: RunCost, log: &mut dyn FnMut(&str)| {
            if !warm_up {
                add(mode, s, cost, log);
            }
        };
        let seed = |k: u64| cfg.seed ^ (pair as u64 * 16 + k).wrapping_mul(0x2545_F491_4F6C_DD1D);
        for (k, mode) in modes
            .iter()
            .cycle()
            .skip(pair)
            .take(modes.len())
            .enumerate()
        {
            let batches = traffic::decode_batches(&index, cfg.bytes_per_run, seed(k as u64 + 1));
            let cpu_before = cpu::process_seconds();
            let steal = cpu::MachineMeter::start();
            let cpu_since = || RunCost {
                cpu_s: match (cpu_before, cpu::process_seconds()) {
                    (Some(a), Some(b)) => b - a,
                    _ => f64::NAN,
                },
                steal: steal.steal_share(),
            };
            match *mode {
                Mode::Raw(_) | Mode::RawSmallPages => {
                    let (Some(dir), Some(files)) = (&dir, &files) else {
                        continue;
                    };
                    let (bufs, name) = match *mode {
                        Mode::Raw(qd) => (&mut raw_bufs[..qd], format!("raw O_DIRECT QD{qd}")),
                        _ => (&mut small_bufs[..], RAW_SMALL.to_string()),
                    };
                    let (bytes, secs) = raw::read_all(dir, files, &batches.concat(), bufs)?;
                    let run = Served {
                        bytes,
                        secs,
                        latencies: Vec::new(),
                    };
                    add(&name, &run, cpu_since(), &mut log);
                }
                Mode::InProcess => {
                    let Some(store) = &store else { continue };
                    let run = served::in_process(store, &batches, cfg.window)?;
                    add(IN_PROCESS, &run, cpu_since(), &mut log);
                }
                Mode::Grpc => {
                    let run = rt.block_on(served::grpc(
                        channel.clone(),
                        cfg.token.as_deref(),
                        &record_len,
                        &batches,
                        cfg.window,
                    ))?;
                    add(grpc_mode, &run, cpu_since(), &mut log);
                }
                Mode::Bulk => {
                    let Some(client) = &bulk else { continue };
                    let run = rt.block_on(served::bulk(
                        Arc::clone(client),
                        &record_len,
                        &batches,
                        cfg.window,
                    ))?;
                    add(bulk_mode, &run, cpu_since(), &mut log);
                }
                Mode::PlainSocket => {
                    let run = served::plain_socket(&record_len, &batches, cfg.window)?;
                    add(PLAIN, &run, cpu_since(), &mut log);
                }
            }
        }
    }
    shutdown.cancel();
    if let Some(h) = server {
        rt.block_on(h).map_err(|e| Error::Internal {
            what: format!("server task: {e}"),
        })??;
    }

    // The raw bound of each pair is the run, in that pair, of the raw mode
    // with the best median. Not the best of the pair's raw runs: on a disk
    // where they deliver the same, the largest of noisy samples is biased high.
    let raw_best: Option<Vec<f64>> = runs
        .iter()
        .filter(|r| r.mode.starts_with("raw"))
        .max_by(|a, b| median(&a.gbps).total_cmp(&median(&b.gbps)))
        .map(|r| r.gbps.clone());
    let cpu_of = |mode: &str| runs.iter().find(|r| r.mode == mode).map(|r| r.cpu.clone());
    let vs_plain = |mode: &str| -> Vec<f64> {
        match (cpu_of(mode), cpu_of(PLAIN)) {
            (Some(g), Some(p)) => g.iter().zip(&p).map(|(g, p)| g / p).collect(),
            _ => Vec::new(),
        }
    };
    let (grpc_cpu_vs_plain, bulk_cpu_vs_plain) = (vs_plain(grpc_mode), vs_plain(bulk_mode));
    let bulk_transport_vs_plain: Vec<f64> =
        match (cpu_of(bulk_mode), cpu_of(IN_PROCESS), cpu_of(PLAIN)) {
            (Some(b), Some(e), Some(p)) if cfg.addr.is_none() => b
                .iter()
                .zip(&e)
                .zip(&p)
                .map(|((b, e), p)| (b - e) / p)
                .collect(),
            _ => Vec::new(),
        };
    let figures = runs
        .into_iter()
        .map(|r| {
            let ModeRuns {
                mode,
                gbps,
                cpu,
                steal,
                latencies: mut lat,
            } = r;
            let ratios: Vec<f64> = match (&raw_best, mode.starts_with("served")) {
                (Some(r), true) => gbps.iter().zip(r).map(|(s, r)| s / r).collect(),
                _ => Vec::new(),
            };
            lat.sort();
            let has = !ratios.is_empty();
            Figure {
                median_gbps: median(&gbps),
                median_ratio: has.then(|| median(&ratios)),
                min_ratio: ratios.iter().copied().reduce(f64::min),
                max_ratio: ratios.iter().copied().reduce(f64::max),
                median_cpu_s_per_gb: cpu.iter().all(|c| c.is_finite()).then(|| median(&cpu)),
                cpu_s_per_gb: cpu,
                median_steal_share: (!steal.is_empty()).then(|| median(&steal)),
                steal_shares: steal,
                p50_ms: percentile(&lat, 0.5),
                p90_ms: percentile(&lat, 0.9),
                p99_ms: percentile(&lat, 0.99),
                mode,
                gbps,
                ratios,
            }
        })
        .collect();
    Ok(Report {
        record_bytes: info.layers.first().map_or(0, |l| l.record_bytes),
        top_k: info.top_k,
        bytes_per_run: cfg.bytes_per_run,
        pairs: cfg.pairs,
        window: cfg.window,
        figures,
        median_grpc_cpu_vs_plain: finite_median(&grpc_cpu_vs_plain),
        grpc_cpu_vs_plain,
        median_bulk_cpu_vs_plain: finite_median(&bulk_cpu_vs_plain),
        bulk_cpu_vs_plain,
        median_bulk_transport_vs_plain: finite_median(&bulk_transport_vs_plain),
        bulk_transport_vs_plain,
    })
}

/// A plain-text table of the report.
pub fn table(r: &Report) -> String {
    let mut s = format!(
        "records of {:.2} MB, top-{} batches, {:.2} GB per run, {} pairs, {} batch(es) in flight\n",
        r.record_bytes as f64 / 1e6,
        r.top_k,
        r.bytes_per_run as f64 / 1e9,
        r.pairs,
        r.window
    );
    s += "mode                     GB/s (median)  served/raw (best raw) median [min, max]    CPU s/GB  steal %   batch p50 / p90 / p99 ms\n";
    for f in &r.figures {
        let ratio = match (f.median_ratio, f.min_ratio, f.max_ratio) {
            (Some(m), Some(lo), Some(hi)) => format!("{m:.3} [{lo:.3}, {hi:.3}]"),
            _ => "-".into(),
        };
        let lat = match (f.p50_ms, f.p90_ms, f.p99_ms) {
            (Some(a), Some(b), Some(c)) => format!("{a:.1} / {b:.1} / {c:.1}"),
            _ => "-".into(),
        };
        let cpu = f
            .median_cpu_s_per_gb
            .map_or("-".into(), |c| format!("{c:.2}"));
        let steal = f
            .median_steal_share
            .map_or("-".into(), |x| format!("{:.0}", 100.0 * x));
        s += &format!(
            "{:<24} {:>13.3}  {:<38} {cpu:>8}  {steal:>7}   {lat}\n",
            f.mode, f.median_gbps, ratio
        );
    }
    for (what, m, v) in [
        (
            "gRPC loopback",
            r.median_grpc_cpu_vs_plain,
            &r.grpc_cpu_vs_plain,
        ),
        (
            "bulk channel loopback",
            r.median_bulk_cpu_vs_plain,
            &r.bulk_cpu_vs_plain,
        ),
        (
            "bulk channel less serving in-process (disk reads, checksums)",
            r.median_bulk_transport_vs_plain,
            &r.bulk_transport_vs_plain,
        ),
    ] {
        let Some(m) = m else { continue };
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        s += &format!(
            "{what} CPU per GB / plain socket's: {m:.2} x [{lo:.2}, {hi:.2}] (goal <= 1.3)\n"
        );
    }
    s
}
