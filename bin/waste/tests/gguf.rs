//! `waste` on GGUF files, run as a user would: `forward` on llama.cpp's f32
//! conversion of mixtral_tiny, on a 3-part split of qwen3_moe_tiny and on
//! deepseek_v3_tiny in the `deepseek2` layout and on qwen2_moe_tiny in the
//! `qwen2moe` one writes transformers' logits, and `run --chat`
//! on the real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch-smollm2.sh)
//! answers the fixtures' control question with Paris (q8 products exact:
//! the first answer token is a near tie), using the tokenizer
//! and chat template rebuilt from the file's metadata; `convert --experts
//! native` keeps every ggml type's blocks as stored, experts and backbone
//! alike, and computes what the GGUF computes.

use std::path::Path;

use waste_e2e::{
    Goldens, fixture, gguf_py, gguf_tensor_bytes, max_abs_diff, repo_data, smollm2_gguf,
};

mod common;

use common::waste;

/// `waste forward` on `model` writes the logits of `hf`'s goldens (len7).
fn check_forward(model: &Path, hf: &str) {
    check_forward_with(model, &Goldens::open(hf).unwrap());
}

fn check_forward_with(model: &Path, g: &Goldens) {
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
    let (got_shape, got) = common::logits_in(&out);
    let (shape, want) = g.f32("logits/len7").unwrap();
    assert_eq!(got_shape, shape);
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

/// deepseek_v3_tiny as llama.cpp's own converter writes it (bf16: the
/// checkpoint's weights exactly; tests/data/gguf/README.md), straight from the
/// file and through a store that keeps its tensors as stored.
#[test]
fn llama_cpp_deepseek2_gguf_and_its_native_store_write_the_goldens_logits() {
    let gguf = repo_data("gguf/deepseek_v3_tiny.bf16.gguf");
    check_forward(&gguf, "deepseek_v3_tiny");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("native");
    convert(&gguf, &store, "native");
    check_forward(&store, "deepseek_v3_tiny");
}

/// qwen2_moe_tiny as llama.cpp's own converter writes it (`qwen2moe`, bf16:
/// the shared expert under its gate, q/k/v biases), straight from the file
/// and through a store that keeps its tensors as stored.
#[test]
fn llama_cpp_qwen2moe_gguf_and_its_native_store_write_the_goldens_logits() {
    let gguf = repo_data("gguf/qwen2_moe_tiny.bf16.gguf");
    let g = Goldens::open_in(&repo_data("qwen2_moe_tiny")).unwrap();
    check_forward_with(&gguf, &g);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("native");
    convert(&gguf, &store, "native");
    check_forward_with(&store, &g);
}

/// `waste forward` logits of `model` on `tokens`, as f32 values.
fn forward_logits(model: &Path, tokens: &str) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.safetensors");
    let o = waste()
        .args(["forward", "--model"])
        .arg(model)
        .args(["--tokens", tokens, "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "forward on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    common::logits_in(&out).1
}

fn convert(src: &Path, out: &Path, experts: &str) {
    let o = waste()
        .arg("convert")
        .arg(src)
        .arg(out)
        .args(["--experts", experts, "--jobs", "2"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "convert --experts {experts}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The ggml types with an integer kernel (waste_kernels::ggml::dot).
const INT_KERNEL_TYPES: [&str; 19] = [
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "IQ4_XS", "IQ4_NL", "IQ2_XXS",
    "IQ2_XS", "IQ3_XXS", "IQ3_S", "Q5_0", "Q4_1", "Q5_1", "IQ1_S", "IQ1_M", "IQ2_S",
];

/// Every ggml type gguf-py 0.17.1 can write (all that waste decodes but
/// MXFP4, which it predates), three a layer.
const EXPERT_TYPES: [&str; 24] = [
    "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_S",
    "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0",
    "TQ2_0", "BF16", "F32",
];

/// A qwen3moe GGUF whose experts hold every type above: `convert --experts
/// native` keeps the blocks (record bytes as `inspect --json` counts them,
/// headers included, within 1.05x of the GGUF's expert tensors), `inspect`
/// names each layer's formats and their kernel, and `forward` on the store
/// writes the logits of the GGUF itself (and of its `--experts f32` store,
/// bit for bit the GGUF's) up to the 8-bit activations of the types with an
/// integer kernel, while a `q3` store's differ more (the experts count).
#[test]
fn native_experts_of_every_ggml_type_keep_their_blocks_and_logits() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("qwen3moe-types.gguf");
    gguf_py::qwen3moe_gguf(&gguf, &EXPERT_TYPES, None).unwrap();
    let gguf_expert_bytes = gguf_tensor_bytes(&gguf, true).unwrap();
    let (native, f32s, q3) = (
        dir.path().join("native"),
        dir.path().join("f32"),
        dir.path().join("q3"),
    );
    convert(&gguf, &native, "native");
    convert(&gguf, &f32s, "f32");
    convert(&gguf, &q3, "q3");

    let report = inspect_json(&native);
    let bytes = report["experts"]["bytes"].as_u64().unwrap();
    let ratio = bytes as f64 / gguf_expert_bytes as f64;
    eprintln!(
        "native store: {bytes} expert bytes for the GGUF's {gguf_expert_bytes} ({ratio:.4}x)"
    );
    assert!(
        ratio <= 1.05,
        "{bytes} record bytes for {gguf_expert_bytes}: {ratio}x"
    );
    let formats: Vec<String> = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["formats"].as_array().unwrap().clone())
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    // F32 and BF16 stay waste's plain `f32` / `bf16`; the rest keep ggml's name.
    let want: Vec<String> = EXPERT_TYPES
        .iter()
        .map(|t| match *t {
            "F32" => "f32".to_string(),
            "BF16" => "bf16".to_string(),
            t => t.to_string(),
        })
        .collect();
    assert_eq!(formats, want);
    for t in &want {
        let kernel = report["kernels"][t.as_str()].as_str().unwrap();
        if INT_KERNEL_TYPES.contains(&t.as_str()) {
            assert!(kernel.contains(&format!("{t}·Q8_")), "{t}: {kernel}");
        } else if ["f32", "bf16", "F16"].contains(&t.as_str()) {
            assert!(
                kernel.ends_with("f32 dot, each value widened exactly"),
                "{t}: {kernel}"
            );
        } else {
            assert_eq!(kernel, "scalar row decode + f32 dot", "{t}");
        }
    }
    let text = waste().arg("inspect").arg(&native).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("kernel for TQ1_0: scalar row decode + f32 dot"),
        "{text}"
    );

    let tokens = "3,17,99,200,5,42,77,311,7,500,1,260";
    let from_gguf = forward_logits(&gguf, tokens);
    let from_native = forward_logits(&native, tokens);
    assert!(from_gguf.iter().all(|v| v.is_finite()));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // The GGUF run straight from its file and its f32 store are exact; the
    // native store's types with an integer kernel quantize their
    // activations to 8 bits (llama.cpp's arithmetic), which moves the
    // logits by that rounding only, far less than a q3 store's experts.
    let from_f32 = forward_logits(&f32s, tokens);
    assert_eq!(
        bits(&from_gguf),
        bits(&from_f32),
        "the GGUF vs its f32 store"
    );
    let rel = |a: &[f32], b: &[f32]| {
        let d: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        (d / b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>()).sqrt()
    };
    let int8 = rel(&from_native, &from_f32);
    let q3_err = rel(&forward_logits(&q3, tokens), &from_f32);
    eprintln!("relative logit error against the f32 store: native {int8:.2e}, q3 {q3_err:.2e}");
    // Measured 3.5e-2 (q3: 0.81): about 0.7 % RMS per product, compounded
    // over the tiny random model's layers.
    assert!(
        int8 <= 0.1 && int8 < q3_err / 10.0,
        "native vs f32 store: {int8} (q3 {q3_err})"
    );
    let d = max_abs_diff(&forward_logits(&q3, tokens), &from_native);
    assert!(
        d > 1e-3,
        "a q3 store gives the same logits ({d}): the experts do not count"
    );
}

/// `waste inspect --json` of a store.
fn inspect_json(store: &Path) -> serde_json::Value {
    let o = waste()
        .args(["inspect", "--json"])
        .arg(store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `--backbone native` (the default) keeps a GGUF's quantized backbone
/// matrices as their blocks: the backbone's bytes (`inspect --json`) are
/// within 1.05x of the GGUF's non-expert tensors, `inspect` names their
/// type's kernel, and `forward` on the
/// store writes the GGUF's own logits, bit for bit where the type has no
/// integer kernel, else up to its 8-bit activations. On the qwen3moe file
/// with a Q6_K backbone, and on the real SmolLM2 Q4_1 file (llama.cpp's
/// quantizer; a Q8_0 embedding, q/k rows permuted for rotary in blocks).
#[test]
fn native_backbone_keeps_ggml_blocks_and_logits() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = dir.path().join("qwen3moe-q6k.gguf");
    gguf_py::qwen3moe_gguf(&qwen, &["Q4_K", "IQ4_XS", "Q5_K"], Some("Q6_K")).unwrap();
    let smol = smollm2_gguf().unwrap();
    for (gguf, tokens, ty) in [
        (qwen.as_path(), "3,17,99,200,5,42,77", "Q6_K"),
        (smol.as_path(), "1,2,3,100,2000,5000,17", "Q4_1"),
    ] {
        let store = dir.path().join(gguf.file_stem().unwrap());
        convert(gguf, &store, "native");
        let report = inspect_json(&store);
        let bytes = report["backbone_total"]["bytes"].as_u64().unwrap();
        let want = gguf_tensor_bytes(gguf, false).unwrap();
        let ratio = bytes as f64 / want as f64;
        eprintln!(
            "{}: backbone {bytes} bytes for the GGUF's {want} ({ratio:.4}x)",
            gguf.display()
        );
        assert!(ratio <= 1.05, "{}: {ratio}x", gguf.display());
        let kernel = report["kernels"][ty].as_str().unwrap();
        if INT_KERNEL_TYPES.contains(&ty) {
            assert!(
                kernel.contains(&format!("{ty}·Q8_")),
                "{}: {kernel}",
                gguf.display()
            );
        } else {
            assert_eq!(kernel, "scalar row decode + f32 dot", "{}", gguf.display());
        }
        let (got, want) = (forward_logits(&store, tokens), forward_logits(gguf, tokens));
        if INT_KERNEL_TYPES.contains(&ty) {
            // 8-bit activations in the backbone's products (llama.cpp's
            // arithmetic) against the exact run straight from the file.
            let d: f64 = got
                .iter()
                .zip(&want)
                .map(|(x, y)| f64::from(x - y).powi(2))
                .sum();
            let rel = (d / want.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>()).sqrt();
            eprintln!("{}: relative logit error {rel:.2e}", gguf.display());
            // measured 2.7e-2 for a Q6_K backbone (every matrix 8-bit fed)
            assert!(rel <= 0.1, "{}: store vs GGUF logits {rel}", gguf.display());
        } else {
            let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(got),
                bits(want),
                "{}: store vs GGUF logits",
                gguf.display()
            );
        }
    }
}

#[test]
fn run_chat_on_smollm2_gguf_knows_the_capital_of_france() {
    // The exact model's first answer token is a near tie ("The" 25.325,
    // "L" 25.243): llama.cpp's int8 arithmetic on the tied Q8_0 head moves
    // it by 0.12 and the answer becomes "L'Étoile, la Marseillaise" (the
    // final norm has a 33 among values near 1, a coarse int8 step in its
    // block; q8_backbone.rs checks those logits against ggml's reference).
    // The control question asks what the model knows, so it runs exact.
    let output = waste()
        .args(["run", "--model"])
        .arg(smollm2_gguf().unwrap())
        .args([
            "--prompt",
            "What is the capital of France?",
            "--chat",
            "--max-tokens",
            "12",
            "--exact-q8",
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
        // Exact q8 products: see run_chat_on_smollm2_gguf_knows_the_capital_of_france.
        .args([
            "--listen",
            "127.0.0.1:0",
            "--ram-budget",
            "2G",
            "--exact-q8",
        ])
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
