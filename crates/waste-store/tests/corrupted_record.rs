//! A record whose bytes no longer match its checksum is DATA_LOSS, naming
//! the layer and expert, for FetchExperts and ComputeExperts alike; the
//! other records are still served. A FetchExperts client that checks
//! records itself gets them as stored and catches the corruption.

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
        client_verifies: false,
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

/// A client that checks records itself (`client_verifies`) gets the
/// corrupted record as stored, unchecked by the store, and its own check
/// fails it naming the layer, expert and store-relative file; its intact
/// neighbour passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_verifies_gets_the_record_as_stored_and_catches_the_corruption() {
    use waste_format::io::Reassembler;

    let (_tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);
    let record_len = waste_format::ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(3, 5)
        .unwrap()
        .len as u64;
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let req = FetchExpertsRequest {
        experts: [4, 5]
            .iter()
            .map(|&expert| ExpertId { layer: 3, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
        client_verifies: true,
    };
    let mut stream = client.fetch_experts(req).await.unwrap().into_inner();
    let mut asm = Reassembler::new([(3, 4, record_len), (3, 5, record_len)]);
    let (mut caught, mut whole) = (Vec::new(), Vec::new());
    while let Some(c) = stream.message().await.expect("no DATA_LOSS from the store") {
        match common::push_chunk(&mut asm, &c) {
            Ok(Some(r)) => whole.push(r.expert),
            Ok(None) => {}
            Err(e) => caught.push(e.to_string()),
        }
    }
    assert_eq!(whole, [5]);
    assert_eq!(caught.len(), 1, "{caught:?}");
    assert!(
        caught[0].contains("experts/layer-003") && caught[0].contains("layer 3 expert 4"),
        "{}",
        caught[0]
    );
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
        .fetch(
            &[(3, 4)],
            waste_format::io::Priority::Demand,
            waste_format::io::Check::Here,
        )
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
