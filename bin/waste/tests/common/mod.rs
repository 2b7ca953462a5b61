//! What the CLI tests share: the binary under test, its output checked,
//! the logits `waste forward` writes, and daemons started and stopped.

#![allow(dead_code)] // each test target uses its own part of this

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use safetensors::SafeTensors;

/// The `waste` binary under test, logging warnings only.
pub fn waste() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "warn");
    c
}

/// Asserts that `out` is a success, with its output when it is not.
pub fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `logits` tensor of a safetensors file `waste forward` wrote: its
/// shape and f32 values.
pub fn logits_in(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = fs_err::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let logits = st.tensor("logits").unwrap();
    assert_eq!(logits.dtype(), safetensors::Dtype::F32, "logits dtype");
    let values = logits
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (logits.shape().to_vec(), values)
}

/// A daemon child, killed when dropped.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and waits up to `wait` for its "listening on" line; Err
/// with its stderr if it exits first. Both pipes are drained, so a chatty
/// daemon never blocks on them.
pub fn start(mut cmd: Command, wait: Duration) -> Result<Daemon, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn daemon");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    let err = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&err);
    let drain = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut s = sink.lock().unwrap();
            s.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let deadline = Instant::now() + wait;
    loop {
        if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            return Ok(Daemon(child));
        }
        if let Ok(Some(_)) = child.try_wait() {
            let _ = drain.join();
            return Err(err.lock().unwrap().clone());
        }
        assert!(
            Instant::now() < deadline,
            "daemon did not start in {wait:?}"
        );
    }
}

/// `waste synth-store` of a small qwen3-30b-a3b-shaped store (random
/// weights, byte-level tokenizer) at `path`: `layers` layers of `experts`
/// experts, with `extra` flags.
pub fn synth_store(path: &Path, layers: u32, experts: u32, extra: &[&str]) {
    let out = waste()
        .args(["synth-store", "--like", "qwen3-30b-a3b"])
        .args(["--layers", &layers.to_string()])
        .args(["--experts", &experts.to_string()])
        .args(extra)
        .arg(path)
        .output()
        .expect("run waste synth-store");
    ok(&out, "synth-store");
}
