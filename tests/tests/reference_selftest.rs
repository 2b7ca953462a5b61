//! Checks the naive reference forward itself: against transformers' goldens
//! for the tiny fixtures (shared ones and tests/data/qwen2_moe_tiny), and on random checkpoints of every family
//! (runs, finite, deterministic, and the generator really varies the shapes).

use std::collections::HashMap;

use half::bf16;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use waste_e2e::{Family, MemorySource, random_checkpoint, reference_logits};
use waste_kernels::{Tensor, TensorData};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");

fn read_safetensors(path: &str) -> HashMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = fs_err::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.iter()
        .map(|(name, view)| {
            (
                name.to_owned(),
                (view.dtype(), view.shape().to_vec(), view.data().to_vec()),
            )
        })
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A fixture's `model.safetensors` as an in-memory source (bf16 stays bf16).
fn load_fixture(dir: &str) -> MemorySource {
    let mut src = MemorySource::new();
    for (name, (dtype, shape, data)) in read_safetensors(&format!("{dir}/model.safetensors")) {
        let data = match dtype {
            Dtype::BF16 => TensorData::Bf16(
                data.chunks_exact(2)
                    .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            Dtype::F32 => TensorData::F32(f32s(&data)),
            other => panic!("{name}: unexpected dtype {other:?}"),
        };
        src.insert(name, Tensor::new(shape, data).unwrap());
    }
    src
}

fn check_fixture(name: &str) -> f32 {
    check_fixture_in(name, &format!("{FIXTURES}/{name}"))
}

fn check_fixture_in(name: &str, dir: &str) -> f32 {
    let config: Value =
        serde_json::from_str(&fs_err::read_to_string(format!("{dir}/config.json")).unwrap())
            .unwrap();
    let src = load_fixture(dir);
    let goldens = read_safetensors(&format!("{dir}/goldens.safetensors"));
    let (dtype, _, ids) = &goldens["input_ids/len33"];
    assert_eq!(*dtype, Dtype::I64);
    let tokens: Vec<u32> = ids
        .chunks_exact(8)
        .map(|b| u32::try_from(i64::from_le_bytes(b.try_into().unwrap())).unwrap())
        .collect();
    let (dtype, shape, want) = &goldens["logits/len33"];
    assert_eq!(*dtype, Dtype::F32);
    let want = f32s(want);
    let got = reference_logits(&config, &src, &tokens).unwrap();
    assert_eq!(got.len(), shape.iter().product::<usize>());
    let max_diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "{name}: max |reference - transformers| over {} logits = {max_diff:.3e}",
        got.len()
    );
    assert!(max_diff < 1e-4, "{name}: max abs logit diff {max_diff}");
    max_diff
}

#[test]
fn deepseek_v3_tiny_matches_transformers() {
    check_fixture("deepseek_v3_tiny");
}

#[test]
fn qwen3_moe_tiny_matches_transformers() {
    check_fixture("qwen3_moe_tiny");
}

#[test]
fn mixtral_tiny_matches_transformers() {
    check_fixture("mixtral_tiny");
}

#[test]
fn qwen2_moe_tiny_matches_transformers() {
    let dir = waste_e2e::repo_data("qwen2_moe_tiny");
    check_fixture_in("qwen2_moe_tiny", dir.to_str().unwrap());
}

fn tokens_for(config: &Value, n: usize, seed: u64) -> Vec<u32> {
    let vocab = config["vocab_size"].as_u64().unwrap();
    (0..n as u64)
        .map(|i| u32::try_from((seed * 31 + i * 17 + 3) % vocab).unwrap())
        .collect()
}

#[test]
fn random_checkpoints_run_for_every_family() {
    for family in Family::all() {
        for seed in 0..5 {
            let (config, src) = random_checkpoint(family, seed);
            let vocab = usize::try_from(config["vocab_size"].as_u64().unwrap()).unwrap();
            let tokens = tokens_for(&config, 12, seed);
            let logits = reference_logits(&config, &src, &tokens)
                .unwrap_or_else(|e| panic!("{family:?} seed {seed}: {e:#}\nconfig: {config:#}"));
            assert_eq!(logits.len(), tokens.len() * vocab);
            assert!(
                logits.iter().all(|v| v.is_finite()),
                "{family:?} seed {seed}: non-finite logits"
            );
            let spread = logits.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(
                spread > 1e-3 && spread < 1e3,
                "{family:?} seed {seed}: logits max |v| {spread}"
            );
        }
    }
}

#[test]
fn random_checkpoints_are_deterministic() {
    for family in Family::all() {
        let (c1, s1) = random_checkpoint(family, 7);
        let (c2, s2) = random_checkpoint(family, 7);
        assert_eq!(c1, c2);
        let tokens = tokens_for(&c1, 5, 7);
        assert_eq!(
            reference_logits(&c1, &s1, &tokens).unwrap(),
            reference_logits(&c2, &s2, &tokens).unwrap()
        );
        let (c3, _) = random_checkpoint(family, 8);
        assert_ne!(c1, c3, "{family:?}: seeds 7 and 8 gave the same config");
    }
}

