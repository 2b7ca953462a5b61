//! `waste doctor` against what the test can see for itself: the cores Rust
//! reports, the kernels `WASTE_KERNELS` forces, free space from `df`, a read
//! rate that is a rate, a plan whose decode bound is the measured rate over
//! the expert bytes a token reads, and no scratch file left behind.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn doctor(target: &Path, extra: &[&str], kernels: Option<&str>) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_waste"));
    cmd.arg("doctor")
        .arg("--target")
        .arg(target)
        .args(["--scratch", "16M", "--json"])
        .args(extra);
    if let Some(k) = kernels {
        cmd.env("WASTE_KERNELS", k);
    }
    let out = cmd.output().expect("run waste doctor");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// `df`'s available bytes at `dir`.
fn df_avail(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .expect("run df");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn doctor_reports_this_machine_and_the_plan_at_its_disk_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let run = || {
        doctor(
            tmp.path(),
            &["--like", "qwen3-30b-a3b", "--ram-budget", "64G"],
            None,
        )
    };
    // Free space as df sees it just before and after a run. Tests running
    // beside this one write and delete files on the same file system, so a
    // reading that falls outside the two is taken again (at most thrice).
    let agrees = |r: &Value, before: u64, after: u64| {
        let free = r["free_bytes"].as_u64().unwrap();
        let (lo, hi) = (before.min(after), before.max(after));
        let slack = (64 << 20) + hi / 100;
        free + slack > lo && free < hi + slack
    };
    let mut tries = Vec::new();
    let r = loop {
        let before = df_avail(tmp.path());
        let r = run();
        let after = df_avail(tmp.path());
        if agrees(&r, before, after) {
            break r;
        }
        tries.push((r["free_bytes"].as_u64(), before, after));
        assert!(
            tries.len() < 3,
            "free bytes against df before and after: {tries:?}"
        );
    };
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(r["cores"], cores);
    let kernels = r["kernels"].as_str().unwrap();
    assert!(
        [
            "ref",
            "avx2",
            "avx2-vnni",
            "avx512-bw",
            "avx512-vnni-half",
            "avx512-vnni"
        ]
        .contains(&kernels),
        "{kernels}"
    );

    let disk = &r["disk"];
    let gbps = disk["gbps"].as_f64().unwrap();
    assert!(gbps > 0.0 && gbps.is_finite(), "{disk}");
    let read = disk["read_bytes"].as_u64().unwrap();
    assert_eq!(read % 4096, 0, "{disk}");

    let plan = &r["plan"];
    assert_eq!(plan["fits"], true, "{plan}");
    // A read is one record of the model.
    assert_eq!(
        read,
        plan["largest_record_bytes"]
            .as_u64()
            .unwrap()
            .div_ceil(4096)
            * 4096
    );
    let per_token = plan["expert_bytes_per_token"].as_f64().unwrap();
    let bound = plan["decode_bound_tok_s"].as_f64().unwrap();
    assert!(
        (bound - gbps * 1e9 / per_token).abs() <= 1e-9 * bound,
        "{plan}"
    );

    assert_eq!(
        fs_err::read_dir(tmp.path()).unwrap().count(),
        0,
        "the scratch file was left behind"
    );

    // The kernels it names are the ones products use: forced to the
    // portable ones, it says so.
    let r = doctor(tmp.path(), &[], Some("ref"));
    assert_eq!(r["kernels"], "ref");
    assert!(r["plan"].is_null());
}

#[test]
fn doctor_refuses_a_scratch_file_the_disk_cannot_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_waste"))
        .arg("doctor")
        .arg("--target")
        .arg(tmp.path())
        .args(["--scratch", "100000G"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("free") && err.contains("--scratch"), "{err}");
}
