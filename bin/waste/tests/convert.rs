//! `waste synth`, `waste convert` and `waste inspect` as a user runs them:
//! a conversion killed with SIGKILL after its first layer file appears
//! resumes and ends byte-identical (sha256 of every file) to an
//! uninterrupted one; a rerun with other options into the unfinished folder
//! is refused; `inspect --verify` names the file, layer and expert of a
//! corrupted record; `--dry-run` writes nothing; SIGINT stops a conversion
//! with exit status 75 and the rerun resumes; `--progress json` prints one
//! parseable object per line, the steps' totals and the store's path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use waste_format::manifest::sha256_file;

mod common;

use common::{ok, waste};

/// A small Qwen3-30B-A3B-shaped checkpoint: real expert shapes (2048x768),
/// 5 MoE layers of 4 experts, a 512-token vocabulary.
fn synth(dir: &Path) -> PathBuf {
    let src = dir.join("qwen");
    let o = waste()
        .args([
            "synth",
            "--like",
            "qwen3-30b-a3b",
            "--layers",
            "5",
            "--experts",
            "4",
        ])
        .args(["--vocab", "512", "--seed", "7"])
        .arg(&src)
        .output()
        .unwrap();
    ok(&o, "synth");
    src
}

fn convert(src: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = waste();
    c.arg("convert")
        .arg(src)
        .arg(out)
        .args(["--jobs", "2"])
        .args(extra);
    c
}

/// sha256 of every file under `root`, by relative path.
fn hashes(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs_err::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, sha256_file(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_killed_conversion_resumes_to_a_byte_identical_store() {
    let tmp = tempfile::tempdir().unwrap();
    let src = synth(tmp.path());
    let (killed, whole) = (tmp.path().join("killed"), tmp.path().join("whole"));

    // Kill -9 as soon as the first finished layer file is there.
    let mut child = convert(&src, &killed, &["--experts", "q3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = killed.join("experts/layer-000.experts");
    let start = Instant::now();
    while !first.exists() && start.elapsed() < Duration::from_secs(120) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(first.exists(), "no layer file appeared");
    assert!(
        !killed.join("manifest.json").exists(),
        "the conversion finished before it could be killed"
    );
    // An unfinished store is refused by name.
    let o = waste().args(["inspect"]).arg(&killed).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no manifest.json"));
    // Other options cannot reuse it.
    let o = convert(&src, &killed, &["--experts", "q4"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unfinished conversion"));

    let o = convert(&src, &killed, &["--experts", "q3"])
        .output()
        .unwrap();
    ok(&o, "resumed convert");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("resumed"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    ok(
        &convert(&src, &whole, &["--experts", "q3"])
            .output()
            .unwrap(),
        "convert",
    );
    let (a, b) = (hashes(&killed), hashes(&whole));
    assert!(a.contains_key("manifest.json") && a.contains_key("experts/layer-004.experts"));
    assert_eq!(a, b, "resumed store differs from an uninterrupted one");
}

/// The JSON objects `--progress json` printed, one per stdout line.
fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn sigint_stops_a_conversion_with_75_and_json_progress_reports_the_rerun() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let src = synth(tmp.path());
    let out = tmp.path().join("store");

    let mut child = convert(&src, &out, &["--experts", "q3", "--progress", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // SIGINT once the first experts are written.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["step"] == "experts" && v["done"].as_u64() > Some(0) {
            break;
        }
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("interrupted with"), "{stderr}");
    assert!(!out.join("manifest.json").exists());

    let o = convert(&src, &out, &["--experts", "q3", "--progress", "json"])
        .output()
        .unwrap();
    ok(&o, "resumed convert");
    let objs = json_lines(&o.stdout);
    assert_eq!(objs[0]["step"], "estimate", "{objs:?}");
    assert!(objs[0]["expert_params"].as_u64() > Some(0));
    for step in ["backbone", "experts"] {
        let last = objs
            .iter()
            .rev()
            .find(|v| v["step"] == step)
            .unwrap_or_else(|| panic!("no {step} line in {objs:?}"));
        assert_eq!(last["finished"], true, "{last}");
        assert_eq!(last["done"], last["total"], "{last}");
    }
    let done = objs.last().unwrap();
    assert_eq!(done["step"], "done", "{done}");
    assert_eq!(done["store"].as_str(), out.to_str());
    assert!(out.join("manifest.json").exists());
}

#[test]
fn inspect_reports_and_verify_names_a_corrupted_record() {
    let tmp = tempfile::tempdir().unwrap();
    let src = synth(tmp.path());
    let store = tmp.path().join("store");
    let o = convert(&src, &store, &["--experts", "q3", "--dry-run"])
        .output()
        .unwrap();
    ok(&o, "dry run");
    let est = String::from_utf8_lossy(&o.stderr);
    assert!(
        est.contains("output:") && est.contains("to run:") && est.contains("free"),
        "{est}"
    );
    assert!(!store.exists(), "--dry-run wrote {}", store.display());
    ok(
        &convert(&src, &store, &["--experts", "q3", "--backbone", "q8"])
            .output()
            .unwrap(),
        "convert",
    );

    let o = waste()
        .arg("inspect")
        .arg(&store)
        .arg("--json")
        .output()
        .unwrap();
    ok(&o, "inspect");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["manifest"]["experts_format"], "q3");
    assert_eq!(r["manifest"]["backbone_format"], "q8");
    assert_eq!(r["layers"].as_array().unwrap().len(), 5);
    // 3 x 2048 x 768 params per expert, 4 experts, 5 layers.
    assert_eq!(r["experts"]["params"], 5 * 4 * 3 * 2048 * 768);
    let bpw = r["experts"]["bits_per_weight"].as_f64().unwrap();
    assert!((3.25..3.26).contains(&bpw), "{bpw}");
    let q8 = r["backbone"]["attention"]["bits_per_weight"]
        .as_f64()
        .unwrap();
    assert!(
        (8.49..8.51).contains(&q8),
        "attention in q8: {q8} bits/weight"
    );
    assert_eq!(r["top_k"], 4);

    let layer = store.join("experts/layer-003.experts");
    let stride = r["layers"][3]["stride"].as_u64().unwrap();
    let mut bytes = fs_err::read(&layer).unwrap();
    bytes[(4096 + 2 * stride + 500) as usize] ^= 1;
    fs_err::write(&layer, &bytes).unwrap();
    let o = waste().arg("inspect").arg(&store).output().unwrap();
    ok(&o, "inspect without --verify");
    let o = waste()
        .arg("inspect")
        .arg(&store)
        .arg("--verify")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("layer-003.experts") && err.contains("layer 3 expert 2"),
        "{err}"
    );
}
