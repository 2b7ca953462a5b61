//! `waste kl` on the Kimi hybrids, which ship no tokenizer here, fed token
//! ids: a `--experts native` store (K3's MXFP4 as released) is the exact
//! path (KL to the Hugging Face folder ~0, every top-1 the same), and a q3
//! store reports a real, finite KL to the native one.

use std::path::Path;
use std::process::Command;

use waste_e2e::fixture;

fn waste(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "waste {args:?}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn kl(model: &Path, against: &Path, ids: &str) -> serde_json::Value {
    let out = waste(&[
        "kl",
        "--model",
        model.to_str().unwrap(),
        "--against",
        against.to_str().unwrap(),
        "--tokens",
        ids,
        "--json",
    ]);
    serde_json::from_str(out.trim()).unwrap()
}

#[test]
fn kimi_native_stores_are_exact_and_q3_stores_report_their_kl() {
    // Seeded ids across the 1024-token vocabulary.
    let ids: Vec<String> = (0..48u32)
        .map(|i| ((i * 389 + 17) % 1024).to_string())
        .collect();
    let ids = ids.join(",");
    for dir in ["kimi_k3_tiny", "kimi_linear_tiny"] {
        let tmp = tempfile::tempdir().unwrap();
        let (native, q3) = (tmp.path().join("native"), tmp.path().join("q3"));
        let src = fixture(dir);
        for (out, experts) in [(&native, "native"), (&q3, "q3")] {
            waste(&[
                "convert",
                src.to_str().unwrap(),
                out.to_str().unwrap(),
                "--experts",
                experts,
            ]);
        }
        let exact = kl(&native, &src, &ids);
        assert_eq!(exact["positions"], 47, "{dir}: {exact}");
        assert!(exact["mean_kl"].as_f64().unwrap() < 1e-6, "{dir}: {exact}");
        assert_eq!(exact["top1_agreement"], 1.0, "{dir}: {exact}");
        let lossy = kl(&q3, &native, &ids);
        let mean = lossy["mean_kl"].as_f64().unwrap();
        assert!(mean > 1e-6 && mean.is_finite(), "{dir}: {lossy}");
        let top1 = lossy["top1_agreement"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&top1), "{dir}: {lossy}");
    }
}
