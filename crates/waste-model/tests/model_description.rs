//! The validated model description against independent truths: every
//! fixture checkpoint (transformers' own tiny models) satisfies the shapes
//! its config implies; a config made wrong by one key is refused naming
//! that key; the shape check from the tensor table names the same tensor
//! the loader refuses; the GGUF reader holds metadata to the same maxima.

use std::path::PathBuf;

use anyhow::{Result, ensure};
use serde_json::{Value, json};
use waste_format::Checkpoint;
use waste_model::tensors::check_checkpoint;
use waste_model::{Error, Model, ModelConfig};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
    .join(name)
}

const HF_FIXTURES: [&str; 6] = [
    "qwen3_moe_tiny",
    "mixtral_tiny",
    "deepseek_v3_tiny",
    "kimi_linear_tiny",
    "kimi_k3_tiny",
    "deepseek_v3_tiny_fp8",
];

#[test]
fn every_fixture_has_the_tensors_its_config_implies() -> Result<()> {
    for name in HF_FIXTURES {
        let ckpt = Checkpoint::open(fixture(name))?;
        let config = ModelConfig::from_json_file(ckpt.config_json(), ckpt.config_path())?;
        let names = ckpt.tensor_names();
        check_checkpoint(&config, &names, &|n| ckpt.info(n).ok().map(|i| i.shape))?;
        // The check is not vacuous: every expected weight exists.
        let expected = config.expected_backbone().len() + config.expected_experts().count();
        ensure!(
            expected > 10 * config.num_hidden_layers,
            "{name}: {expected}"
        );
    }
    Ok(())
}

fn qwen_config() -> Result<Value> {
    Ok(Checkpoint::open(fixture("qwen3_moe_tiny"))?
        .config_json()
        .clone())
}

#[test]
fn a_config_wrong_by_one_key_is_refused_naming_it() -> Result<()> {
    let base = qwen_config()?;
    for (edit, key) in [
        (
            json!({"num_hidden_layers": 1u64 << 40}),
            "num_hidden_layers",
        ),
        (
            json!({"num_experts_per_tok": 1u64 << 40}),
            "num_experts_per_tok",
        ),
        (json!({"num_experts_per_tok": 0}), "num_experts_per_tok"),
        (json!({"num_experts_per_tok": 17}), "num_experts_per_tok"),
        (json!({"vocab_size": 0}), "vocab_size"),
        (json!({"num_local_experts": 0}), "num_local_experts"),
        (json!({"num_attention_heads": 0}), "num_attention_heads"),
        (json!({"num_key_value_heads": 3}), "num_key_value_heads"),
        (json!({"hidden_size": -1}), "hidden_size"),
        (json!({"head_dim": 31}), "head_dim"),
        (json!({"rms_norm_eps": "small"}), "rms_norm_eps"),
        (json!({"mlp_only_layers": [-1]}), "mlp_only_layers[0]"),
    ] {
        let mut json = base.clone();
        for (k, v) in edit.as_object().expect("an object") {
            json[k] = v.clone();
        }
        let file = PathBuf::from("/models/q/config.json");
        match ModelConfig::from_json_file(&json, &file) {
            Err(Error::Config {
                file: f, key: k, ..
            }) => {
                ensure!(f == file && k == key, "{edit}: key {k:?} in {f:?}");
            }
            other => anyhow::bail!("{edit}: {other:?}"),
        }
    }
    let k3 = Checkpoint::open(fixture("kimi_k3_tiny"))?;
    let mut json = k3.config_json().clone();
    json["text_config"]["num_experts_per_token"] = json!(33);
    let err = ModelConfig::from_json(&json).unwrap_err();
    ensure!(
        matches!(&err, Error::Config { key, .. } if key == "num_experts_per_token"),
        "{err}"
    );
    json["text_config"]["vocab_size"] = json!(0);
    let err = ModelConfig::from_json(&json).unwrap_err();
    ensure!(
        matches!(&err, Error::Config { key, .. } if key == "text_config.vocab_size"),
        "{err}"
    );
    let mut json = base.clone();
    json["model_type"] = json!("qwen9_moe");
    let err = ModelConfig::from_json(&json).unwrap_err();
    ensure!(
        matches!(&err, Error::UnsupportedArchitecture { model_type, .. } if model_type == "qwen9_moe"),
        "{err}"
    );
    Ok(())
}

#[test]
fn the_table_check_and_the_loader_name_the_same_tensor() -> Result<()> {
    let ckpt = Checkpoint::open(fixture("qwen3_moe_tiny"))?;
    for (edit, tensor) in [
        (json!({"vocab_size": 1000}), "model.embed_tokens.weight"),
        (
            json!({"num_key_value_heads": 4}),
            "model.layers.0.self_attn.k_proj.weight",
        ),
        (
            json!({"num_local_experts": 8}),
            "model.layers.0.mlp.gate.weight",
        ),
    ] {
        let mut json = ckpt.config_json().clone();
        for (k, v) in edit.as_object().expect("an object") {
            json[k] = v.clone();
        }
        let config = ModelConfig::from_json(&json)?;
        let names = ckpt.tensor_names();
        let by_table =
            check_checkpoint(&config, &names, &|n| ckpt.info(n).ok().map(|i| i.shape)).unwrap_err();
        let by_loader = Model::load(config, &ckpt).unwrap_err();
        for err in [by_table, by_loader] {
            ensure!(
                matches!(&err, Error::WeightShape { name, .. } if name == tensor),
                "{edit}: {err}"
            );
        }
    }
    Ok(())
}

#[test]
fn gguf_metadata_is_held_to_the_same_maxima() -> Result<()> {
    for &(gguf_key, hf_key, _, max) in waste_convert::gguf::config::COUNT_LIMITS {
        let hf = waste_model::limits::LIMITS
            .iter()
            .find(|l| l.key == hf_key)
            .ok_or_else(|| anyhow::anyhow!("{hf_key} has no limit"))?;
        ensure!(hf.max == max, "{gguf_key}: {max}, {hf_key}: {}", hf.max);
    }
    Ok(())
}
