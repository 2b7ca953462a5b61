//! FetchExperts without payload copies (`waste_proto::fetch`) speaks plain
//! gRPC: the daemon's route and the generated service answer both tonic's
//! generated client and the zero-copy client with the same records (equal
//! to the layer files) and the same statuses.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use waste_format::ExpertsDir;
use waste_format::experts::ExpertActivation;
use waste_format::io::Reassembler;
use waste_kernels::Format;
use waste_proto::Code;
use waste_proto::fetch;
use waste_proto::store::v1::ExpertChunk;
use waste_proto::store::v1::expert_store_server::ExpertStoreServer;
use waste_proto::transport::{Channel, Endpoint, Server};
use waste_store::service::ExpertStoreService;
use waste_store::{Config, Store};

#[derive(Debug, Clone, Copy)]
enum Client {
    Tonic,
    ZeroCopy,
}

/// Every chunk of one call, or the status that ended it.
async fn fetch_all(
    channel: Channel,
    client: Client,
    ids: &[(u32, u32)],
) -> Result<Vec<ExpertChunk>, waste_proto::Status> {
    let mut out = Vec::new();
    match client {
        Client::Tonic => {
            let mut c =
                waste_proto::store::v1::expert_store_client::ExpertStoreClient::new(channel)
                    .max_decoding_message_size(64 << 20);
            let mut stream = c
                .fetch_experts(common::fetch_request(ids, false))
                .await?
                .into_inner();
            while let Some(m) = stream.message().await? {
                out.push(m);
            }
        }
        Client::ZeroCopy => {
            let mut channel = channel;
            let mut stream =
                fetch::fetch_experts(&mut channel, &common::fetch_request(ids, false), 64 << 20)
                    .await?;
            while let Some(c) = stream.next().await? {
                out.push(ExpertChunk {
                    layer: c.head.layer,
                    expert: c.head.expert,
                    offset: c.head.offset,
                    total_len: c.head.total_len,
                    checksum: c.head.checksum,
                    data: c.data.concat().into(),
                });
            }
        }
    }
    Ok(out)
}

