//! `waste` on GGUF files, run as a user would: `forward` on llama.cpp's f32
//! conversion of mixtral_tiny writes transformers' logits, and `run --chat`
//! on the real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch-smollm2.sh)
//! answers the fixtures' control question with Paris, using the tokenizer
//! and chat template rebuilt from the file's metadata.

use std::path::PathBuf;
use std::process::Command;

use safetensors::SafeTensors;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
    .join(name)
}

fn waste() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "warn");
    c
}

/// `$WASTE_SMOLLM2_GGUF`, else where scripts/fetch-smollm2.sh caches it.
fn smollm2_gguf() -> PathBuf {
    let path = std::env::var_os("WASTE_SMOLLM2_GGUF").map_or_else(
        || {
            let cache = std::env::var_os("WASTE_CACHE").map_or_else(
                || {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                        .join(".cache/waste")
                },
                PathBuf::from,
            );
            cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-smollm2.sh (or set WASTE_SMOLLM2_GGUF)",
        path.display()
    );
    path
}

fn golden(name: &str) -> (Vec<usize>, Vec<u8>) {
    let bytes = fs_err::read(fixture("mixtral_tiny/goldens.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    (t.shape().to_vec(), t.data().to_vec())
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn forward_on_a_gguf_writes_the_goldens_logits() {
    let ids: Vec<String> = golden("input_ids/len7")
        .1
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()).to_string())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.safetensors");
    let status = waste()
        .args(["forward", "--model"])
        .arg(fixture("gguf/mixtral_tiny.f32.gguf"))
        .args(["--tokens", &ids.join(","), "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = fs_err::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let logits = st.tensor("logits").unwrap();
    let (shape, want) = golden("logits/len7");
    assert_eq!(logits.shape(), shape.as_slice());
    let d = f32s(logits.data())
        .iter()
        .zip(f32s(&want))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-4, "logits differ by {d}");
}

#[test]
fn run_chat_on_smollm2_gguf_knows_the_capital_of_france() {
    let output = waste()
        .args(["run", "--model"])
        .arg(smollm2_gguf())
        .args([
            "--prompt",
            "What is the capital of France?",
            "--chat",
            "--max-tokens",
            "12",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    // demo_check.md: the dense float model answers "The capital of France is Paris."
    assert!(
        stdout.contains("Paris"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}
