//! `waste plan` against numbers computed here from the store's own files: the
//! backbone's bytes (a bf16 store's backbone is held as stored, so its
//! safetensors data sections), the attention state from config.json, the
//! expert bytes from the experts index, and the fits/does-not-fit line of
//! the budget; then the same plan for a release shape (`--like`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

fn waste(args: &[&str], store: Option<&Path>) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_waste"));
    cmd.arg("plan");
    if let Some(s) = store {
        cmd.arg(s);
    }
    let out = cmd
        .args(args)
        .arg("--json")
        .output()
        .expect("run waste plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Sum of the data sections of every safetensors file in `dir`.
fn safetensors_data_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in fs_err::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            let bytes = fs_err::read(&p).unwrap();
            let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            total += bytes.len() as u64 - 8 - header;
        }
    }
    total
}

#[test]
fn a_store_plan_adds_up_from_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("st");
    common::synth_store(&store, 2, 8, &["--recipe", "q4"]);

    let budget: u64 = 4 << 30;
    let p = waste(
        &[
            "--ram-budget",
            "4G",
            "--ctx-size",
            "512",
            "--max-sessions",
            "3",
        ],
        Some(&store),
    );
    let backbone = safetensors_data_bytes(&store.join("backbone"));
    assert_eq!(p["backbone_bytes"], backbone);
    let class_sum: u64 = p["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(class_sum, backbone);
    for c in p["classes"].as_array().unwrap() {
        assert_eq!(c["format"], "bf16", "{c}");
        assert_eq!(c["bits_per_weight"], 16.0, "{c}");
    }

    let config: Value =
        serde_json::from_slice(&fs_err::read(store.join("backbone/config.json")).unwrap()).unwrap();
    let n = |k: &str| config[k].as_u64().unwrap();
    // K and V rows of every layer, f32 and padded as the cache holds them, at each position.
    let row = waste_model::cache::kv_row_stride(
        (n("num_key_value_heads") * n("head_dim")) as usize,
        waste_model::cache::CacheType::F32,
    );
    let state = n("num_hidden_layers") * 2 * row as u64 * 4 * 512;
    assert_eq!(p["state_bytes_per_session"], state);
    assert_eq!(p["sessions"], 3);
    assert_eq!(p["budget_bytes"], budget);

    let index: Value =
        serde_json::from_slice(&fs_err::read(store.join("experts/index.json")).unwrap()).unwrap();
    let layers = index["layers"].as_array().unwrap();
    let top_k = n("num_experts_per_tok");
    let per_token: u64 = layers
        .iter()
        .map(|l| top_k * l["record_len"].as_u64().unwrap())
        .sum();
    assert_eq!(p["expert_bytes_per_token"], per_token);
    assert_eq!(p["expert_layers"], layers.len());
    let bound = p["decode_bound_tok_s"].as_f64().unwrap();
    assert!(
        (bound - 3e9 / per_token as f64).abs() < 1e-6 * bound,
        "{bound}"
    );

    // The cache is what the fixed parts leave of the budget; the node holds
    // it whole only when there are experts enough to fill it.
    assert_eq!(p["fits"], true);
    let fixed = backbone
        + 3 * state
        + p["in_flight_bytes"].as_u64().unwrap()
        + p["overhead_bytes"].as_u64().unwrap();
    let cache = budget - fixed;
    assert_eq!(p["expert_cache_bytes"], cache);
    let on_disk: u64 = layers
        .iter()
        .map(|l| l["n_experts"].as_u64().unwrap() * l["record_len"].as_u64().unwrap())
        .sum();
    assert_eq!(p["experts_bytes"], on_disk);
    assert_eq!(p["resident_bytes"], fixed + cache.min(on_disk));

    // A budget below the backbone cannot fit.
    let small = (backbone / 2).to_string();
    let p = waste(&["--ram-budget", &small], Some(&store));
    assert_eq!(p["fits"], false);
    assert_eq!(p["expert_cache_bytes"], 0);
}

#[test]
fn a_release_shape_is_planned_at_its_full_size() {
    let p = waste(
        &[
            "--like",
            "qwen3-30b-a3b",
            "--backbone",
            "bf16",
            "--ram-budget",
            "64G",
            "--ctx-size",
            "4096",
            "--max-sessions",
            "1",
        ],
        None,
    );
    // Qwen3-30B-A3B: 48 layers of 128 experts of 2048x768, vocab 151936,
    // 32 query and 4 KV heads of 128: a 1.6 G-parameter backbone (experts
    // are the other 28.7 G). The untied embeddings stay on disk, read by
    // row: resident are the rows of their cache.
    let classes = p["classes"].as_array().unwrap();
    let class = |name: &str| classes.iter().find(|c| c["name"] == name).unwrap();
    let cached = waste_node::plan::EMBEDDING_CACHE_ROWS as u64;
    assert_eq!(class("embeddings")["params"], cached * 2048);
    assert_eq!(class("embeddings")["bytes"], cached * 2048 * 2);
    assert_eq!(class("lm_head")["params"], 151_936u64 * 2048);
    assert_eq!(class("routers")["params"], 48u64 * 128 * 2048);
    // q and o of 32 heads, k of 4; the values (4 heads) a class of their own.
    let attention = 48u64 * (2 * 2048 * 32 * 128 + 2048 * 4 * 128);
    assert_eq!(class("attention")["params"], attention);
    assert_eq!(class("attention values")["params"], 48u64 * 2048 * 4 * 128);
    assert_eq!(p["expert_layers"], 48);
    // 4 KV heads of 128 f32: 2 KiB rows, padded by one 64-byte line.
    assert_eq!(
        p["state_bytes_per_session"],
        48u64 * 2 * (4 * 128 + 16) * 4 * 4096
    );
    assert_eq!(p["fits"], true);
    // q8 matrices are 34 bytes per 32 weights: 8.5 bits.
    let p = waste(&["--like", "qwen3-30b-a3b", "--ram-budget", "64G"], None);
    let classes = p["classes"].as_array().unwrap();
    let attention = classes.iter().find(|c| c["name"] == "attention").unwrap();
    assert_eq!(attention["format"], "q8");
    assert_eq!(attention["bits_per_weight"], 8.5);
}

