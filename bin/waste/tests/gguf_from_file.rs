//! A GGUF run straight from its file keeps its quantized backbone in its
//! blocks, as a `--backbone native` store holds it, instead of widening it
//! to f32: `waste forward --model` on the real SmolLM2-135M Q4_1 file (134.5 M
//! parameters: 538 MB as f32, a 98 MB file) peaks well below the f32
//! backbone's size. The peak is the kernel's own count (the child's
//! `ru_maxrss`, read by Python's `resource` module), not waste's.

use std::process::Command;

use waste_e2e::smollm2_gguf;

/// Peak resident bytes of `waste args…`, which must succeed.
fn peak_rss(args: &[&str]) -> u64 {
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:])\n\
                  assert r.returncode == 0, r\n\
                  print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)";
    let out = Command::new("python3")
        .args(["-c", script, env!("CARGO_BIN_EXE_waste")])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    kib * 1024
}

#[test]
fn forward_on_a_quantized_gguf_holds_its_blocks() {
    let gguf = smollm2_gguf().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.safetensors");
    let peak = peak_rss(&[
        "forward",
        "--model",
        gguf.to_str().unwrap(),
        "--tokens",
        "1,2,3,100,2000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let f32_backbone = 134_515_008u64 * 4;
    eprintln!("peak RSS {peak} bytes; the f32 backbone alone is {f32_backbone}");
    assert!(
        peak < f32_backbone * 3 / 4,
        "peak RSS {peak} B: the backbone was widened (f32: {f32_backbone} B)"
    );
}
