//! `scripts/convert.sh` as a user runs it, on the `qwen3_moe_tiny` fixture
//! with this build's binary (`WASTE_BIN`, so nothing is rebuilt): a
//! conversion ends with a manifest, a verified store, a log and the daemon
//! commands naming the store's folders; a disk or RAM the model does not fit
//! is refused before anything is written (through the script's testing
//! knobs `WASTE_CONVERT_FREE_BYTES` and `WASTE_MEMINFO`, which replace the
//! measured figures); bad arguments exit 64.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use waste_e2e::fixture;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/convert.sh")
}

fn convert_sh(src: &Path, out: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg(script())
        .arg(src)
        .arg(out)
        .args(["--jobs", "2"])
        .env("WASTE_BIN", env!("CARGO_BIN_EXE_waste"))
        .env("RUST_LOG", "info")
        .env_remove("WASTE_CONVERT_LOG")
        .env_remove("WASTE_CONVERT_FREE_BYTES")
        .env_remove("WASTE_MEMINFO")
        .env_remove("WASTE_CONVERT_SKIP_RAM_CHECK");
    c
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn converts_verifies_logs_and_prints_the_daemon_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("store");
    let o = convert_sh(&fixture("qwen3_moe_tiny"), &out)
        .output()
        .unwrap();
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(out.join("manifest.json").is_file(), "{all}");
    assert!(
        all.contains("verified: every expert record's checksum"),
        "the verify step did not run:\n{all}"
    );

    let dir = fs_err::canonicalize(&out).unwrap();
    let (experts, backbone) = (dir.join("experts"), dir.join("backbone"));
    let store_cmd = format!(
        "store --experts {} --listen 127.0.0.1:50051",
        experts.display()
    );
    let node_cmd = format!(
        "node --backbone {} --store-addr http://127.0.0.1:50051 --listen 127.0.0.1:50052",
        backbone.display()
    );
    for want in [
        store_cmd.as_str(),
        node_cmd.as_str(),
        "generate --node http://127.0.0.1:50052",
    ] {
        assert!(all.contains(want), "missing `{want}` in:\n{all}");
    }
    assert!(experts.join("index.json").is_file() && backbone.join("config.json").is_file());

    // The whole run is in OUT.convert.log, beside the store (not inside it).
    let log = fs_err::read_to_string(tmp.path().join("store.convert.log")).unwrap();
    for want in ["converted in", "verified: every expert record", &store_cmd] {
        assert!(log.contains(want), "log lacks `{want}`:\n{log}");
    }

    // A second run into the finished store is refused, and leaves it alone.
    let o = convert_sh(&fixture("qwen3_moe_tiny"), &out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(73), "{}", text(&o));
    assert!(text(&o).contains("already holds a finished store"));
    assert!(out.join("manifest.json").is_file());
}

#[test]
fn a_disk_too_small_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("store");
    let o = convert_sh(&fixture("qwen3_moe_tiny"), &out)
        .env("WASTE_CONVERT_FREE_BYTES", "4096")
        .output()
        .unwrap();
    let all = text(&o);
    assert_eq!(o.status.code(), Some(73), "{all}");
    assert!(all.contains("not enough disk space"), "{all}");
    assert!(
        !out.exists(),
        "the refused conversion wrote {}",
        out.display()
    );
}

#[test]
fn a_backbone_larger_than_ram_is_refused_unless_asked_to_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("store");
    let meminfo = tmp.path().join("meminfo");
    fs_err::write(
        &meminfo,
        "MemTotal:        1024 kB\nMemAvailable:     512 kB\n",
    )
    .unwrap();
    let o = convert_sh(&fixture("qwen3_moe_tiny"), &out)
        .env("WASTE_MEMINFO", &meminfo)
        .output()
        .unwrap();
    let all = text(&o);
    assert_eq!(o.status.code(), Some(69), "{all}");
    assert!(all.contains("MemTotal"), "{all}");
    assert!(!out.exists());

    // The node may run on another machine: the check can be waived, and a
    // --dry-run then stops after the checks without writing.
    let o = convert_sh(&fixture("qwen3_moe_tiny"), &out)
        .env("WASTE_MEMINFO", &meminfo)
        .env("WASTE_CONVERT_SKIP_RAM_CHECK", "1")
        .arg("--dry-run")
        .output()
        .unwrap();
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(all.contains("dry run: the checks passed"), "{all}");
    assert!(!out.join("manifest.json").exists() && !out.exists());
}

#[test]
fn bad_arguments_exit_64_with_the_usage() {
    for args in [vec![], vec!["only-one"], vec!["/no/such/release", "out"]] {
        let o = Command::new("bash")
            .arg(script())
            .args(&args)
            .env("WASTE_BIN", env!("CARGO_BIN_EXE_waste"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("usage: scripts/convert.sh"));
    }
}
