//! The store goes away in the middle of a generation and comes back on the
//! same address: the node retries (and counts it), and the generation
//! finishes with the same tokens as an uninterrupted one.

use anyhow::Result;
use waste_format::Checkpoint;
use waste_kernels::Format;
use waste_node::ExpertMode;
use waste_proto::node::v1 as pb;

use waste_e2e::harness::{
    RunningNode, RunningStore, generate, greedy_request as request, remote_config, write_experts,
};
use waste_e2e::{Goldens, fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_retries_through_a_store_restart() -> Result<()> {
    let dir = "qwen3_moe_tiny";
    let tmp = tempfile::tempdir()?;
    write_experts(&Checkpoint::open(fixture(dir))?, tmp.path(), Format::Q8)?;
    let prompt = Goldens::open(dir)?.ids("input_ids/len7")?;
    let n = 40;

    let store = RunningStore::start(tmp.path().to_path_buf()).await?;
    let addr = store.addr;
    let mut cfg = remote_config(fixture(dir), store.url(), ExpertMode::Fetch);
    cfg.expert_cache = Some(0); // every step goes to the store
    let node = RunningNode::start(cfg).await?;
    let mut client = node.client().await?;
    let (want, _, _) = generate(&mut client, request(&prompt, n)).await?;

    // Paced: read a few tokens, take the store down, bring it back.
    let mut stream = client.generate(request(&prompt, n)).await?.into_inner();
    let mut got = Vec::new();
    while got.len() < 5 {
        if let Some(pb::generate_response::Event::Token(t)) =
            stream.message().await?.and_then(|m| m.event)
        {
            got.extend(t.token_ids);
        }
    }
    store.stop().await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let _store = RunningStore::on(listener, tmp.path().to_path_buf())?;
    let stats = loop {
        match stream.message().await?.and_then(|m| m.event) {
            Some(pb::generate_response::Event::Token(t)) => got.extend(t.token_ids),
            Some(pb::generate_response::Event::Stats(s)) => break s,
            None => anyhow::bail!("stream ended without statistics"),
        }
    };
    assert_eq!(got, want, "the interrupted generation differs");
    assert_eq!(stats.generated_tokens, n);
    let retries = node
        .node
        .store
        .as_ref()
        .expect("fetch mode has a store")
        .retries();
    assert!(retries >= 1, "the node did not retry ({retries})");
    Ok(())
}
