//! The bulk channel (proto `BulkFetchRequest`): on the gRPC port of a
//! plain-text store, the same records as FetchExperts, byte for byte as
//! stored, with FetchExperts's statuses, the same bearer check, and
//! malformed requests refused.

mod common;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use waste_format::ExpertsDir;
use waste_format::io::Reassembler;
use waste_proto::bulk::{BulkClient, BulkFetch, MAGIC, MAX_REPLY_FRAME, read_frame, write_frame};
use waste_proto::store::v1::bulk_fetch_reply::Reply;
use waste_proto::store::v1::{BulkFetchReply, BulkFetchRequest, InfoRequest};
use waste_proto::{Code, Status};

/// Either side's error while a record is read: the store's status or the
/// client's check.
type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Runs `f` on a thread that may block: the bulk client blocks.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Fetches `ids` on the bulk channel and puts each record together as the
/// node does: `(layer, expert, bytes)` in arrival order, or the first error.
fn fetch(
    client: &BulkClient,
    record_len: u64,
    ids: &[(u32, u32)],
) -> Result<Vec<(u32, u32, Vec<u8>)>, String> {
    let status = |s: Status| format!("{:?}: {}", s.code(), s.message());
    let mut asm = Reassembler::new(ids.iter().map(|&(l, e)| (l, e, record_len)));
    let mut reply = client
        .fetch(common::fetch_request(ids, true))
        .map_err(status)?;
    let mut out = Vec::new();
    while let Some(r) = reply.next_record().map_err(status)? {
        let rec = asm
            .read_whole(r.layer, r.expert, r.total_len, r.checksum, |block| {
                reply
                    .read_exact(block)
                    .map_err(|s| Failure::from(status(s)))
            })
            .map_err(|e| e.to_string())?;
        out.push((rec.layer, rec.expert, rec.bytes.as_ref().to_vec()));
    }
    asm.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// The record as stored, read from the store's files here.
fn stored(dir: &ExpertsDir, layer: u32, expert: u32) -> Vec<u8> {
    let loc = dir.locate(layer, expert).unwrap();
    let file = fs_err::read(&*loc.path).unwrap();
    file[loc.offset as usize..loc.offset as usize + loc.len].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bulk_channel_serves_the_stored_records_beside_grpc() {
    let (_tmp, cfg) = common::tiny();
    let dir = ExpertsDir::open(&cfg.experts).unwrap();
    let server = common::start(cfg).await;
    let info = server
        .client()
        .await
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.bulk_fetch,
        "a plain-text store offers the bulk channel"
    );
    let record_len = info.layers[0].record_bytes;
    let ids: Vec<(u32, u32)> = (0..common::N_EXPERTS)
        .map(|e| (1, e))
        .chain([(3, 5), (3, 0)])
        .collect();
    // Twice: the second request goes on the connection the first left open.
    let (url, asked) = (server.url(), ids.clone());
    let rounds = blocking(move || {
        let client = BulkClient::new(&url, None).unwrap();
        [(); 2].map(|()| fetch(&client, record_len, &asked).unwrap())
    })
    .await;
    for (round, got) in rounds.into_iter().enumerate() {
        assert_eq!(got.len(), ids.len(), "round {round}");
        for (layer, expert, bytes) in got {
            assert!(
                bytes == stored(&dir, layer, expert),
                "round {round}: layer {layer} expert {expert} differs from the stored record"
            );
        }
    }
    // gRPC on the same port, after and beside it.
    let mut grpc = server.client().await;
    let mut stream = grpc
        .fetch_experts(common::fetch_request(&[(3, 1)], true))
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while let Some(c) = stream.message().await.unwrap() {
        n += c.data.len() as u64;
    }
    assert_eq!(n, record_len);
    server.stop().await;
}

/// The status a reply ends with before its first record (OK if it has one).
fn first_code(r: Result<BulkFetch<'_>, Status>) -> Code {
    match r {
        Err(s) => s.code(),
        Ok(mut reply) => reply
            .next_record()
            .map(|_| Code::Ok)
            .unwrap_or_else(|s| s.code()),
    }
}

/// Bad ids and a wrong identity end a request with FetchExperts's codes
/// before any record; the client can go on with the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_requests_fail_with_the_fetch_statuses() {
    let (_tmp, cfg) = common::tiny();
    let server = common::start(cfg).await;
    let url = server.url();
    blocking(move || {
        let client = BulkClient::new(&url, None).unwrap();
        for bad in [
            vec![(1, common::N_EXPERTS)],
            vec![(2, 0)],
            vec![(1, 0), (1, 0)],
            vec![],
        ] {
            let got = first_code(client.fetch(common::fetch_request(&bad, true)));
            assert_eq!(got, Code::InvalidArgument, "{bad:?}");
        }
        let mut wrong = common::fetch_request(&[(1, 0)], true);
        wrong.expect_experts_index_sha256 = "0".repeat(64);
        assert_eq!(first_code(client.fetch(wrong)), Code::FailedPrecondition);
        let got = fetch(&client, 0, &[(1, 0)]).unwrap_err();
        assert!(
            got.contains("total_len"),
            "a length other than announced: {got}"
        );
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bulk_channel_requires_the_token_when_set() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.token = Some("s3cret".into());
    let server = common::start(cfg).await;
    let url = server.url();
    blocking(move || {
        for token in [None, Some("nope"), Some("s3cret2"), Some("s3cre")] {
            let client = BulkClient::new(&url, token).unwrap();
            let status = match client.fetch(common::fetch_request(&[(1, 0)], true)) {
                Err(s) => s,
                Ok(mut r) => r.next_record().unwrap_err(),
            };
            assert_eq!(status.code(), Code::Unauthenticated, "{token:?}");
        }
        let client = BulkClient::new(&url, Some("s3cret")).unwrap();
        let mut reply = client
            .fetch(common::fetch_request(&[(1, 0)], true))
            .unwrap();
        assert!(reply.next_record().unwrap().is_some());
    })
    .await;
    server.stop().await;
}

/// Records go out as read, so a corrupted one reaches the client, whose
/// check fails it naming the layer and expert; its neighbour passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_record_fails_the_clients_check() {
    let (_tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);
    let record_len = ExpertsDir::open(&cfg.experts).unwrap().index().layers[0].record_len;
    let server = common::start(cfg).await;
    let url = server.url();
    blocking(move || {
        let client = BulkClient::new(&url, None).unwrap();
        let err = fetch(&client, record_len, &[(3, 4)]).unwrap_err();
        assert!(
            err.contains("checksum") && err.contains("layer 3") && err.contains("expert 4"),
            "{err}"
        );
        assert_eq!(fetch(&client, record_len, &[(3, 3)]).unwrap().len(), 1);
    })
    .await;
    server.stop().await;
}

/// Frames over the store's limit (its message limit, at most 1 MiB) or that do not decode end the connection
/// with OUT_OF_RANGE and INVALID_ARGUMENT; a connection that opens with
/// neither HTTP/2 nor the whole magic is closed without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bulk_frames_are_refused() {
    let (_tmp, cfg) = common::tiny();
    // A request frame is read whole before its token is checked: at most 1 MiB.
    let max = cfg.limits.max_message_bytes.min(1 << 20);
    let server = common::start(cfg).await;
    let end_of = |raw: Vec<u8>| {
        let addr = server.addr;
        async move {
            let mut conn = TcpStream::connect(addr).await.unwrap();
            conn.write_all(&raw).await.unwrap();
            let reply: Option<BulkFetchReply> =
                read_frame(&mut conn, MAX_REPLY_FRAME).await.unwrap();
            let Some(Reply::End(s)) = reply.and_then(|r| r.reply) else {
                panic!("no end frame");
            };
            let mut rest = Vec::new();
            conn.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "the store closes the connection");
            Code::from_i32(s.code)
        }
    };
    let mut too_long = MAGIC.to_vec();
    too_long.extend_from_slice(&(max + 1).to_le_bytes());
    assert_eq!(end_of(too_long).await, Code::OutOfRange);
    let mut garbage = MAGIC.to_vec();
    garbage.extend_from_slice(&3u32.to_le_bytes());
    garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
    assert_eq!(end_of(garbage).await, Code::InvalidArgument);

    let mut conn = TcpStream::connect(server.addr).await.unwrap();
    conn.write_all(b"WASTEXX1").await.unwrap();
    write_frame(&mut conn, &BulkFetchRequest::default())
        .await
        .unwrap();
    // Closed with our frame unread: an end of stream or a reset.
    let mut rest = Vec::new();
    match conn.read_to_end(&mut rest).await {
        Ok(_) => assert!(rest.is_empty(), "a wrong magic gets no answer"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
    server.stop().await;
}

/// The probe a node makes at connect: the daemon answers it; a server of
/// gRPC alone (as behind a proxy that passes only HTTP/2) fails it, so the
/// node falls back to FetchExperts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_tells_a_bulk_channel_from_grpc_alone() {
    use std::sync::Arc;

    use tokio_stream::wrappers::TcpListenerStream;
    use waste_proto::store::v1::expert_store_server::ExpertStoreServer;
    use waste_proto::transport::Server;
    use waste_store::service::ExpertStoreService;

    let (_tmp, cfg) = common::tiny();
    let store = Arc::new(waste_store::Store::open(&cfg).unwrap());
    let daemon = common::start(cfg).await;
    let url = daemon.url();
    blocking(move || BulkClient::new(&url, None).unwrap().probe())
        .await
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let grpc_alone = tokio::spawn(
        Server::builder()
            .add_service(ExpertStoreServer::new(ExpertStoreService::new(store)))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let probe = blocking(move || {
        BulkClient::new(&format!("http://{addr}"), None)
            .unwrap()
            .probe()
    })
    .await;
    assert!(probe.is_err(), "HTTP/2 alone passed the probe");
    grpc_alone.abort();
    daemon.stop().await;
}

/// Garbage on the shared port (random bytes; the magic followed by random
/// frames, lengths and cut-off writes) leaves the store up: gRPC and the
/// bulk channel both still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_port_leaves_both_channels_up() {
    let (_tmp, cfg) = common::tiny();
    let dir = ExpertsDir::open(&cfg.experts).unwrap();
    let record_len = dir.index().layers[0].record_len;
    let server = common::start(cfg).await;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..300 {
        let mut bytes: Vec<u8> = match i % 3 {
            0 => Vec::new(),
            1 => MAGIC.to_vec(),
            _ => b"W".to_vec(),
        };
        let len = (next() % 200) as usize;
        bytes.extend((0..len).map(|_| next() as u8));
        if i % 5 == 0 {
            // A frame whose length claims more than follows.
            bytes.extend_from_slice(&((next() % (1 << 20)) as u32).to_le_bytes());
        }
        let mut conn = TcpStream::connect(server.addr).await.unwrap();
        let _ = conn.write_all(&bytes).await;
        if i % 2 == 0 {
            let _ = conn.shutdown().await;
            let mut sink = Vec::new();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(2),
                conn.read_to_end(&mut sink),
            )
            .await;
        }
    }
    let url = server.url();
    let got = blocking(move || fetch(&BulkClient::new(&url, None).unwrap(), record_len, &[(1, 2)]))
        .await
        .unwrap();
    assert!(got[0].2 == stored(&dir, 1, 2));
    server.client().await.info(InfoRequest {}).await.unwrap();
    server.stop().await;
}