/// The plan of a release before conversion is the plan of the store that
/// `waste convert` then writes with the same formats, for each backbone
/// format (the fp8 fixture: native keeps fp8, which the node widens; GGUFs:
/// native keeps Q8_0 as q8 and Q6_K as its blocks).
#[test]
fn a_release_is_planned_as_the_store_it_converts_to() {
    let dir = tempfile::tempdir().unwrap();
    // A GGUF whose backbone matrices are Q6_K blocks, kept by `native`.
    let q6k = dir.path().join("q6k_backbone.gguf");
    waste_e2e::gguf_py::qwen3moe_gguf(&q6k, &["Q4_K"], Some("Q6_K")).unwrap();
    for (src, backbone) in [
        (waste_e2e::fixtures::fixture("qwen3_moe_tiny"), "bf16"),
        (waste_e2e::fixtures::fixture("qwen3_moe_tiny"), "q8"),
        (waste_e2e::fixtures::fixture("qwen3_moe_tiny"), "q4"),
        (waste_e2e::fixtures::fixture("deepseek_v3_tiny"), "q3"),
        (
            waste_e2e::fixtures::fixture("kimi_k3_tiny"),
            "attention=q3,dense_ffn=q4",
        ),
        (
            waste_e2e::fixtures::fixture("deepseek_v3_tiny_fp8"),
            "native",
        ),
        (
            waste_e2e::fixtures::fixture("gguf/qwen3_moe_tiny.q8_0.gguf"),
            "native",
        ),
        (q6k.clone(), "native"),
    ] {
        let fixture = src.display().to_string();
        let flags = [
            "--ram-budget",
            "1G",
            "--ctx-size",
            "64",
            "--max-sessions",
            "1",
        ];
        let mut before = vec!["--experts", "q4", "--backbone", backbone];
        before.extend(flags);
        let planned = waste(&before, Some(&src));
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("st");
        let out = Command::new(env!("CARGO_BIN_EXE_waste"))
            .arg("convert")
            .arg(&src)
            .arg(&store)
            .args(["--experts", "q4", "--backbone", backbone])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stored = waste(&flags, Some(&store));
        for key in [
            "backbone_bytes",
            "params",
            "classes",
            "state_bytes_per_session",
            "expert_bytes_per_token",
            "expert_layers",
            "largest_record_bytes",
            "expert_cache_bytes",
            "fits",
        ] {
            assert_eq!(
                planned[key], stored[key],
                "{fixture} --backbone {backbone}: {key}"
            );
        }
    }
}

/// `--backbone auto` under a budget between what the fixed parts need with
/// every class at q8 and at q3: the plan demotes some classes and fits,
/// and `waste convert --backbone auto` with the same RAM flags writes a
/// store whose plan is the same, class by class.
#[test]
fn auto_fits_a_tight_budget_and_converts_to_what_it_planned() {
    let src = waste_e2e::fixtures::fixture("deepseek_v3_tiny");
    // Under 1.28 GB the overhead is its 64 MiB floor: fixed parts differ
    // by the backbone alone.
    let fixed = |backbone: &str| {
        let p = waste(
            &[
                "--experts",
                "q4",
                "--backbone",
                backbone,
                "--ram-budget",
                "1G",
                "--ctx-size",
                "64",
                "--max-sessions",
                "1",
            ],
            Some(&src),
        );
        [
            "backbone_bytes",
            "state_bytes_per_session",
            "in_flight_bytes",
            "overhead_bytes",
        ]
        .iter()
        .map(|k| p[*k].as_u64().unwrap())
        .sum::<u64>()
    };
    let (q8, q3) = (fixed("q8"), fixed("q3"));
    assert!(q3 < q8, "q3 {q3} q8 {q8}");
    let budget = ((q8 + q3) / 2).to_string();
    let flags = [
        "--ram-budget",
        budget.as_str(),
        "--ctx-size",
        "64",
        "--max-sessions",
        "1",
    ];
    let mut before = vec!["--experts", "q4", "--backbone", "auto"];
    before.extend(flags);
    let planned = waste(&before, Some(&src));
    assert_eq!(planned["fits"], true, "{planned:#}");
    assert!(planned["resident_bytes"].as_u64().unwrap() <= (q8 + q3) / 2);
    let classes = planned["classes"].as_array().unwrap();
    let format = |name: &str| {
        classes
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["format"].clone())
    };
    assert!(
        classes
            .iter()
            .any(|c| c["format"] == "q4" || c["format"] == "q3"),
        "{classes:#?}"
    );
    assert!(
        classes
            .iter()
            .all(|c| c["bits_per_weight"].as_f64().unwrap() >= 3.25)
    );
    assert_ne!(format("routers"), Some("q4".into()));
    assert_ne!(format("routers"), Some("q3".into()));
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("st");
    let out = Command::new(env!("CARGO_BIN_EXE_waste"))
        .arg("convert")
        .arg(&src)
        .arg(&store)
        .args(["--experts", "q4", "--backbone", "auto"])
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = waste(&flags, Some(&store));
    for key in [
        "backbone_bytes",
        "params",
        "classes",
        "fits",
        "resident_bytes",
    ] {
        assert_eq!(planned[key], stored[key], "--backbone auto: {key}");
    }
}
