//! Untrusted model descriptions, run through the `waste` binary as a user
//! would: a fixture's config.json with one key made wrong (or a GGUF whose
//! `block_count` is 0xFFFFFFFF) makes `forward`, `convert` and `node` exit 65
//! (EX_DATAERR) with a message naming the file and the key or tensor, never
//! a signal, and `convert` leaves nothing behind. `inspect --verify` applies
//! the same rules to a store's config, and a malformed `--tokens` list is a
//! usage error (64).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use waste_e2e::fixture;

mod common;

use common::waste;

const DATA_ERR: i32 = 65;
const USAGE: i32 = 64;

/// A copy of fixture `name` in `dir` with config.json's `edit` applied
/// (`null` removes the key).
fn edited_fixture(dir: &Path, name: &str, edit: &[(&str, Value)]) -> PathBuf {
    let src = fixture(name);
    let dst = dir.join(name);
    fs_err::create_dir_all(&dst).unwrap();
    for entry in fs_err::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().unwrap() != "config.json" {
            fs_err::copy(&path, dst.join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut config: Value =
        serde_json::from_str(&fs_err::read_to_string(src.join("config.json")).unwrap()).unwrap();
    for (key, value) in edit {
        match value {
            Value::Null => {
                config.as_object_mut().unwrap().remove(*key);
            }
            v => config[*key] = v.clone(),
        }
    }
    fs_err::write(dst.join("config.json"), config.to_string()).unwrap();
    dst
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Exit `code` (not a signal) with every one of `needles` in stderr.
fn refused(o: &Output, code: i32, needles: &[&str], what: &str) -> Result<(), String> {
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(code) || stderr.contains("panicked") {
        return Err(format!("{what}: expected exit {code}; {}", text(o)));
    }
    match needles.iter().find(|n| !stderr.contains(**n)) {
        Some(n) => Err(format!("{what}: stderr lacks {n:?}\n{}", text(o))),
        None => Ok(()),
    }
}

fn assert_refused(o: &Output, code: i32, needles: &[&str], what: &str) {
    if let Err(e) = refused(o, code, needles, what) {
        panic!("{e}");
    }
}

fn forward(model: &Path, out: &Path) -> Output {
    waste()
        .args(["forward", "--model"])
        .arg(model)
        .args(["--tokens", "1,2,3", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

fn convert(src: &Path, out: &Path) -> Output {
    waste()
        .arg("convert")
        .arg(src)
        .arg(out)
        .args(["--jobs", "1"])
        .output()
        .unwrap()
}

/// Nothing at `out`, or an empty folder.
fn nothing_written(out: &Path, what: &str) -> Result<(), String> {
    let left: Vec<_> = match fs_err::read_dir(out) {
        Ok(entries) => entries.collect(),
        Err(_) => return Ok(()),
    };
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("{what}: convert left {left:?} in {out:?}"))
    }
}

fn assert_nothing_written(out: &Path, what: &str) {
    if let Err(e) = nothing_written(out, what) {
        panic!("{e}");
    }
}

/// One rule: (fixture, config.json edits, what stderr must name besides the file).
type Rule = (&'static str, Vec<(&'static str, Value)>, &'static str);

fn rules() -> Vec<Rule> {
    let q = "qwen3_moe_tiny";
    let m = "mixtral_tiny";
    vec![
        (
            q,
            vec![("num_hidden_layers", json!(1u64 << 40))],
            "num_hidden_layers",
        ),
        (
            m,
            vec![("num_hidden_layers", json!(1u64 << 40))],
            "num_hidden_layers",
        ),
        (
            q,
            vec![("num_experts_per_tok", json!(1u64 << 40))],
            "num_experts_per_tok",
        ),
        (
            q,
            vec![("num_experts_per_tok", json!(0))],
            "num_experts_per_tok",
        ),
        (
            q,
            vec![("num_experts_per_tok", json!(17))],
            "num_experts_per_tok",
        ),
        (
            m,
            vec![("num_experts_per_tok", json!(9))],
            "num_experts_per_tok",
        ),
        (q, vec![("vocab_size", json!(0))], "vocab_size"),
        (q, vec![("vocab_size", json!(1u64 << 23))], "vocab_size"),
        (q, vec![("hidden_size", json!(-128))], "hidden_size"),
        (q, vec![("hidden_size", json!(1u64 << 17))], "hidden_size"),
        (
            q,
            vec![("num_local_experts", json!(0))],
            "num_local_experts",
        ),
        (
            m,
            vec![("num_local_experts", json!(5000))],
            "num_local_experts",
        ),
        (
            q,
            vec![("num_attention_heads", json!(0))],
            "num_attention_heads",
        ),
        (
            q,
            vec![("num_attention_heads", json!(2048))],
            "num_attention_heads",
        ),
        (
            q,
            vec![("num_key_value_heads", json!(3))],
            "num_key_value_heads",
        ),
        (
            q,
            vec![("moe_intermediate_size", json!(0))],
            "moe_intermediate_size",
        ),
        (
            m,
            vec![("intermediate_size", json!(1u64 << 21))],
            "intermediate_size",
        ),
        (
            q,
            vec![("max_position_embeddings", json!(1u64 << 25))],
            "max_position_embeddings",
        ),
        (q, vec![("head_dim", json!(8192))], "head_dim"),
        (q, vec![("model_type", json!("qwen9_moe"))], "model_type"),
        (q, vec![("model_type", Value::Null)], "model_type"),
        // Counts in range that disagree with the tensors: the tensor is named.
        (
            q,
            vec![("vocab_size", json!(1000))],
            "model.embed_tokens.weight",
        ),
        (
            q,
            vec![("hidden_size", json!(256))],
            "model.embed_tokens.weight",
        ),
        (
            m,
            vec![("num_local_experts", json!(9))],
            "block_sparse_moe.gate.weight",
        ),
        (q, vec![("num_local_experts", json!(8))], "mlp.gate.weight"),
        (
            q,
            vec![("moe_intermediate_size", json!(32))],
            "mlp.experts.0.gate_proj.weight",
        ),
        (m, vec![("num_hidden_layers", json!(5))], "model.layers.4."),
    ]
}

#[test]
fn every_rule_refuses_forward_and_convert_with_a_data_error() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = rules();
    let mut failures = Vec::new();
    for (i, (name, edit, key)) in rules.iter().enumerate() {
        let what = format!("{name} with {edit:?}");
        let dir = edited_fixture(&tmp.path().join(i.to_string()), name, edit);
        let config = dir.join("config.json");
        let config = config.to_str().unwrap();

        let logits = dir.join("logits.safetensors");
        let o = forward(&dir, &logits);
        let mut row = refused(&o, DATA_ERR, &[config, key], &format!("forward on {what}"));
        if row.is_ok() && logits.exists() {
            row = Err(format!("{what}: forward wrote logits"));
        }

        let out = tmp.path().join(format!("store-{i}"));
        let o = convert(&dir, &out);
        let converted = refused(&o, DATA_ERR, &[config, key], &format!("convert of {what}"))
            .and_then(|()| nothing_written(&out, &what));
        failures.extend(row.err());
        failures.extend(converted.err());
    }
    assert!(
        failures.is_empty(),
        "{} of {} checks failed:\n{}",
        failures.len(),
        2 * rules.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_node_refuses_a_bad_config_with_a_data_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = edited_fixture(
        tmp.path(),
        "qwen3_moe_tiny",
        &[("num_hidden_layers", json!(1u64 << 40))],
    );
    let o = waste()
        .args(["node", "--listen", "127.0.0.1:0", "--backbone"])
        .arg(&dir)
        .arg("--experts")
        .arg(&dir)
        .output()
        .unwrap();
    let config = dir.join("config.json");
    assert_refused(
        &o,
        DATA_ERR,
        &[config.to_str().unwrap(), "num_hidden_layers"],
        "node",
    );
}

#[test]
fn a_gguf_with_four_billion_blocks_is_a_data_error_not_an_abort() {
    let mut bytes = fs_err::read(fixture("gguf/qwen3_moe_tiny.f32.gguf")).unwrap();
    let key = b"qwen3moe.block_count";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("the fixture has a block_count")
        + key.len();
    // The value follows its u32 type tag (4: u32).
    assert_eq!(bytes[at..at + 4], 4u32.to_le_bytes());
    bytes[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("blocks.gguf");
    fs_err::write(&gguf, &bytes).unwrap();
    let needles = ["blocks.gguf", "qwen3moe.block_count", "4294967295"];

    let logits = tmp.path().join("logits.safetensors");
    let o = forward(&gguf, &logits);
    assert_refused(&o, DATA_ERR, &needles, "forward");
    assert!(!logits.exists());

    let out = tmp.path().join("store");
    let o = convert(&gguf, &out);
    assert_refused(&o, DATA_ERR, &needles, "convert");
    assert_nothing_written(&out, "convert");
}

#[test]
fn inspect_verify_applies_the_loaders_rules_to_a_stores_config() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let o = convert(&fixture("qwen3_moe_tiny"), &store);
    assert!(o.status.success(), "{}", text(&o));
    let config_path = store.join("backbone/config.json");
    let original = fs_err::read_to_string(&config_path).unwrap();
    let inspect = || {
        waste()
            .args(["inspect", "--verify"])
            .arg(&store)
            .output()
            .unwrap()
    };
    let o = inspect();
    assert!(o.status.success(), "{}", text(&o));

    for (edit, needle) in [
        (json!({"vocab_size": 0}), "vocab_size"),
        (json!({"num_key_value_heads": 3}), "num_key_value_heads"),
        (json!({"num_experts_per_tok": 0}), "num_experts_per_tok"),
        (json!({"model_type": "qwen9_moe"}), "model_type"),
        (json!({"vocab_size": 1000}), "model.embed_tokens.weight"),
        // Only the experts index disagrees: its records are 64 wide, top-4.
        (json!({"moe_intermediate_size": 32}), "experts layer 0"),
        (json!({"num_experts_per_tok": 2}), "top-k 4"),
    ] {
        let mut config: Value = serde_json::from_str(&original).unwrap();
        for (k, v) in edit.as_object().unwrap() {
            config[k] = v.clone();
        }
        fs_err::write(&config_path, config.to_string()).unwrap();
        let o = inspect();
        let path = config_path.to_str().unwrap();
        let needles: &[&str] = if needle.contains("model.") {
            &[needle]
        } else {
            &[path, needle]
        };
        assert_refused(
            &o,
            DATA_ERR,
            needles,
            &format!("inspect --verify with {edit}"),
        );
        let o = forward(&store, &tmp.path().join("logits.safetensors"));
        assert_refused(
            &o,
            DATA_ERR,
            &[needle],
            &format!("forward on the store with {edit}"),
        );
    }
}

#[test]
fn malformed_token_lists_are_usage_errors() {
    for tokens in ["1,,2", "1,2,", ",1", "", " ", "1,-2", "1,x", "4294967296"] {
        let o = waste()
            .args(["forward", "--model"])
            .arg(fixture("mixtral_tiny"))
            .args([
                "--tokens",
                tokens,
                "--out",
                "/tmp/never-written.safetensors",
            ])
            .output()
            .unwrap();
        assert_refused(&o, USAGE, &["--tokens"], &format!("--tokens {tokens:?}"));
    }
}