/// Serves `cfg` with the generated service alone (tonic's codec both ways).
async fn start_generated(cfg: &Config) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let store = Arc::new(Store::open(cfg).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service =
        ExpertStoreServer::new(ExpertStoreService::new(store)).max_encoding_message_size(64 << 20);
    let handle = tokio::spawn(async move {
        Server::builder()
            .max_frame_size(Some(waste_store::MAX_FRAME_SIZE))
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (addr, handle)
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .max_frame_size(Some(waste_store::MAX_FRAME_SIZE))
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_read_the_records_from_both_servers() {
    let (_tmp, mut cfg) = common::tiny();
    // Chunks of odd sizes that split records, frames and hash blocks.
    cfg.limits.max_chunk_bytes = 3001;
    let dir = ExpertsDir::open(&cfg.experts).unwrap();
    let daemon = common::start(cfg.clone()).await;
    let (generated, handle) = start_generated(&cfg).await;
    let ids = [(3u32, 5u32), (1, 0), (3, 0), (1, 5), (1, 2)];
    let record_len: HashMap<u32, u64> = common::LAYERS
        .iter()
        .map(|&l| (l, dir.locate(l, 0).unwrap().len as u64))
        .collect();
    for (server, addr) in [("daemon", daemon.addr), ("generated", generated)] {
        for client in [Client::Tonic, Client::ZeroCopy] {
            let chunks = fetch_all(channel(addr).await, client, &ids).await.unwrap();
            let mut asm = Reassembler::new(ids.iter().map(|&(l, e)| (l, e, record_len[&l])));
            let mut complete = HashMap::new();
            for c in &chunks {
                assert!(!c.data.is_empty() && c.data.len() <= 3001);
                if let Some(r) = common::push_chunk(&mut asm, c).unwrap() {
                    complete.insert((r.layer, r.expert), r.bytes.as_ref().to_vec());
                }
            }
            asm.finish().unwrap();
            assert_eq!(
                complete.len(),
                ids.len(),
                "{server} server, {client:?} client"
            );
            let mut buf = Vec::new();
            for (&(l, e), bytes) in &complete {
                dir.read_record(l, e, &mut buf).unwrap();
                assert_eq!(bytes, &buf, "{server}, {client:?}: layer {l} expert {e}");
            }
        }
    }
    handle.abort();
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_get_the_same_statuses_from_both_servers() {
    let (_tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);
    let daemon = common::start(cfg.clone()).await;
    let (generated, handle) = start_generated(&cfg).await;
    // (ids asked for, the status code, what its message says)
    type Case = (&'static [(u32, u32)], Code, &'static str);
    let cases: [Case; 4] = [
        (&[(3, 4)], Code::DataLoss, "layer 3 expert 4"),
        (&[(3, 99)], Code::InvalidArgument, "out of range"),
        (&[(2, 0)], Code::InvalidArgument, "layer 2"),
        (&[], Code::InvalidArgument, "no experts"),
    ];
    for (server, addr) in [("daemon", daemon.addr), ("generated", generated)] {
        for client in [Client::Tonic, Client::ZeroCopy] {
            for (ids, code, says) in cases {
                let Err(status) = fetch_all(channel(addr).await, client, ids).await else {
                    panic!("{server}, {client:?}: {ids:?} was served");
                };
                assert_eq!(
                    status.code(),
                    code,
                    "{server}, {client:?}, {ids:?}: {status}"
                );
                assert!(
                    status.message().contains(says),
                    "{server}, {client:?}: {}",
                    status.message()
                );
            }
        }
    }
    // A chunk longer than the client allows is refused before it is buffered.
    let mut ch = channel(daemon.addr).await;
    let mut stream = fetch::fetch_experts(&mut ch, &common::fetch_request(&[(1, 0)], false), 100)
        .await
        .unwrap();
    assert_eq!(stream.next().await.unwrap_err().code(), Code::OutOfRange);
    handle.abort();
    daemon.stop().await;
}

/// Data pieces (DATA frames) each chunk of `ids` arrives in, over `endpoint`.
async fn pieces_per_chunk(endpoint: Endpoint, ids: &[(u32, u32)]) -> Vec<(usize, usize)> {
    let mut channel = endpoint.connect().await.unwrap();
    let mut stream =
        fetch::fetch_experts(&mut channel, &common::fetch_request(ids, false), 64 << 20)
            .await
            .unwrap();
    let mut out = Vec::new();
    while let Some(c) = stream.next().await.unwrap() {
        out.push((
            c.data.len(),
            c.data.iter().map(waste_proto::Bytes::len).sum(),
        ));
    }
    out
}

/// A client connected through `fetch::client_endpoint`, as the node and
/// the benchmark are, gets each chunk in one DATA frame; HTTP/2's default
/// 16 KiB frames would cut it into several (what the node's client did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_endpoint_gets_chunks_in_whole_frames() {
    // f32 records: 3 x 64 x 96 x 4 = 72 KiB, more than four default frames.
    let (_tmp, cfg) = common::tiny_with([Format::F32; 3], ExpertActivation::Silu);
    let daemon = common::start(cfg).await;
    let ids = [(1u32, 0u32), (3, 5)];
    let endpoint = || Endpoint::from_shared(daemon.url()).unwrap();

    let tuned = pieces_per_chunk(fetch::client_endpoint(endpoint()), &ids).await;
    assert_eq!(tuned.len(), ids.len(), "one chunk per record: {tuned:?}");
    for &(pieces, bytes) in &tuned {
        assert!(bytes > 4 * 16 * 1024, "record of {bytes} bytes");
        assert_eq!(pieces, 1, "{tuned:?}");
    }
    // The check can fail: the same chunks over a default endpoint.
    let default = pieces_per_chunk(endpoint(), &ids).await;
    assert!(default.iter().all(|&(pieces, _)| pieces > 4), "{default:?}");
    daemon.stop().await;
}
