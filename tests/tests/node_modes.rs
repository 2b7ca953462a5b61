//! The node in every expert mode (local files, records fetched from a
//! store, compute-at-store) against the in-process model with the same
//! expert records: identical greedy tokens through Generate (cache,
//! prefetch, per-expert pipelining and the gRPC hop change nothing), expert
//! bytes per token equal to the records the routing chose when nothing is
//! cached, and sane statistics; two generations at once in compute-at-store
//! mode give the same tokens.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Result;
use waste_format::{Checkpoint, ExpertsDir};
use waste_kernels::{ExpertFfn, Format, PackedExpert};
use waste_model::{ExpertProvider, LogitsFor, Model, ModelConfig, NoTrace, Routing, Trace};

use waste_e2e::harness::{
    RunningNode, RunningStore, generate, local_config, remote_config, write_experts,
};
use waste_e2e::{Goldens, argmax, fixture};
use waste_node::ExpertMode;

/// Experts read from an `experts/` folder, synchronously.
struct DirExperts(ExpertsDir);

impl ExpertProvider for DirExperts {
    fn experts(&self, layer: usize, ids: &[u32]) -> waste_model::Result<Vec<Arc<dyn ExpertFfn>>> {
        ids.iter()
            .map(|&e| {
                let mut buf = Vec::new();
                self.0
                    .read_record(layer as u32, e, &mut buf)
                    .expect("record");
                Ok(Arc::new(PackedExpert::parse(buf).expect("parse")) as Arc<dyn ExpertFfn>)
            })
            .collect()
    }
}

/// Distinct experts routed per layer, summed over the steps seen.
#[derive(Default)]
struct CountExperts(HashMap<usize, u64>);

impl Trace for CountExperts {
    fn routing(&mut self, r: &Routing) {
        *self.0.entry(r.layer).or_default() += r.unique_experts().len() as u64;
    }
}

/// Greedy continuation in-process, and the record bytes the decode steps routed to.
fn expected(dir: &str, experts: &ExpertsDir, prompt: &[u32], n: usize) -> Result<(Vec<u32>, u64)> {
    let ckpt = Checkpoint::open(fixture(dir))?;
    let model = Model::load(ModelConfig::from_json(ckpt.config_json())?, &ckpt)?;
    let provider = DirExperts(ExpertsDir::open(experts.dir())?);
    let mut cache = model.new_cache(128);
    let mut logits = model.forward(prompt, &mut cache, &provider, LogitsFor::Last, &mut NoTrace)?;
    let mut tokens = Vec::new();
    let mut count = CountExperts::default();
    for i in 0..n {
        let t = argmax(&logits);
        tokens.push(t);
        if i + 1 < n {
            logits = model.forward(&[t], &mut cache, &provider, LogitsFor::Last, &mut count)?;
        }
    }
    let bytes = count
        .0
        .iter()
        .map(|(l, c)| c * experts.index().layer(*l as u32).unwrap().record_len)
        .sum();
    Ok((tokens, bytes))
}

