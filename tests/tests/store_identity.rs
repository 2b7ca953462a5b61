//! A node never serves from the wrong or a corrupt store, and says when it
//! cannot serve: a store restarted on another model is refused
//! (FAILED_PRECONDITION, no token); health follows a lost store; a corrupt
//! record is DATA_LOSS in every expert mode, named, not retried, with no
//! server path in the message; a corrupt backbone shard and an unfinished
//! conversion are refused at load.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use waste_convert::convert::Options;
use waste_format::backbone::BackboneMeta;
use waste_format::completion::COMPLETE;
use waste_format::{Checkpoint, ExpertsIndex};
use waste_kernels::Format;
use waste_node::{Config, ExpertMode, Node};
use waste_proto::Code;
use waste_proto::node::v1 as pb;

use waste_e2e::harness::{
    RunningNode, RunningStore, convert_fixture, greedy_request as request, local_config,
    remote_config, write_experts,
};
use waste_e2e::{Goldens, fixture};

const DIR: &str = "qwen3_moe_tiny";

/// Generates; returns the tokens streamed before the call ended and its status.
async fn tokens_and_status(node: &RunningNode, prompt: &[u32]) -> Result<(usize, tonic_status::S)> {
    let mut client = node.client().await?;
    let mut stream = match client.generate(request(prompt, 4)).await {
        Ok(s) => s.into_inner(),
        Err(s) => return Ok((0, tonic_status::S::from(s))),
    };
    let mut tokens = 0;
    loop {
        match stream.message().await {
            Ok(Some(m)) => {
                if let Some(pb::generate_response::Event::Token(t)) = m.event {
                    tokens += t.token_ids.len();
                }
            }
            Ok(None) => return Ok((tokens, tonic_status::S::ok())),
            Err(s) => return Ok((tokens, tonic_status::S::from(s))),
        }
    }
}

/// A status code and message, comparable in asserts.
mod tonic_status {
    #[derive(Debug)]
    pub struct S {
        pub code: waste_proto::Code,
        pub message: String,
    }
    impl S {
        pub fn ok() -> Self {
            Self {
                code: waste_proto::Code::Ok,
                message: String::new(),
            }
        }
    }
    impl From<waste_proto::Status> for S {
        fn from(s: waste_proto::Status) -> Self {
            Self {
                code: s.code(),
                message: s.message().to_string(),
            }
        }
    }
}

/// `root/experts` written from the fixture (q8), and a backbone folder
/// `root/backbone` of the fixture's files that records that folder's
/// identity, as `waste convert` does.
fn store_folders(root: &Path) -> Result<(PathBuf, PathBuf)> {
    let (backbone, experts) = (root.join("backbone"), root.join("experts"));
    fs_err::create_dir_all(&backbone)?;
    fs_err::create_dir_all(&experts)?;
    write_experts(&Checkpoint::open(fixture(DIR))?, &experts, Format::Q8)?;
    let src = fixture(DIR);
    for f in ["config.json", "model.safetensors"] {
        std::os::unix::fs::symlink(src.join(f), backbone.join(f))?;
    }
    let sha = waste_format::manifest::sha256_file(&experts.join("index.json"))?;
    BackboneMeta::compute(&backbone, ["model.safetensors"], &sha)?.save(&backbone)?;
    waste_format::completion::mark_complete(&backbone, "test")?;
    Ok((backbone, experts))
}

