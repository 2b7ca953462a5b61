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

    let run = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args([
            "quantize",
            "--in",
            input.to_str().unwrap(),
            "--format",
            "q3",
            "--out",
            output.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("stdout is one JSON object");
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
