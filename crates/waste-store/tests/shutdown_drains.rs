//! Cancelling the shutdown token lets an in-flight FetchExperts finish every
//! record, refuses new work, and then `run` returns Ok.

mod common;

use waste_proto::store::v1::{ExpertId, FetchExpertsRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_an_in_flight_fetch() {
    let (_tmp, mut cfg) = common::tiny();
    // Small chunks: the stream stays open until the client has read them all.
    cfg.limits.max_chunk_bytes = 1024;
    let server = common::start(cfg).await;
    let mut client = server.slow_client().await;
    let ids: Vec<ExpertId> = common::LAYERS
        .iter()
        .flat_map(|&layer| (0..common::N_EXPERTS).map(move |expert| ExpertId { layer, expert }))
        .collect();
    let n_ids = ids.len();
    let mut stream = client
        .fetch_experts(FetchExpertsRequest {
            experts: ids,
            priority: 0,
            expect_experts_index_sha256: String::new(),
            client_verifies: false,
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let mut bytes = first.data.len() as u64;
    let mut total = first.total_len;

    server.shutdown.cancel();
    // Let the server see the cancellation before we read on.
    tokio::task::yield_now().await;
    let mut complete = u64::from(first.offset + first.data.len() as u64 == first.total_len);
    while let Some(c) = stream.message().await.unwrap() {
        bytes += c.data.len() as u64;
        if c.offset == 0 {
            total += c.total_len;
        }
        complete += u64::from(c.offset + c.data.len() as u64 == c.total_len);
    }
    assert_eq!(complete, n_ids as u64, "every record finished");
    assert_eq!(bytes, total);
    server.handle.await.unwrap().unwrap();
}
