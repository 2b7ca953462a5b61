//! Daemons in-process for end-to-end tests: an `experts/` folder built from
//! a fixture checkpoint with a chosen record format, and a node serving on
//! port 0 with a client and a shutdown guard. The listener is bound before
//! serving starts, so tests never sleep waiting for a server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use waste_convert::convert::{self, Options, Plan, Summary};
use waste_format::experts::LayerHeader;
use waste_format::{Checkpoint, ExpertsIndex, LayerWriter};
use waste_kernels::{Format, quantize_expert, record_len};
use waste_model::ModelConfig;
use waste_model::config::FfnKind;
use waste_node::{Config, ExpertMode, Node};
use waste_proto::node::v1 as pb;
use waste_proto::transport::Channel;

/// Writes `out/index.json` and one layer file per MoE layer of the fixture
/// checkpoint `ckpt`, every expert quantized to `format`.
/// Converts fixture `dir` into a store under `out` with `options`, on 2 threads.
pub fn convert_fixture(dir: &str, options: &Options, out: &Path) -> Result<Summary> {
    let options = Options {
        jobs: 2,
        ..options.clone()
    };
    let source = convert::open_source(&crate::fixture(dir), &options)?;
    let plan = Plan::new(&source, &options)?;
    Ok(convert::convert(&source, &plan, &options, out)?)
}

pub fn write_experts(ckpt: &Checkpoint, out: &Path, format: Format) -> Result<ExpertsIndex> {
    let cfg = ModelConfig::from_json(ckpt.config_json())?;
    let moe = cfg.moe.as_ref().context("the model has no experts")?;
    let (d, f) = (cfg.expert_width(), moe.moe_intermediate_size);
    let len = record_len([format; 3], d, f).context("record length")?;
    let mut index = ExpertsIndex::new(
        &cfg.model_type,
        format.name(),
        format.id(),
        moe.top_k as u32,
    );
    for (layer, kind) in cfg.ffn.iter().enumerate() {
        if *kind != FfnKind::Moe {
            continue;
        }
        let header = LayerHeader::new(
            layer as u32,
            moe.num_experts as u32,
            format.id(),
            d as u32,
            f as u32,
            len as u64,
        );
        let mut w = LayerWriter::create(out, header)?;
        for e in 0..moe.num_experts as u32 {
            let [g, u, dn] = moe
                .names
                .expert(&cfg.names, layer, e)
                .map(|n| ckpt.load(&n).map(waste_kernels::Tensor::into_f32));
            let (rec, _) = quantize_expert([format; 3], d, f, &g?, &u?, &dn?)?;
            w.push(&rec)?;
        }
        index.layers.push(w.finish()?);
    }
    index.save(out)?;
    waste_format::completion::mark_complete(out, "waste-e2e")?;
    Ok(index)
}

