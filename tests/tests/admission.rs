//! Admission control: with every generation slot taken and the queue full,
//! one more request is refused at once, RESOURCE_EXHAUSTED with
//! `retry-after` on gRPC and 429 with `Retry-After` on HTTP, and counted in
//! `/metrics` by reason, while the admitted ones keep their places.

use anyhow::Result;
use serde_json::json;
use waste_e2e::harness::chat_node_with;
use waste_e2e::http;
use waste_proto::Code;
use waste_proto::node::v1 as pb;

/// A generation of `n` tokens that no EOS ends.
fn long(n: u32) -> pb::GenerateRequest {
    waste_e2e::harness::greedy_request(&[1, 2, 3], n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_beyond_the_queue_is_refused_while_one_runs() -> Result<()> {
    let (node, _dir) = chat_node_with("mixtral_tiny", |cfg, _| {
        cfg.max_concurrent = 1;
        cfg.max_queue = 1;
    })
    .await?;
    // The running generation asks for the whole context and is left unread
    // on a client with a 1 KiB window: it stalls once the node's channel and
    // the send window are full, so it holds its slot for the whole test.
    let longest = 512 - 3 - 1;
    let mut running = node
        .stalling_client(1024)
        .await?
        .generate(long(longest))
        .await?
        .into_inner();
    let _ = running.message().await?;
    // The queued one is admitted (its stream opens) but waits for the slot.
    let queued = node
        .stalling_client(1024)
        .await?
        .generate(long(longest))
        .await?
        .into_inner();

    let mut client = node.client().await?;
    let err = client.generate(long(1)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    let retry = err
        .metadata()
        .get("retry-after")
        .and_then(|v| v.to_str().ok());
    assert_eq!(retry, Some("1"), "{:?}", err.metadata());

    let body = json!({"prompt": [1, 2, 3], "max_tokens": 1});
    let reply = http::post(node.addr, "/v1/completions", &body).await?;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("1"));
    let e = &reply.json()?["error"];
    assert_eq!(e["code"], "queue_full", "{e}");

    let metrics = http::get(node.addr, "/metrics").await?.body;
    assert!(
        metrics
            .lines()
            .any(|l| l == "waste_node_requests_rejected_total{reason=\"queue_full\"} 2"),
        "{metrics}"
    );
    // Cheap requests are not generations: they are never queued.
    client.info(pb::InfoRequest {}).await?;
    drop((running, queued));
    Ok(())
}