async fn check(dir: &str, format: Format) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let ckpt = Checkpoint::open(fixture(dir))?;
    write_experts(&ckpt, tmp.path(), format)?;
    let experts = ExpertsDir::open(tmp.path())?;
    let prompt = Goldens::open(dir)?.ids("input_ids/len7")?;
    let n = 16;
    let (want, want_bytes) = expected(dir, &experts, &prompt, n)?;

    let store = RunningStore::start(tmp.path().to_path_buf()).await?;
    // (mode, prefetch, cache, bulk channel): fetches go on the store's
    // bulk channel, which it offers without TLS, unless turned off.
    let runs = [
        (ExpertMode::Local, false, Some(0), true),
        (ExpertMode::Local, true, None, true),
        // Prefetched records staged with no cache to land in.
        (ExpertMode::Local, true, Some(0), true),
        (ExpertMode::Fetch, false, Some(0), true),
        (ExpertMode::Fetch, true, None, true),
        (ExpertMode::Fetch, true, Some(0), true),
        // FetchExperts through gRPC.
        (ExpertMode::Fetch, false, Some(0), false),
        (ExpertMode::Fetch, true, None, false),
        (ExpertMode::ComputeAtStore, false, None, true),
        // Guesses read ahead by the store (PrefetchExperts).
        (ExpertMode::ComputeAtStore, true, None, true),
    ];
    let request = || waste_e2e::harness::greedy_request(&prompt, n as u32);
    for (mode, prefetch, cache, bulk) in runs {
        let mut cfg = match mode {
            ExpertMode::Local => local_config(fixture(dir), tmp.path().to_path_buf()),
            _ => remote_config(fixture(dir), store.url(), mode),
        };
        cfg.prefetch = prefetch;
        cfg.expert_cache = cache;
        cfg.store_bulk = bulk;
        let node = RunningNode::start(cfg).await?;
        if mode == ExpertMode::Fetch {
            let store = node
                .node
                .store
                .as_ref()
                .expect("a store client in fetch mode");
            assert_eq!(
                store.uses_bulk(),
                bulk,
                "{dir}: the bulk channel taken where offered"
            );
        }
        let mut client = node.client().await?;
        let (got, _, stats) = generate(&mut client, request()).await?;
        assert_eq!(
            got, want,
            "{dir} {format:?} {mode:?} prefetch={prefetch} bulk={bulk}: tokens differ from the in-process model"
        );
        assert_eq!(stats.generated_tokens, n as u32);
        assert_eq!(stats.prompt_tokens, prompt.len() as u32);
        assert!(
            (0.0..=1.0).contains(&stats.retention),
            "retention {}",
            stats.retention
        );
        if mode == ExpertMode::ComputeAtStore && !prefetch {
            // The store reads what the request names; it keeps no cache.
            let per_token = want_bytes as f64 / (n - 1) as f64;
            assert!(
                (stats.expert_bytes_per_token - per_token).abs() < 1e-6,
                "{dir}: {} bytes/token reported, the routing chose {per_token}",
                stats.expert_bytes_per_token
            );
        } else if mode == ExpertMode::ComputeAtStore {
            // The store reads the guesses, wrong ones too; some were right.
            assert!(
                stats.prefetch_accuracy > 0.0 && stats.prefetch_accuracy <= 1.0,
                "{dir}: prefetch accuracy {}",
                stats.prefetch_accuracy
            );
        } else if cache == Some(0) && !prefetch {
            // Nothing cached, nothing prefetched: every routed record is read.
            let per_token = want_bytes as f64 / (n - 1) as f64;
            assert!(
                (stats.expert_bytes_per_token - per_token).abs() < 1e-6,
                "{dir}: {} bytes/token reported, the routing chose {per_token}",
                stats.expert_bytes_per_token
            );
            assert_eq!(stats.retention, 0.0);
        } else if cache.is_none() {
            assert!(stats.expert_bytes_per_token <= want_bytes as f64 / (n - 1) as f64 + 1e-6);
            assert!(
                stats.retention > 0.0,
                "a cache this large keeps some experts"
            );
        }
    }

    // Two generations at once, their layers interleaved on one node: each
    // keeps its own guess at the store (a PrefetchExperts stream apiece).
    let mut cfg = remote_config(fixture(dir), store.url(), ExpertMode::ComputeAtStore);
    cfg.prefetch = true;
    let node = RunningNode::start(cfg).await?;
    let (mut c1, mut c2) = (node.client().await?, node.client().await?);
    let (r1, r2) = tokio::join!(generate(&mut c1, request()), generate(&mut c2, request()));
    for (got, _, stats) in [r1?, r2?] {
        assert_eq!(got, want, "{dir}: concurrent compute-at-store generation");
        assert!(
            stats.prefetch_accuracy > 0.0 && stats.prefetch_accuracy <= 1.0,
            "{dir}: concurrent prefetch accuracy {}",
            stats.prefetch_accuracy
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixtral_node_matches_the_in_process_model_in_every_mode() -> Result<()> {
    check("mixtral_tiny", Format::Q8).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_node_matches_the_in_process_model_in_every_mode() -> Result<()> {
    check("deepseek_v3_tiny", Format::Q8).await
}
