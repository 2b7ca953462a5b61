//! Past `max_concurrent_requests` a call is refused with RESOURCE_EXHAUSTED
//! carrying `retry-after`, and served again once the earlier call is done.

mod common;

use waste_proto::Code;
use waste_proto::store::v1::{ExpertId, FetchExpertsRequest, InfoRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_resource_exhausted_with_retry_after() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.limits.max_concurrent_requests = 1;
    cfg.limits.max_chunk_bytes = 1024;
    let server = common::start(cfg).await;
    let mut client = server.slow_client().await;
    let all = || FetchExpertsRequest {
        experts: (0..common::N_EXPERTS)
            .map(|expert| ExpertId { layer: 1, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
        client_verifies: false,
    };
    // Holds the only slot: the stream cannot finish before it is read.
    let mut held = client.fetch_experts(all()).await.unwrap().into_inner();
    held.message().await.unwrap().unwrap();

    let status = client.fetch_experts(all()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.metadata().get("retry-after").unwrap(), "1");
    client.info(InfoRequest {}).await.unwrap(); // Info is never refused.

    while held.message().await.unwrap().is_some() {}
    drop(held);
    // The slot is released when the stream ends; a retry succeeds.
    let mut again = loop {
        match client.fetch_experts(all()).await {
            Ok(s) => break s.into_inner(),
            Err(s) if s.code() == Code::ResourceExhausted => tokio::task::yield_now().await,
            Err(s) => panic!("{s:?}"),
        }
    };
    while again.message().await.unwrap().is_some() {}
    server.stop().await;
}
