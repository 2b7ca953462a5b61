//! FetchExperts returns every requested record byte-identical to the layer
//! files, in chunks no larger than the limit, each tagged with its layer,
//! expert, offset, total length and checksum; the client-side reassembler of
//! waste-format puts them back together. Info describes the store.

mod common;

use std::collections::HashMap;

use waste_format::ExpertsDir;
use waste_format::io::Reassembler;
use waste_proto::store::v1::{ExpertId, FetchExpertsRequest, FetchPriority, InfoRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_arrive_byte_identical_in_tagged_chunks() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.limits.max_chunk_bytes = 4096;
    let dir = ExpertsDir::open(&cfg.experts).unwrap();
    let server = common::start(cfg).await;
    let mut client = server.client().await;

    let info = client.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.architecture, "test_moe");
    assert_eq!(info.expert_format, "q8");
    assert_eq!(info.layers.len(), 2);
    assert_eq!(info.max_chunk_bytes, 4096);
    assert_eq!(info.manifest_hash.len(), 64);
    let record_len: HashMap<u32, u64> = info
        .layers
        .iter()
        .map(|l| (l.layer, l.record_bytes))
        .collect();
    assert!(record_len[&1] > 3 * 4096, "records span several chunks");

    let ids = [(3u32, 5u32), (1, 0), (3, 0), (1, 5), (1, 2)];
    for priority in [FetchPriority::Demand, FetchPriority::Prefetch] {
        let req = FetchExpertsRequest {
            experts: ids
                .iter()
                .map(|&(layer, expert)| ExpertId { layer, expert })
                .collect(),
            priority: priority.into(),
            expect_experts_index_sha256: String::new(),
            client_verifies: false,
        };
        let mut stream = client.fetch_experts(req).await.unwrap().into_inner();
        let mut asm = Reassembler::new(ids.iter().map(|&(l, e)| (l, e, record_len[&l])));
        let mut complete = HashMap::new();
        while let Some(c) = stream.message().await.unwrap() {
            assert!(!c.data.is_empty() && c.data.len() <= 4096);
            let loc = dir.locate(c.layer, c.expert).unwrap();
            assert_eq!(c.total_len, loc.len as u64);
            assert_eq!(c.checksum, loc.checksum);
            if let Some(r) = common::push_chunk(&mut asm, &c).unwrap() {
                complete.insert((r.layer, r.expert), r.bytes.as_ref().to_vec());
            }
        }
        asm.finish().unwrap();
        assert_eq!(complete.len(), ids.len());
        let mut buf = Vec::new();
        for (&(l, e), bytes) in &complete {
            dir.read_record(l, e, &mut buf).unwrap();
            assert_eq!(bytes, &buf, "layer {l} expert {e}");
        }
    }
    server.stop().await;
}
