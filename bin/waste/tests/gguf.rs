//! `waste` on GGUF files, run as a user would: `forward` on llama.cpp's f32
//! conversion of mixtral_tiny writes transformers' logits, and `run --chat`
//! on the real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch-smollm2.sh)
//! answers the fixtures' control question with Paris, using the tokenizer
//! and chat template rebuilt from the file's metadata.

use std::process::Command;

use safetensors::SafeTensors;
use waste_e2e::{Goldens, fixture, max_abs_diff, smollm2_gguf};

fn waste() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "warn");
    c
}

#[test]
fn forward_on_a_gguf_writes_the_goldens_logits() {
    let g = Goldens::open("mixtral_tiny").unwrap();
    let ids: Vec<String> = g
        .ids("input_ids/len7")
        .unwrap()
        .iter()
        .map(u32::to_string)
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
    let (shape, want) = g.f32("logits/len7").unwrap();
    assert_eq!(logits.shape(), shape.as_slice());
    let got: Vec<f32> = logits
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let d = max_abs_diff(&got, &want);
    assert!(d < 1e-4, "logits differ by {d}");
}

#[test]
fn run_chat_on_smollm2_gguf_knows_the_capital_of_france() {
    let output = waste()
        .args(["run", "--model"])
        .arg(smollm2_gguf().unwrap())
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