/// A copy of `experts` that is another store: same shapes and records, a
/// different index (another model type), so another identity.
fn other_store(experts: &Path, out: &Path) -> Result<()> {
    fs_err::create_dir_all(out)?;
    for e in fs_err::read_dir(experts)? {
        let e = e?;
        fs_err::copy(e.path(), out.join(e.file_name()))?;
    }
    let mut index = ExpertsIndex::load(out)?;
    index.model_type.push_str("_other");
    index.save(out)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_another_model_is_refused_at_connect_and_after_a_restart() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (backbone, experts) = store_folders(tmp.path())?;
    let other = tmp.path().join("other").join("experts");
    other_store(&experts, &other)?;
    let prompt = Goldens::open(DIR)?.ids("input_ids/len7")?;

    // At connect: the backbone recorded another identity.
    let wrong = RunningStore::start(other.clone()).await?;
    let cfg = remote_config(backbone.clone(), wrong.url(), ExpertMode::Fetch);
    let err = Node::load(cfg).await.expect_err("a store of another model");
    let status = waste_proto::Status::from(err);
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let want = waste_format::manifest::sha256_file(&experts.join("index.json"))?;
    let found = waste_format::manifest::sha256_file(&other.join("index.json"))?;
    assert!(
        status.message().contains(&want) && status.message().contains(&found),
        "{status:?}"
    );
    wrong.stop().await?;

    // After a restart on another model, in both remote modes, with a
    // backbone that records its experts and with one that does not (the
    // identity seen at connect is kept).
    for (mode, backbone) in [
        (ExpertMode::Fetch, backbone.clone()),
        (ExpertMode::ComputeAtStore, backbone.clone()),
        (ExpertMode::Fetch, fixture(DIR)),
    ] {
        let store = RunningStore::start(experts.clone()).await?;
        let addr = store.addr;
        let mut cfg = remote_config(backbone, store.url(), mode);
        cfg.expert_cache = Some(0);
        cfg.store_reconnect_secs = 10;
        let node = RunningNode::start(cfg).await?;
        let (n, s) = tokens_and_status(&node, &prompt).await?;
        assert_eq!((n, s.code), (4, Code::Ok), "{mode:?}: {s:?}");
        store.stop().await?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let _other = RunningStore::on(listener, other.clone())?;
        let (n, s) = tokens_and_status(&node, &prompt).await?;
        assert_eq!(n, 0, "{mode:?}: tokens from the wrong store");
        assert_eq!(s.code, Code::FailedPrecondition, "{mode:?}: {s:?}");
        assert!(s.message.contains(&found), "{mode:?}: {s:?}");
    }
    Ok(())
}

/// Status code of GET /health.
async fn http_health(addr: std::net::SocketAddr) -> Result<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    Ok(buf.split(' ').nth(1).context("status line")?.parse()?)
}

async fn grpc_serving(node: &RunningNode) -> Result<bool> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = waste_proto::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    let r = client
        .check(HealthCheckRequest {
            service: "waste.node.v1.Node".into(),
        })
        .await?;
    Ok(r.into_inner().status == ServingStatus::Serving as i32)
}

