//! The whole system against the references: each fixture converted to a
//! `--experts native` store, served by the store daemon, run by the node in
//! every expert mode (local, fetch, compute-at-store), and run by the node
//! straight from the release's files (`--model`: the Hugging Face folder,
//! and the f32 GGUF where the fixtures have one); Generate's greedy
//! continuation equals the goldens token for token.

use std::path::Path;

use anyhow::Result;
use waste_convert::convert::{ExpertsMode, Options};
use waste_node::{Config, ExpertMode};
use waste_proto::node::v1 as pb;

use waste_e2e::harness::{
    RunningNode, RunningStore, convert_fixture, generate, local_config, remote_config,
};
use waste_e2e::{Goldens, fixture};

/// Converts fixture `dir` into a native store under `out`.
fn native_store(dir: &str, out: &Path) -> Result<()> {
    let options = Options {
        experts: ExpertsMode::Native,
        ..Options::default()
    };
    convert_fixture(dir, &options, out)?;
    Ok(())
}

/// The prompt and the greedy continuation of a fixture's goldens.
fn golden_continuation(dir: &str) -> Result<(Vec<u32>, Vec<u32>)> {
    let g = Goldens::open(dir)?;
    if dir.starts_with("kimi") {
        let json: serde_json::Value =
            serde_json::from_str(&fs_err::read_to_string(fixture(dir).join("goldens.json"))?)?;
        let prompt = json["prompts"][1]["input_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(serde_json::Value::as_u64)
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default();
        let want = g
            .values("prompt1.generate.tokens")?
            .map(|(_, v)| v.into_iter().map(|x| x as u32).collect());
        return Ok((prompt, want.unwrap_or_default()));
    }
    Ok((g.ids("input_ids/len7")?, g.ids("generate/len7/new_tokens")?))
}

/// Greedy Generate of `want.len()` tokens after `prompt` on `node`.
async fn greedy(node: &RunningNode, prompt: &[u32], n: usize) -> Result<(Vec<u32>, pb::Stats)> {
    let mut client = node.client().await?;
    let req = waste_e2e::harness::greedy_request(prompt, n as u32);
    let (got, _, stats) = generate(&mut client, req).await?;
    Ok((got, stats))
}

/// The node on `model` (a fixture's folder or a GGUF of it) with no store.
async fn check_release(dir: &str, model: &Path) -> Result<()> {
    let (prompt, want) = golden_continuation(dir)?;
    let mut cfg = Config {
        ram_budget: Some(2 << 30),
        ctx_size: Some(128),
        ..Config::default()
    };
    cfg.set_model(model);
    assert_eq!(
        cfg.model.as_deref(),
        Some(model),
        "{dir}: taken for a store"
    );
    let node = RunningNode::start(cfg).await?;
    let (got, stats) = greedy(&node, &prompt, want.len()).await?;
    assert_eq!(
        got,
        want,
        "{dir} run from {}: greedy tokens differ from the goldens",
        model.display()
    );
    assert!(
        stats.expert_bytes_read > 0,
        "{dir}: no expert record was built"
    );
    Ok(())
}

async fn check(dir: &str) -> Result<()> {
    let store_dir = tempfile::tempdir()?;
    native_store(dir, store_dir.path())?;
    let (prompt, want) = golden_continuation(dir)?;
    assert!(
        !prompt.is_empty() && !want.is_empty(),
        "{dir}: goldens missing"
    );
    let (backbone, experts) = (
        store_dir.path().join("backbone"),
        store_dir.path().join("experts"),
    );
    let store = RunningStore::start(experts.clone()).await?;
    for mode in [
        ExpertMode::Local,
        ExpertMode::Fetch,
        ExpertMode::ComputeAtStore,
    ] {
        let cfg = match mode {
            ExpertMode::Local => local_config(backbone.clone(), experts.clone()),
            _ => remote_config(backbone.clone(), store.url(), mode),
        };
        let node = RunningNode::start(cfg).await?;
        let (got, stats) = greedy(&node, &prompt, want.len()).await?;
        assert_eq!(
            got, want,
            "{dir} in {mode:?} mode: greedy tokens differ from the goldens"
        );
        assert!((0.0..=1.0).contains(&stats.retention));
    }
    Ok(())
}

macro_rules! golden_tests {
    ($($name:ident => $dir:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() -> Result<()> {
            check($dir).await?;
            check_release($dir, &fixture($dir)).await
        }
    )*};
}

golden_tests! {
    deepseek_v3_native_store_gives_the_goldens_in_every_mode => "deepseek_v3_tiny",
    deepseek_v3_fp8_native_store_gives_the_goldens_in_every_mode => "deepseek_v3_tiny_fp8",
    deepseek_v3_int4_native_store_gives_the_goldens_in_every_mode => "deepseek_v3_tiny_int4",
    qwen3_moe_native_store_gives_the_goldens_in_every_mode => "qwen3_moe_tiny",
    mixtral_native_store_gives_the_goldens_in_every_mode => "mixtral_tiny",
    kimi_linear_native_store_gives_the_goldens_in_every_mode => "kimi_linear_tiny",
    kimi_k3_native_store_gives_the_goldens_in_every_mode => "kimi_k3_tiny",
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_runs_an_f32_gguf_straight_from_the_file() -> Result<()> {
    check_release("qwen3_moe_tiny", &fixture("gguf/qwen3_moe_tiny.f32.gguf")).await?;
    check_release("mixtral_tiny", &fixture("gguf/mixtral_tiny.f32.gguf")).await
}
