//! The daemons' configuration as an operator meets it: a config file with
//! an unknown key, or settings that cannot work, exit 64 before any port is
//! bound with a message naming the key; flags beat the environment, which
//! beats the file (`--print-config` shows the result); `--log-format json`
//! writes one JSON object per log line.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod common;

fn waste() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "info")
        .env_remove("WASTE_NODE_MAX_SESSIONS");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A complete small store (random weights, byte-level tokenizer).
fn store(dir: &std::path::Path) -> std::path::PathBuf {
    let s = dir.join("store");
    common::synth_store(&s, 1, 4, &[]);
    s
}

#[test]
fn unknown_keys_and_impossible_settings_exit_64_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let file = tmp.path().join("node.toml");
    fs_err::write(&file, "ram_budgett = \"8G\"\n").unwrap();
    let o = waste()
        .args(["node", "--experts"])
        .arg(s.join("experts"))
        .arg("--backbone")
        .arg(s.join("backbone"))
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("ram_budgett"), "{}", text(&o));

    let file = tmp.path().join("store.toml");
    fs_err::write(&file, "[limits]\nmax_fetch_expertz = 3\n").unwrap();
    let o = waste()
        .arg("store")
        .arg("--config")
        .arg(&file)
        .arg("--experts")
        .arg(s.join("experts"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("max_fetch_expertz"), "{}", text(&o));

    // Off loopback without a token: refused before binding, for both.
    let o = waste()
        .args(["node", "--listen", "0.0.0.0:0", "--experts"])
        .arg(s.join("experts"))
        .arg("--backbone")
        .arg(s.join("backbone"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("--token"), "{}", text(&o));
    // An empty token is no token.
    let o = waste()
        .args(["node", "--listen", "0.0.0.0:0", "--token", "", "--experts"])
        .arg(s.join("experts"))
        .arg("--backbone")
        .arg(s.join("backbone"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("token"), "{}", text(&o));
    let o = waste()
        .args(["store", "--listen", "0.0.0.0:0", "--experts"])
        .arg(s.join("experts"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
}

#[test]
fn flags_beat_the_environment_which_beats_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let file = tmp.path().join("node.toml");
    let toml = format!(
        "backbone = {:?}\nexperts = {:?}\nmax_sessions = 3\nctx_size = 256\nram_budget = \"2G\"\n",
        s.join("backbone"),
        s.join("experts")
    );
    fs_err::write(&file, toml).unwrap();
    let print = |env: Option<&str>, flag: Option<&str>| {
        let mut c = waste();
        c.args(["node", "--print-config", "--config"]).arg(&file);
        if let Some(v) = env {
            c.env("WASTE_NODE_MAX_SESSIONS", v);
        }
        if let Some(v) = flag {
            c.args(["--max-sessions", v]);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let cfg: toml::Value = toml::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
        (cfg["max_sessions"].as_integer().unwrap(), cfg)
    };
    let (file_only, cfg) = print(None, None);
    assert_eq!(file_only, 3);
    assert_eq!(cfg["ctx_size"].as_integer(), Some(256));
    assert_eq!(cfg["ram_budget"].as_integer(), Some(2 << 30));
    assert_eq!(print(Some("5"), None).0, 5);
    assert_eq!(print(Some("5"), Some("7")).0, 7);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let mut child = waste()
        .args(["--log-format", "json", "chat", "--model"])
        .arg(&s)
        .env("WASTE_CACHE", tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"/exit\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let logs = String::from_utf8_lossy(&o.stderr);
    assert!(logs.lines().count() > 0, "no log lines");
    for line in logs.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(logs.contains("RAM plan"), "{logs}");
}

#[test]
fn the_example_config_files_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/systemd");
    let read = |f: &str| fs_err::read_to_string(dir.join(f)).unwrap();
    let node: waste_node::Config = toml::from_str(&read("node.toml")).unwrap();
    assert_eq!(node.ram_budget, Some(28 << 30));
    let store: waste_store::Config = toml::from_str(&read("store.toml")).unwrap();
    assert_eq!(store.io.threads, 16);
    for unit in ["waste-node.service", "waste-store.service"] {
        let text = read(unit);
        let conf = if unit.contains("node") {
            "node.toml"
        } else {
            "store.toml"
        };
        assert!(
            text.contains(&format!("--config /etc/waste/{conf}")),
            "{unit}"
        );
    }
}
