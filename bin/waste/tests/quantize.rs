//! `waste quantize` end to end: stdout is exactly one JSON object of packed
//! sizes, OUT holds float32 dequantized values under the input names, and the
//! error computed from OUT is what a 3-bit format should give.

use std::collections::HashMap;
use std::process::Command;

use safetensors::tensor::{Dtype, TensorView};

fn gaussianish(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            let mut acc = 0f32;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                acc += (s as f32 / u32::MAX as f32) - 0.5;
            }
            acc * 0.05
        })
        .collect()
}

/// Runs `waste quantize` and returns its stdout, which must be one JSON object.
fn quantize(input: &std::path::Path, format: &str, output: &std::path::Path) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(["quantize", "--format", format, "--in"])
        .arg(input)
        .arg("--out")
        .arg(output)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).expect("stdout is one JSON object")
}

#[test]
fn quantize_writes_dequantized_f32_and_prints_only_json() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (
        dir.path().join("in.safetensors"),
        dir.path().join("out.safetensors"),
    );
    let tensors = [
        ("a.weight", vec![64, 384], gaussianish(64 * 384, 1)),
        ("b.weight", vec![7, 100], gaussianish(700, 2)),
    ];
    let bias: Vec<u8> = [1f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, v)| {
            (
                n.to_string(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let mut views: HashMap<String, TensorView<'_>> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    views.insert(
        "c.bias".into(),
        TensorView::new(Dtype::F32, vec![3], &bias).unwrap(),
    );
    safetensors::serialize_to_file(&views, None, &input).unwrap();

    let report = quantize(&input, "q3", &output);
    let out_bytes = fs_err::read(&output).unwrap();
    let out = safetensors::SafeTensors::deserialize(&out_bytes).unwrap();
    assert_eq!(
        report.as_object().unwrap().len(),
        2,
        "only the 2-D tensors: {report}"
    );
    for (name, shape, values) in &tensors {
        let elems = shape[0] * shape[1];
        let packed = report[name]["packed_bytes"].as_u64().unwrap() as usize;
        assert_eq!(packed, shape[0] * shape[1].div_ceil(32) * 13, "{name}");
        let bpw = report[name]["bits_per_weight"].as_f64().unwrap();
        assert!((bpw - packed as f64 * 8.0 / elems as f64).abs() < 1e-12);
        let view = out.tensor(name).unwrap();
        assert_eq!((view.dtype(), view.shape()), (Dtype::F32, &shape[..]));
        let deq: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let err: f64 = values
            .iter()
            .zip(&deq)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let norm: f64 = values.iter().map(|a| f64::from(*a).powi(2)).sum();
        let rel = (err / norm).sqrt();
        assert!(rel > 0.05 && rel < 0.2, "{name}: rel error {rel}");
    }
    assert_eq!(
        report["a.weight"]["bits_per_weight"].as_f64().unwrap(),
        3.25
    );
}

#[test]
fn unknown_format_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args([
            "quantize",
            "--in",
            "x.safetensors",
            "--format",
            "q5",
            "--out",
        ])
        .arg(dir.path().join("o.safetensors"))
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(run.stdout.is_empty());
}

/// The float values of a 2-D f32 or bf16 tensor.
fn widened(view: &TensorView<'_>) -> Vec<f32> {
    match view.dtype() {
        Dtype::F32 => view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        Dtype::BF16 => view
            .data()
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// The error goal of `q3-tcq` on the 20 real matrices of the fixtures: at
/// most 3.25 bits per weight counted from the packed bytes `waste quantize`
/// reports, and a relative error (computed here from its output) of at most
/// 0.90 × that of llama.cpp's own Q3_K quantizer on the same matrix
/// (`real_weights_ref/llama_cpp_reference.json`).
#[test]
fn q3_tcq_is_under_0_90_of_llama_cpps_q3_k_on_every_real_matrix() {
    let fixtures = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ));
    let reference: serde_json::Value = serde_json::from_str(
        &fs_err::read_to_string(fixtures.join("real_weights_ref/llama_cpp_reference.json"))
            .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (tag, file) in [
        (
            "smollm2",
            "real_weights/smollm2_135m_ffn_attn_bf16.safetensors",
        ),
        ("minilm", "real_weights_ref/minilm_l6_f32.safetensors"),
    ] {
        let input = fixtures.join(file);
        let output = dir.path().join(format!("{tag}.safetensors"));
        let report = quantize(&input, "q3-tcq", &output);
        let (in_bytes, out_bytes) = (
            fs_err::read(&input).unwrap(),
            fs_err::read(&output).unwrap(),
        );
        let (src, out) = (
            safetensors::SafeTensors::deserialize(&in_bytes).unwrap(),
            safetensors::SafeTensors::deserialize(&out_bytes).unwrap(),
        );
        for (name, view) in src.tensors() {
            if view.shape().len() != 2 {
                continue;
            }
            let key = format!("{tag}/{name}");
            let q3_k = reference["reference"][&key]["Q3_K"]["rel_error"]
                .as_f64()
                .unwrap_or_else(|| panic!("no Q3_K reference for {key}"));
            let values = widened(&view);
            let deq = widened(&out.tensor(&name).unwrap());
            let err: f64 = values
                .iter()
                .zip(&deq)
                .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                .sum();
            let norm: f64 = values.iter().map(|a| f64::from(*a).powi(2)).sum();
            let rel = (err / norm).sqrt();
            let bpw = report[&name]["packed_bytes"].as_f64().unwrap() * 8.0 / values.len() as f64;
            assert!(bpw <= 3.25, "{key}: {bpw} bits per weight");
            assert!(
                rel <= 0.90 * q3_k,
                "{key}: error {rel:.4} is {:.3} x Q3_K's {q3_k:.4}",
                rel / q3_k
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 20, "the fixtures hold 20 real matrices");
}