/// A bulk request in flight when the store is told to stop is answered
/// whole, and the connection it leaves open (idle, kept by the client)
/// does not keep the store from returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_a_bulk_request_in_flight() {
    let (_tmp, cfg) = common::tiny();
    let record_len = ExpertsDir::open(&cfg.experts).unwrap().index().layers[0].record_len;
    let server = common::start(cfg).await;
    let ids: Vec<(u32, u32)> = common::LAYERS
        .iter()
        .flat_map(|&l| (0..common::N_EXPERTS).map(move |e| (l, e)))
        .collect();
    let (url, shutdown, n) = (server.url(), server.shutdown.clone(), ids.len());
    let got = blocking(move || {
        let client = BulkClient::new(&url, None).unwrap();
        let mut asm = Reassembler::new(ids.iter().map(|&(l, e)| (l, e, record_len)));
        let mut reply = client.fetch(common::fetch_request(&ids, true)).unwrap();
        let mut got = 0;
        while let Some(r) = reply.next_record().unwrap() {
            if got == 0 {
                shutdown.cancel();
            }
            asm.read_whole(r.layer, r.expert, r.total_len, r.checksum, |block| {
                reply.read_exact(block).map_err(Failure::from)
            })
            .unwrap();
            got += 1;
        }
        asm.finish().unwrap();
        // Kept open, idle, while the store stops.
        drop(reply);
        (got, client)
    })
    .await;
    assert_eq!(got.0, n);
    server.handle.await.unwrap().unwrap();
}
