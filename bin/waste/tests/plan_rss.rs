//! The RAM plan is honest: a node started as a child process (`waste
//! node`) on a small store, under a budget whose expert cache holds only
//! part of the experts, loads, generates until its cache is full, and its
//! peak RSS (VmHWM of /proc/PID/status) is within 5 % or 64 MiB (whichever
//! is larger) of the resident total `waste plan` predicts for the same
//! store and flags. The store's vocabulary is large enough (32768 x 2048,
//! bf16: 128 MiB) that a node holding its untied token embeddings instead
//! of reading them by row would miss the plan by more than the margin.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{Daemon, start};

/// RAM flags given to both `waste plan` and `waste node`.
const FLAGS: [&str; 6] = [
    "--ram-budget",
    "310M",
    "--ctx-size",
    "256",
    "--max-sessions",
    "1",
];

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn waste(args: &[&str], paths: &[&Path]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(args)
        .args(paths)
        .output()
        .expect("run waste");
    assert!(o.status.success(), "waste {args:?}: {}", text(&o));
    o
}

/// Starts `waste node` and waits for its "listening on" line.
fn start_node(store: &Path, port: u16) -> Daemon {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_waste"));
    cmd.env("RUST_LOG", "info")
        .args(["node", "--backbone"])
        .arg(store.join("backbone"))
        .arg("--experts")
        .arg(store.join("experts"))
        .args(FLAGS)
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    start(cmd, Duration::from_secs(300))
        .unwrap_or_else(|err| panic!("waste node exited before listening: {err}"))
}

/// A `VmHWM:`-style line of /proc/PID/status, in bytes.
fn status_bytes(pid: u32, key: &str) -> u64 {
    let s = fs_err::read_to_string(format!("/proc/{pid}/status")).expect("read the node's status");
    let line = s
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

/// A free port on the loopback (bound, read, released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("bound address").port()
}

#[test]
fn a_nodes_peak_rss_is_what_its_plan_predicts() {
    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, store) = (tmp.path().join("ckpt"), tmp.path().join("store"));
    // Qwen3-30B-A3B's real layer and expert shapes (2048 wide, experts of
    // 2048 x 768), 2 MoE layers of 16 experts, a 32768-token vocabulary.
    waste(
        &[
            "synth",
            "--like",
            "qwen3-30b-a3b",
            "--layers",
            "2",
            "--experts",
            "16",
            "--vocab",
            "32768",
            "--dtype",
            "bf16",
        ],
        &[&ckpt],
    );
    // The byte-level tokenizer of the synthetic stores, for prompts.
    for (file, json) in [
        (
            "tokenizer.json",
            waste_store::synth::tokenizer::tokenizer_json(),
        ),
        (
            "tokenizer_config.json",
            waste_store::synth::tokenizer::tokenizer_config_json(),
        ),
    ] {
        fs_err::write(ckpt.join(file), serde_json::to_vec(&json).unwrap()).unwrap();
    }
    waste(&["convert", "--experts", "q3"], &[&ckpt, &store]);

    let plan = waste(&[&["plan", "--json"][..], &FLAGS[..]].concat(), &[&store]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("one JSON object");
    assert_eq!(plan["fits"], true, "{plan}");
    let predicted = plan["resident_bytes"].as_u64().unwrap();
    let cache = plan["expert_cache_bytes"].as_u64().unwrap();
    let experts = plan["experts_bytes"].as_u64().unwrap();
    assert!(
        cache < experts * 3 / 4,
        "the cache ({cache} B) must hold only part of the {experts} B of experts: {plan}"
    );

    let port = free_port();
    let node = start_node(&store, port);
    let pid = node.0.id();
    let after_load = status_bytes(pid, "VmHWM:");
    // Enough tokens that routing touches every expert: the cache fills.
    let out = waste(
        &[
            "generate",
            "--node",
            &format!("http://127.0.0.1:{port}"),
            "--prompt",
            "The plan of a node's memory, measured against the node.",
            "--max-tokens",
            "64",
            "--ignore-eos",
        ],
        &[],
    );
    let stats = String::from_utf8_lossy(&out.stderr).to_string();
    let peak = status_bytes(pid, "VmHWM:");
    let rss = status_bytes(pid, "VmRSS:");
    drop(node);
    let margin = (predicted / 20).max(64 << 20);
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    eprintln!(
        "plan {:.1} MiB (cache {:.1} MiB of {:.1} MiB experts, overhead {:.1} MiB); node VmHWM after load {:.1} MiB, after generating {:.1} MiB (VmRSS {:.1} MiB); {stats}",
        mib(predicted),
        mib(cache),
        mib(experts),
        mib(plan["overhead_bytes"].as_u64().unwrap()),
        mib(after_load),
        mib(peak),
        mib(rss)
    );
    assert!(
        peak.abs_diff(predicted) <= margin,
        "the node's peak RSS {:.1} MiB is not within {:.1} MiB of the plan's {:.1} MiB",
        mib(peak),
        mib(margin),
        mib(predicted)
    );
}
