//! `waste inspect` on a release as downloaded: a GGUF file (whole or split)
//! and a Hugging Face folder are described without converting anything.
//! The bytes it reports are checked against the file's own tensor extents
//! (the offsets in the GGUF header, not the type table inspect uses), and
//! the parameters against the fixture's known shapes.

use std::path::Path;
use std::process::Command;

use waste_e2e::{fixture, gguf_py, gguf_tensor_bytes};

fn inspect(path: &Path, json: bool) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_waste"));
    c.env("RUST_LOG", "warn").arg("inspect");
    if json {
        c.arg("--json");
    }
    c.arg(path).output().unwrap()
}

fn inspect_json(path: &Path) -> serde_json::Value {
    let o = inspect(path, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// llama.cpp's Q8_0 conversion of qwen3_moe_tiny (4 layers of 16 experts,
/// hidden 128, expert width 64, top-4): every class and its type, the
/// experts' bytes and a token's expert reads.
#[test]
fn a_q8_0_gguf_is_described_as_stored() {
    let gguf = fixture("gguf/qwen3_moe_tiny.q8_0.gguf");
    let r = inspect_json(&gguf);
    assert_eq!(r["kind"], "gguf");
    assert_eq!(r["model_type"], "qwen3_moe");
    let expert_params = 4 * 16 * 3 * 128 * 64;
    assert_eq!(r["experts"]["params"], expert_params);
    assert_eq!(r["experts"]["tensors"], 4 * 16 * 3);
    assert_eq!(r["experts"]["stored_as"]["Q8_0"], 4 * 16 * 3);
    assert_eq!(
        r["experts"]["bytes"].as_u64().unwrap(),
        gguf_tensor_bytes(&gguf, true).unwrap()
    );
    assert_eq!(
        r["backbone_total"]["bytes"].as_u64().unwrap(),
        gguf_tensor_bytes(&gguf, false).unwrap()
    );
    // Q8_0: 34 bytes per 32 weights.
    assert_eq!(r["experts"]["bits_per_weight"], 8.5);
    assert_eq!(
        r["backbone"]["norms"]["stored_as"]["F32"].as_u64(),
        Some(r["backbone"]["norms"]["tensors"].as_u64().unwrap())
    );
    assert_eq!(r["backbone"]["routers"]["stored_as"]["F32"], 4);
    assert_eq!(r["moe_layers"], 4);
    assert_eq!(r["top_k"], 4);
    // 4 layers × top-4 × one expert's 3 × 128 × 64 weights at 34/32 bytes.
    assert_eq!(r["expert_bytes_per_token"], 4 * 4 * 3 * 128 * 64 / 32 * 34);
    assert!(r["kernels"]["Q8_0"].is_string(), "{}", r["kernels"]);

    let text = inspect(&gguf, false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("gguf release: qwen3_moe"), "{text}");
    assert!(text.contains("Q8_0 ×192"), "{text}");
    assert!(text.contains("kernel for Q8_0:"), "{text}");
}

/// A split GGUF is read whole, and mixed expert types are counted by type.
#[test]
fn split_and_mixed_type_ggufs_are_described_whole() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("mixed.gguf");
    gguf_py::qwen3moe_gguf(&whole, &["Q4_K", "Q6_K", "Q5_K"], None).unwrap();
    let parts = gguf_py::split_gguf(&whole, dir.path(), "part", 8).unwrap();
    assert!(parts.len() > 1);
    let a = inspect_json(&whole);
    let b = inspect_json(&parts[0]);
    assert_eq!(a["experts"], b["experts"]);
    assert_eq!(a["backbone_total"], b["backbone_total"]);
    assert_eq!(
        a["experts"]["bytes"].as_u64().unwrap(),
        gguf_tensor_bytes(&whole, true).unwrap()
    );
    for t in ["Q4_K", "Q6_K", "Q5_K"] {
        // one layer: 4 experts of one projection each
        assert_eq!(a["experts"]["stored_as"][t], 4, "{t}: {}", a["experts"]);
        assert!(a["kernels"][t].is_string(), "{t}");
    }
}

/// A Hugging Face folder: bf16 tensors by class, none converted.
#[test]
fn a_hugging_face_folder_is_described_as_stored() {
    let r = inspect_json(&fixture("qwen3_moe_tiny"));
    assert_eq!(r["kind"], "huggingface");
    assert_eq!(r["experts"]["params"], 4 * 16 * 3 * 128 * 64);
    assert_eq!(r["experts"]["bits_per_weight"], 16.0);
    assert_eq!(r["experts"]["stored_as"]["bf16"], 4 * 16 * 3);
    let o = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(["inspect", "--verify"])
        .arg(fixture("qwen3_moe_tiny"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("convert it first"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