/// Polls until both health endpoints say `serving`, for at most 5 s.
async fn wait_health(node: &RunningNode, serving: bool) -> Result<Duration> {
    let start = Instant::now();
    loop {
        let http = http_health(node.addr).await? == 200;
        let grpc = grpc_serving(node).await?;
        if http == serving && grpc == serving {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(5),
            "health still {http}/{grpc} after 5 s, want {serving}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_turns_not_serving_when_the_store_is_lost_and_back_when_it_returns() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (backbone, experts) = store_folders(tmp.path())?;
    let prompt = Goldens::open(DIR)?.ids("input_ids/len7")?;
    let store = RunningStore::start(experts.clone()).await?;
    let addr = store.addr;
    let mut cfg = remote_config(backbone, store.url(), ExpertMode::Fetch);
    cfg.expert_cache = Some(0);
    cfg.store_reconnect_secs = 1;
    let node = RunningNode::start(cfg).await?;
    wait_health(&node, true).await?;

    store.stop().await?;
    wait_health(&node, false).await?;
    // A request waiting on the lost store fails once the budget is spent, saying why.
    let (n, s) = tokens_and_status(&node, &prompt).await?;
    assert_eq!(n, 0);
    assert_eq!(s.code, Code::Unavailable, "{s:?}");
    assert!(s.message.contains("unreachable"), "{s:?}");

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let _store = RunningStore::on(listener, experts)?;
    wait_health(&node, true).await?;
    let (n, s) = tokens_and_status(&node, &prompt).await?;
    assert_eq!((n, s.code), (4, Code::Ok), "{s:?}");
    Ok(())
}

/// Flips one byte inside every record of the first MoE layer.
fn corrupt_first_layer(experts: &Path) -> Result<u32> {
    let index = ExpertsIndex::load(experts)?;
    let l = index.layers.first().context("a MoE layer")?;
    let path = experts.join(&l.file);
    let mut bytes = fs_err::read(&path)?;
    for e in 0..u64::from(l.n_experts) {
        let at = (l.data_offset + e * l.stride + l.record_len / 2) as usize;
        bytes[at] ^= 0x40;
    }
    fs_err::write(&path, bytes)?;
    Ok(l.layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_data_loss_in_every_mode_named_and_not_retried() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (backbone, experts) = store_folders(tmp.path())?;
    let layer = corrupt_first_layer(&experts)?;
    let prompt = Goldens::open(DIR)?.ids("input_ids/len7")?;
    let secret = tmp.path().to_str().context("utf-8 path")?.to_string();
    let store = RunningStore::start(experts.clone()).await?;
    for mode in [
        ExpertMode::Local,
        ExpertMode::Fetch,
        ExpertMode::ComputeAtStore,
    ] {
        let mut cfg: Config = match mode {
            ExpertMode::Local => local_config(backbone.clone(), experts.clone()),
            _ => remote_config(backbone.clone(), store.url(), mode),
        };
        cfg.expert_cache = Some(0);
        let node = RunningNode::start(cfg).await?;
        let (n, s) = tokens_and_status(&node, &prompt).await?;
        assert_eq!(n, 0, "{mode:?}");
        assert_eq!(s.code, Code::DataLoss, "{mode:?}: {s:?}");
        assert!(
            s.message.contains(&format!("layer {layer} expert ")),
            "{mode:?}: {s:?}"
        );
        assert!(
            s.message.contains("experts/layer-"),
            "{mode:?}: names no store: {s:?}"
        );
        assert!(
            !s.message.contains(&secret),
            "{mode:?}: a server path: {s:?}"
        );
        if let Some(store) = &node.node.store {
            assert_eq!(store.retries(), 0, "{mode:?}: DATA_LOSS was retried");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_backbone_shard_and_an_unfinished_conversion_are_refused() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("store");
    convert_fixture(DIR, &Options::default(), &out)?;
    let (backbone, experts) = (out.join("backbone"), out.join("experts"));
    let cfg = || local_config(backbone.clone(), experts.clone());
    // Whole: loads, and the store serves it.
    drop(Node::load(cfg()).await?);
    let store = RunningStore::start(experts.clone()).await?;
    store.stop().await?;

    // The conversion did not finish: each daemon refuses the folder.
    for dir in [&experts, &backbone] {
        let marker = dir.join(COMPLETE);
        let saved = fs_err::read(&marker)?;
        fs_err::remove_file(&marker)?;
        let e = Node::load(cfg())
            .await
            .expect_err("an unfinished conversion")
            .to_string();
        assert!(e.contains("did not finish"), "{e}");
        assert!(
            e.contains("rerun waste convert with the same arguments to resume"),
            "{e}"
        );
        if dir == &experts {
            let store_cfg = waste_store::Config {
                experts: experts.clone(),
                ..waste_store::Config::default()
            };
            let e = waste_store::Store::open(&store_cfg)
                .expect_err("unfinished")
                .to_string();
            assert!(e.contains("did not finish"), "{e}");
        }
        fs_err::write(&marker, saved)?;
    }

    // A flipped byte in a backbone shard is named at load.
    let meta = BackboneMeta::load(&backbone)?.context("a converted backbone has its metadata")?;
    let shard = meta.shards.keys().next().context("a shard")?.clone();
    let path = backbone.join(&shard);
    let mut bytes = fs_err::read(&path)?;
    let at = bytes.len() - 3;
    bytes[at] ^= 1;
    fs_err::write(&path, bytes)?;
    let e = Node::load(cfg())
        .await
        .expect_err("a corrupt shard")
        .to_string();
    assert!(e.contains(&shard) && e.contains("corrupted shard"), "{e}");
    let mut unchecked = cfg();
    unchecked.verify_backbone = false;
    drop(Node::load(unchecked).await?);
    Ok(())
}
