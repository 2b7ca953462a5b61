//! 10,000 random requests (valid, malformed, and undecodable garbage bytes
//! on every method path, some streams abandoned after the first chunk)
//! leave the store up and answering, with this process's RSS after 10,000
//! requests at most 10 % above its RSS after 1,000.

mod common;

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use waste_proto::Status;
use waste_proto::store::v1::expert_store_client::ExpertStoreClient;
use waste_proto::store::v1::{
    ComputeExpertsRequest, ExpertId, FetchExpertsRequest, InfoRequest, PrefetchExpertsRequest,
    Route,
};
use waste_proto::transport::Channel;

/// Sends and receives raw message bytes, to put garbage on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Mostly a layer with experts (1 or 3), sometimes not.
    fn layer(&mut self) -> u32 {
        [1, 3, 1, 3, 1, 3, 0, 2, 4, 1 << 20][self.below(10) as usize]
    }
    /// Mostly in range (6 experts), sometimes not.
    fn expert(&mut self) -> u32 {
        [0, 1, 2, 3, 4, 5, 0, 5, 6, u32::MAX][self.below(10) as usize]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const PATHS: [&str; 4] = [
    "/waste.store.v1.ExpertStore/FetchExperts",
    "/waste.store.v1.ExpertStore/ComputeExperts",
    "/waste.store.v1.ExpertStore/Info",
    "/waste.store.v1.ExpertStore/Nope",
];

async fn one_request(
    rng: &mut Rng,
    client: &mut ExpertStoreClient<Channel>,
    raw: &mut tonic::client::Grpc<Channel>,
) {
    match rng.below(10) {
        0..=3 => {
            let n = match rng.below(4) {
                0 => rng.below(300),
                _ => rng.below(6),
            };
            let experts = (0..n)
                .map(|_| ExpertId {
                    layer: rng.below(5) as u32,
                    expert: rng.below(8) as u32,
                })
                .collect();
            // A third of the id lists go out as a guess (PrefetchExperts).
            if rng.below(3) == 0 {
                let _ = client
                    .prefetch_experts(PrefetchExpertsRequest {
                        experts,
                        stream: rng.below(4),
                        expect_experts_index_sha256: String::new(),
                    })
                    .await;
                return;
            }
            let req = FetchExpertsRequest {
                experts,
                priority: rng.below(4) as i32,
                expect_experts_index_sha256: String::new(),
                client_verifies: rng.below(2) == 1,
            };
            if let Ok(resp) = client.fetch_experts(req).await {
                let mut s = resp.into_inner();
                let abandon = rng.below(4) == 0;
                while let Ok(Some(_)) = s.message().await {
                    if abandon {
                        break;
                    }
                }
            }
        }
        4..=6 => {
            let n_tokens = rng.below(5) as u32;
            let d_model = [64, 63, 0, 65, 64, 64][rng.below(6) as usize];
            let floats = if rng.below(4) == 0 {
                rng.below(400) as usize
            } else {
                (n_tokens * d_model) as usize
            };
            let routes = (0..rng.below(12))
                .map(|_| Route {
                    token: rng.below(u64::from(n_tokens) + 1) as u32,
                    expert: rng.expert(),
                    weight: [0.5, -1.0, f32::NAN, 2.0, 0.25, 1.0][rng.below(6) as usize],
                })
                .collect();
            let req = ComputeExpertsRequest {
                layer: rng.layer(),
                n_tokens,
                d_model,
                activations: rng.bytes(4 * floats).into(),
                routes,
                stream: rng.below(4),
                expect_experts_index_sha256: String::new(),
            };
            let _ = client.compute_experts(req).await;
        }
        7..=8 => {
            let len = rng.below(200) as usize;
            let body = Bytes::from(rng.bytes(len));
            let path = PathAndQuery::from_static(PATHS[rng.below(4) as usize]);
            if raw.ready().await.is_ok() {
                let _ = raw
                    .server_streaming(tonic::Request::new(body), path, RawCodec)
                    .await;
            }
        }
        _ => {
            let _ = client.info(InfoRequest {}).await;
        }
    }
}

fn rss_kib() -> u64 {
    let status = fs_err::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn round(channel: &Channel, seed: u64, total: usize) {
    const WORKERS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let mut client = ExpertStoreClient::new(channel.clone());
        let mut raw = tonic::client::Grpc::new(channel.clone());
        let mut rng = Rng(seed * 1000 + w as u64 + 1);
        tasks.spawn(async move {
            for _ in 0..total / WORKERS {
                one_request(&mut rng, &mut client, &mut raw).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_fuzzed_requests_leave_the_store_up_with_flat_memory() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.limits.max_fetch_experts = 16;
    cfg.limits.max_chunk_bytes = 8192;
    cfg.limits.max_message_bytes = 64 << 10;
    let server = common::start(cfg).await;
    let channel = server.channel().await;
    round(&channel, 1, 1000).await;
    let rss_1k = rss_kib();
    round(&channel, 2, 9000).await;
    let rss_10k = rss_kib();
    assert!(
        rss_10k as f64 <= 1.10 * rss_1k as f64,
        "RSS grew from {rss_1k} KiB after 1,000 requests to {rss_10k} KiB after 10,000"
    );
    let mut c = ExpertStoreClient::new(channel);
    c.info(InfoRequest {}).await.expect("still serving");
    assert!(!server.handle.is_finished());
    eprintln!("RSS {rss_1k} KiB after 1,000 requests, {rss_10k} KiB after 10,000");
    server.stop().await;
}
