//! A record whose bytes no longer match its checksum is DATA_LOSS, naming
//! the layer and expert, for FetchExperts and ComputeExperts alike; the
//! other records are still served.

mod common;

use waste_proto::Code;
use waste_proto::store::v1::{ComputeExpertsRequest, ExpertId, FetchExpertsRequest, Route};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_is_data_loss_naming_layer_and_expert() {
    let (_tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);

    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let ids = |v: &[u32]| FetchExpertsRequest {
        experts: v
            .iter()
            .map(|&expert| ExpertId { layer: 3, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
    };
    let mut stream = client.fetch_experts(ids(&[4])).await.unwrap().into_inner();
    let status = loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("corrupted record served"),
            Err(s) => break s,
        }
    };
    assert_eq!(status.code(), Code::DataLoss);
    assert!(
        status.message().contains("layer 3 expert 4"),
        "{}",
        status.message()
    );

    let req = ComputeExpertsRequest {
        layer: 3,
        n_tokens: 1,
        d_model: common::D_MODEL as u32,
        activations: vec![0u8; 4 * common::D_MODEL].into(),
        routes: vec![Route {
            token: 0,
            expert: 4,
            weight: 1.0,
        }],
        stream: 0,
        expect_experts_index_sha256: String::new(),
    };
    let status = client.compute_experts(req).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss);
    assert!(
        status.message().contains("layer 3 expert 4"),
        "{}",
        status.message()
    );

    // The neighbours are intact and still served.
    let mut stream = client
        .fetch_experts(ids(&[3, 5]))
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}
    server.stop().await;
}

/// The store counts each corrupt record it reads, and the status a client
/// gets names the layer, expert and store folder but not where the server
/// keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_records_are_counted_and_no_server_path_reaches_the_client() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use tokio_stream::StreamExt;

    let (tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);
    let store = Arc::new(waste_store::Store::open(&cfg).unwrap());
    let mut stream = store
        .fetch(&[(3, 4)], waste_format::io::Priority::Demand)
        .unwrap();
    let e = loop {
        match stream.next().await {
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => panic!("corrupted record served"),
        }
    };
    drop(stream);
    let status = waste_proto::Status::from(e);
    assert_eq!(status.code(), Code::DataLoss);
    let msg = status.message();
    assert!(msg.contains("layer 3 expert 4"), "{msg}");
    assert!(msg.contains("layer-003.experts"), "{msg}");
    assert!(!msg.contains(tmp.path().to_str().unwrap()), "{msg}");
    assert_eq!(store.metrics().corrupt_records.load(Ordering::Relaxed), 1);
}
