//! The `waste` binary's contracts, run as a user would: `forward` writes the
//! goldens' logits, `run` streams the goldens' greedy continuation, and bad
//! input gives an error that names what is wrong, never a panic.

use waste_e2e::{Goldens, fixture, max_abs_diff};

mod common;

use common::waste;

fn golden_ids(dir: &str, name: &str) -> Vec<u32> {
    Goldens::open(dir).unwrap().ids(name).unwrap()
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

#[test]
fn forward_writes_the_goldens_logits() {
    let dir = tempfile::tempdir().unwrap();
    for model in ["mixtral_tiny", "deepseek_v3_tiny_fp8"] {
        let ids = golden_ids(model, "input_ids/len7");
        let out = dir.path().join(format!("{model}.safetensors"));
        let status = waste()
            .args(["forward", "--model"])
            .arg(fixture(model))
            .args(["--tokens", &join(&ids), "--out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success());
        let (got_shape, got) = common::logits_in(&out);
        let (shape, want) = Goldens::open(model).unwrap().f32("logits/len7").unwrap();
        assert_eq!(got_shape, shape);
        let d = max_abs_diff(&got, &want);
        assert!(d < 1e-4, "{model}: logits differ by {d}");
    }
}

#[test]
fn run_streams_the_greedy_continuation() {
    let model = "qwen3_moe_tiny";
    let ids = golden_ids(model, "input_ids/len7");
    let want = golden_ids(model, "generate/len7/new_tokens");
    let out = waste()
        .args(["run", "--model"])
        .arg(fixture(model))
        .args([
            "--tokens",
            &join(&ids),
            "--max-tokens",
            &want.len().to_string(),
            "--ignore-eos",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<u32> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(got, want);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("· 16 tokens ·"), "{stderr}");
}

#[test]
fn bad_input_is_an_error_naming_the_problem() {
    let missing = waste()
        .args([
            "forward",
            "--model",
            "/nonexistent/model",
            "--tokens",
            "1",
            "--out",
            "/tmp/x",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model"));

    let bad_token = waste()
        .args(["forward", "--model"])
        .arg(fixture("mixtral_tiny"))
        .args([
            "--tokens",
            "1,99999",
            "--out",
            "/tmp/never-written.safetensors",
        ])
        .output()
        .unwrap();
    assert!(!bad_token.status.success());
    let err = String::from_utf8_lossy(&bad_token.stderr);
    assert!(err.contains("99999") && !err.contains("panicked"), "{err}");

    let not_a_number = waste()
        .args(["forward", "--model"])
        .arg(fixture("mixtral_tiny"))
        .args(["--tokens", "1,x", "--out", "/tmp/never-written.safetensors"])
        .output()
        .unwrap();
    assert!(!not_a_number.status.success());
    assert!(String::from_utf8_lossy(&not_a_number.stderr).contains("\"x\""));
}