/// Over a few dozen seeds the generator hits every config variant it promises.
#[test]
fn generator_covers_the_variants() {
    let configs = |family| (0..40).map(move |seed| random_checkpoint(family, seed));
    let any = |family, pred: &dyn Fn(&Value, &MemorySource) -> bool| {
        configs(family).any(|(c, s)| pred(&c, &s))
    };
    let is_null = |c: &Value, key: &str| c.get(key).is_some_and(Value::is_null);
    for family in Family::all() {
        assert!(
            any(family, &|c, _| c.get("rope_parameters").is_some()),
            "{family:?}: rope_parameters"
        );
        assert!(
            any(family, &|c, _| c.get("rope_theta").is_some()),
            "{family:?}: rope_theta"
        );
        assert!(
            any(family, &|_, s| s
                .tensors
                .values()
                .any(|t| matches!(t.data, TensorData::F32(_)))),
            "{family:?}: an f32 tensor"
        );
    }
    assert!(any(
        Family::named("llama"),
        &|c, s| c["tie_word_embeddings"] == true && !s.tensors.contains_key("lm_head.weight")
    ));
    assert!(any(Family::named("llama"), &|c, _| c
        .to_string()
        .contains("llama3")));
    assert!(any(Family::named("mixtral"), &|c, _| is_null(
        c, "head_dim"
    )));
    assert!(any(Family::named("mixtral"), &|c, _| c["sliding_window"]
        .as_u64()
        .is_some_and(|w| w < 12)));
    assert!(any(Family::named("qwen3_moe"), &|c, _| c
        .get("num_experts")
        .is_some()));
    assert!(any(Family::named("qwen3_moe"), &|c, _| c
        .get("num_local_experts")
        .is_some()));
    assert!(any(
        Family::named("qwen3_moe"),
        &|c, _| c["decoder_sparse_step"] == 2
    ));
    assert!(any(Family::named("qwen3_moe"), &|c, _| {
        c["mlp_only_layers"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    }));
    assert!(any(Family::named("qwen3_moe"), &|c, _| {
        c["head_dim"].as_u64().unwrap() * c["num_attention_heads"].as_u64().unwrap()
            != c["hidden_size"].as_u64().unwrap()
    }));
    let qwen2 = Family::named("qwen2_moe");
    assert!(any(qwen2, &|c, _| c["qkv_bias"] == false));
    assert!(any(qwen2, &|_, s| s
        .tensors
        .contains_key("model.layers.0.self_attn.q_proj.bias")));
    assert!(any(qwen2, &|c, _| c["use_sliding_window"] == true
        && c.get("layer_types").is_some()));
    assert!(any(qwen2, &|c, _| c["use_sliding_window"] == true
        && c.get("layer_types").is_none()));
    assert!(any(qwen2, &|c, _| c["norm_topk_prob"] == true));
    assert!(any(qwen2, &|c, _| c["norm_topk_prob"] == false));
    assert!(any(qwen2, &|c, _| c["decoder_sparse_step"] == 2));
    assert!(any(qwen2, &|c, _| c["mlp_only_layers"]
        .as_array()
        .is_some_and(|a| !a.is_empty())));
    assert!(any(Family::named("deepseek_v3"), &|c, _| is_null(
        c,
        "q_lora_rank"
    )));
    assert!(any(Family::named("deepseek_v3"), &|c, _| c["n_group"]
        .as_u64()
        .unwrap()
        > 1));
    assert!(any(
        Family::named("deepseek_v3"),
        &|c, _| c["first_k_dense_replace"] == 0
    ));
    assert!(any(
        Family::named("deepseek_v3"),
        &|c, _| c["n_shared_experts"] == 0
    ));
    assert!(any(
        Family::named("deepseek_v3"),
        &|c, _| c["n_shared_experts"] == 2
    ));
    assert!(any(Family::named("deepseek_v3"), &|c, _| {
        let r = c
            .get("rope_parameters")
            .or_else(|| c.get("rope_scaling"))
            .unwrap();
        r["mscale"] != r["mscale_all_dim"]
    }));
}

/// The Mixtral sliding window changes exactly the positions it should.
#[test]
fn sliding_window_masks_old_keys() {
    let (mut config, src) = (0..)
        .map(|seed| random_checkpoint(Family::named("mixtral"), seed))
        .find(|(c, _)| c["sliding_window"].as_u64().is_some())
        .unwrap();
    let window = usize::try_from(config["sliding_window"].as_u64().unwrap()).unwrap();
    let vocab = usize::try_from(config["vocab_size"].as_u64().unwrap()).unwrap();
    let tokens = tokens_for(&config, 12, 3);
    let windowed = reference_logits(&config, &src, &tokens).unwrap();
    config["sliding_window"] = Value::Null;
    let full = reference_logits(&config, &src, &tokens).unwrap();
    for (pos, (a, b)) in windowed.chunks(vocab).zip(full.chunks(vocab)).enumerate() {
        assert_eq!(a == b, pos < window, "position {pos}, window {window}");
    }
}