/// A node serving in-process; dropping it shuts the node down.
#[derive(Debug)]
pub struct RunningNode {
    pub addr: std::net::SocketAddr,
    pub node: Arc<Node>,
    shutdown: CancellationToken,
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl RunningNode {
    /// Loads `cfg` (its `listen` is ignored: port 0 on loopback) and serves it.
    pub async fn start(cfg: Config) -> Result<Self> {
        let node = Node::load(cfg).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        tokio::spawn(waste_node::serve(
            Arc::clone(&node),
            listener,
            shutdown.clone(),
        ));
        Ok(Self {
            addr,
            node,
            shutdown,
        })
    }

    pub async fn client(&self) -> Result<pb::node_client::NodeClient<Channel>> {
        Ok(pb::node_client::NodeClient::connect(format!("http://{}", self.addr)).await?)
    }

    /// A client that lets the node send at most `window` bytes ahead on a
    /// stream it does not read: a generation it leaves unread stalls
    /// (once the node's own queue is full too) instead of running to its end.
    pub async fn stalling_client(
        &self,
        window: u32,
    ) -> Result<pb::node_client::NodeClient<Channel>> {
        let channel =
            waste_proto::transport::Endpoint::from_shared(format!("http://{}", self.addr))?
                .initial_stream_window_size(Some(window))
                .connect()
                .await?;
        Ok(pb::node_client::NodeClient::new(channel))
    }
}

/// A greedy Generate of `n` tokens after the ids `prompt` that no EOS
/// ends: the tests' request.
pub fn greedy_request(prompt: &[u32], n: u32) -> pb::GenerateRequest {
    pb::GenerateRequest {
        input: Some(pb::generate_request::Input::TokenIds(pb::TokenIds {
            ids: prompt.to_vec(),
        })),
        sampling: Some(pb::SamplingOptions {
            max_tokens: n,
            temperature: Some(0.0),
            ignore_eos: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A local-mode node config for `backbone` and `experts`.
pub fn local_config(backbone: PathBuf, experts: PathBuf) -> Config {
    Config {
        backbone,
        experts: Some(experts),
        expert_mode: ExpertMode::Local,
        ram_budget: Some(2 << 30),
        ctx_size: Some(128),
        ..Config::default()
    }
}

/// Streams a Generate call; returns the token ids and the final statistics.
pub async fn generate(
    client: &mut pb::node_client::NodeClient<Channel>,
    req: pb::GenerateRequest,
) -> Result<(Vec<u32>, String, pb::Stats)> {
    let mut stream = client.generate(req).await?.into_inner();
    let (mut ids, mut text) = (Vec::new(), String::new());
    while let Some(msg) = stream.message().await? {
        match msg.event {
            Some(pb::generate_response::Event::Token(t)) => {
                ids.extend(t.token_ids);
                text.push_str(&t.text);
            }
            Some(pb::generate_response::Event::Stats(s)) => return Ok((ids, text, s)),
            None => {}
        }
    }
    anyhow::bail!("stream ended without statistics")
}

/// An expert store serving `experts` in-process on a loopback port;
/// dropping it shuts the store down.
#[derive(Debug)]
pub struct RunningStore {
    pub addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<waste_store::Result<()>>>,
}

impl Drop for RunningStore {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl RunningStore {
    /// Serves `experts` on a free loopback port.
    pub async fn start(experts: PathBuf) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::on(listener, experts)
    }

    /// Serves `experts` on `listener` (a restart reuses the address).
    pub fn on(listener: tokio::net::TcpListener, experts: PathBuf) -> Result<Self> {
        let cfg = waste_store::Config {
            experts,
            metrics_log_secs: 0,
            ..waste_store::Config::default()
        };
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let task = Some(tokio::spawn(waste_store::run(
            cfg,
            listener,
            shutdown.clone(),
        )));
        Ok(Self {
            addr,
            shutdown,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the store and waits until it has drained.
    pub async fn stop(mut self) -> Result<()> {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.await??;
        }
        Ok(())
    }
}

/// A node config getting experts from the store at `url` in `mode`.
pub fn remote_config(backbone: PathBuf, url: String, mode: ExpertMode) -> Config {
    Config {
        backbone,
        store_addr: Some(url),
        expert_mode: mode,
        ram_budget: Some(2 << 30),
        ctx_size: Some(128),
        ..Config::default()
    }
}

/// A node on a native-expert store of fixture `dir` that takes text: the
/// fixture's weights and config, a byte-level tokenizer with a chat
/// template (the fixtures ship none, and a byte vocabulary fits their
/// 1024 ids), and its experts in f32 exactly as released. The folders live
/// as long as the returned guard.
pub async fn chat_node(dir: &str, token: Option<&str>) -> Result<(RunningNode, tempfile::TempDir)> {
    chat_node_with(dir, |cfg, _| cfg.token = token.map(str::to_string)).await
}

/// [`chat_node`] with its config and `tokenizer_config.json` (which holds
/// the chat template) changed by `edit` first.
pub async fn chat_node_with(
    dir: &str,
    edit: impl FnOnce(&mut Config, &mut serde_json::Value),
) -> Result<(RunningNode, tempfile::TempDir)> {
    let tmp = tempfile::tempdir()?;
    let cfg = text_node_config_with(dir, tmp.path(), edit)?;
    Ok((RunningNode::start(cfg).await?, tmp))
}

/// The config of [`chat_node`]'s node, its backbone and experts folders written under `root`.
pub fn text_node_config(dir: &str, root: &Path) -> Result<Config> {
    text_node_config_with(dir, root, |_, _| {})
}

/// [`text_node_config`] with the config and `tokenizer_config.json` changed by `edit`.
fn text_node_config_with(
    dir: &str,
    root: &Path,
    edit: impl FnOnce(&mut Config, &mut serde_json::Value),
) -> Result<Config> {
    let (backbone, experts) = (root.join("backbone"), root.join("experts"));
    fs_err::create_dir_all(&backbone)?;
    fs_err::create_dir_all(&experts)?;
    let src = crate::fixture(dir);
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::os::unix::fs::symlink(src.join(f), backbone.join(f))?;
    }
    let write =
        |name: &str, v: serde_json::Value| fs_err::write(backbone.join(name), v.to_string());
    write(
        "tokenizer.json",
        waste_store::synth::tokenizer::tokenizer_json(),
    )?;
    let mut tokenizer_config = waste_store::synth::tokenizer::tokenizer_config_json();
    write_experts(&Checkpoint::open(&src)?, &experts, Format::F32)?;
    let mut cfg = local_config(backbone.clone(), experts);
    cfg.ctx_size = Some(512);
    edit(&mut cfg, &mut tokenizer_config);
    write("tokenizer_config.json", tokenizer_config)?;
    Ok(cfg)
}
