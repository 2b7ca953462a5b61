//! `waste` on GGUF files, run as a user would: `forward` on llama.cpp's f32
//! conversion of mixtral_tiny, on a 3-part split of qwen3_moe_tiny and on
//! deepseek_v3_tiny in the `deepseek2` layout writes transformers' logits, and `run --chat`
//! on the real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch-smollm2.sh)
//! answers the fixtures' control question with Paris, using the tokenizer
//! and chat template rebuilt from the file's metadata.

use std::path::Path;
use std::process::Command;

use safetensors::SafeTensors;
use waste_e2e::{Goldens, fixture, gguf_py, max_abs_diff, smollm2_gguf};

fn waste() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "warn");
    c
}

/// `waste forward` on `model` writes the logits of `hf`'s goldens (len7).
fn check_forward(model: &Path, hf: &str) {
    let g = Goldens::open(hf).unwrap();
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
        .arg(model)
        .args(["--tokens", &ids.join(","), "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "forward on {}", model.display());
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
    assert!(d < 1e-4, "{}: logits differ by {d}", model.display());
}

#[test]
fn forward_on_a_gguf_writes_the_goldens_logits() {
    check_forward(&fixture("gguf/mixtral_tiny.f32.gguf"), "mixtral_tiny");
}

/// A split GGUF (gguf-py's writer, 3 parts) named by its middle part, and
/// DeepSeek-V3 in llama.cpp's `deepseek2` layout with the split `attn_k_b` /
/// `attn_v_b` of newer converters.
#[test]
fn forward_on_split_and_deepseek2_ggufs_writes_the_goldens_logits() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("gguf/qwen3_moe_tiny.f32.gguf");
    let parts = gguf_py::split_gguf(&src, dir.path(), "qwen3_moe_tiny", 20).unwrap();
    assert_eq!(parts.len(), 3);
    check_forward(&parts[1], "qwen3_moe_tiny");
    let ds = dir.path().join("deepseek_v3_tiny.f32.gguf");
    gguf_py::deepseek2_gguf(&fixture("deepseek_v3_tiny"), &ds, true).unwrap();
    check_forward(&ds, "deepseek_v3_tiny");
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

/// `waste node --model FILE.gguf` serves the GGUF straight from the file:
/// a chat through `waste generate` answers the control question with Paris.
#[test]
fn node_on_smollm2_gguf_knows_the_capital_of_france() {
    use std::io::{BufRead, BufReader};
    let mut node = waste()
        .args(["node", "--model"])
        .arg(smollm2_gguf().unwrap())
        .args(["--listen", "127.0.0.1:0", "--ram-budget", "2G"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = node.stdout.take().unwrap();
    let addr = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("waste node listening on ")
                .map(str::to_string)
        });
    let Some(addr) = addr else {
        let _ = node.kill();
        panic!("the node did not start");
    };
    let output = waste()
        .args(["generate", "--node", &format!("http://{addr}"), "--chat"])
        .args(["--prompt", "What is the capital of France?"])
        .args(["--max-tokens", "20"])
        .output()
        .unwrap();
    let _ = node.kill();
    let _ = node.wait();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("Paris"), "{text}");
}
