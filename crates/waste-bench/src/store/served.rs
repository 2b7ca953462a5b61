//! Served figures: the same decode-shaped batches read through the store,
//! either in-process (the IO engine with checksum verification, no gRPC),
//! over gRPC (FetchExperts, chunks reassembled and verified on the client
//! as a node does) or on the store's bulk channel (records read in place
//! and verified, as a node does), and the same bytes over a plain loopback
//! socket, the floor of any transport's CPU cost. `window` batches are in flight at
//! once: 1 is a node without prefetch; 2 is one whose next layer's read
//! overlaps this one.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use waste_format::io::{AlignedBuf, BufferPool, Priority, Reassembler};
use waste_proto::auth::BearerToken;
use waste_proto::bulk::BulkClient;
use waste_proto::fetch;
use waste_proto::store::v1::{ExpertId, FetchExpertsRequest};
use waste_proto::tonic::service::interceptor::InterceptedService;
use waste_proto::transport::Channel;

use waste_store::error::{Error, Result};
use waste_store::store::Store;

/// Largest chunk message accepted: the store's 1 MiB chunk limit and its fields.
const MAX_CHUNK_MESSAGE: usize = (1 << 20) + 1024;

/// Bytes, seconds and per-batch latencies of one served run.
#[derive(Debug, Clone, Default)]
pub struct Served {
    pub bytes: u64,
    pub secs: f64,
    pub latencies: Vec<Duration>,
}

/// Through the engine, without gRPC.
pub fn in_process(store: &Store, batches: &[Vec<(u32, u32)>], window: usize) -> Result<Served> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let parts = std::thread::scope(|s| {
        let workers: Vec<_> = (0..window.max(1))
            .map(|_| {
                s.spawn(|| -> Result<Served> {
                    let mut out = Served::default();
                    while let Some(b) = batches.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t = Instant::now();
                        for (_, r) in store.reader().read_blocking(b, Priority::Demand)? {
                            out.bytes += r?.loc.len as u64;
                        }
                        out.latencies.push(t.elapsed());
                    }
                    Ok(out)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().map_err(|_| Error::Internal {
                    what: "bench thread panicked".into(),
                })?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(merge(parts, started))
}

/// The floor any transport of these bytes pays: a plain TCP transfer over
/// loopback, as iperf3 makes one. For each batch the receiver asks for the
/// batch's bytes, the sender writes them from one cache-hot 1 MiB buffer
/// and the receiver reads each record into one reused record-sized buffer:
/// no framing, no checksum, no async runtime, no disk. `window` connections
/// run at once, as `window` batches are in flight in the served modes.
pub fn plain_socket(
    record_len: &HashMap<u32, u64>,
    batches: &[Vec<(u32, u32)>],
    window: usize,
) -> Result<Served> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io {
            path: what.clone().into(),
            source,
        }
    };
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("127.0.0.1:0"))?;
    let addr = listener.local_addr().map_err(io("listener"))?;
    let largest = record_len.values().copied().max().unwrap_or(0) as usize;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let parts = std::thread::scope(|s| {
        let workers: Vec<_> = (0..window.max(1))
            .map(|_| {
                let sender = s.spawn(|| -> Result<()> {
                    let (mut conn, _) = listener.accept().map_err(io("accept"))?;
                    conn.set_nodelay(true).map_err(io("sender"))?;
                    let block = vec![0x5a_u8; 1 << 20];
                    loop {
                        let mut ask = [0u8; 8];
                        conn.read_exact(&mut ask).map_err(io("sender"))?;
                        let mut left = u64::from_le_bytes(ask) as usize;
                        if left == 0 {
                            return Ok(());
                        }
                        while left > 0 {
                            let n = left.min(block.len());
                            conn.write_all(&block[..n]).map_err(io("sender"))?;
                            left -= n;
                        }
                    }
                });
                let receiver = s.spawn(|| -> Result<Served> {
                    let mut conn = TcpStream::connect(addr).map_err(io("connect"))?;
                    conn.set_nodelay(true).map_err(io("receiver"))?;
                    let mut record = vec![0u8; largest];
                    let mut out = Served::default();
                    while let Some(b) = batches.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t = Instant::now();
                        let lens: Vec<usize> = b
                            .iter()
                            .map(|(l, _)| record_len.get(l).copied().unwrap_or(0) as usize)
                            .collect();
                        let total: usize = lens.iter().sum();
                        if total == 0 {
                            continue;
                        }
                        conn.write_all(&(total as u64).to_le_bytes())
                            .map_err(io("receiver"))?;
                        for len in lens {
                            conn.read_exact(&mut record[..len])
                                .map_err(io("receiver"))?;
                        }
                        out.bytes += total as u64;
                        out.latencies.push(t.elapsed());
                    }
                    conn.write_all(&0u64.to_le_bytes())
                        .map_err(io("receiver"))?;
                    Ok(out)
                });
                (sender, receiver)
            })
            .collect();
        let joined = |what: &str| Error::Internal {
            what: format!("bench {what} thread panicked"),
        };
        let mut parts = Vec::new();
        for (sender, receiver) in workers {
            parts.push(receiver.join().map_err(|_| joined("receiver"))??);
            sender.join().map_err(|_| joined("sender"))??;
        }
        Ok::<_, Error>(parts)
    })?;
    Ok(merge(parts, started))
}

fn merge(parts: Vec<Served>, started: Instant) -> Served {
    let secs = started.elapsed().as_secs_f64();
    parts.into_iter().fold(
        Served {
            secs,
            ..Served::default()
        },
        |mut a, p| {
            a.bytes += p.bytes;
            a.latencies.extend(p.latencies);
            a
        },
    )
}

/// Runs `fetch` on the batches, `window` at once on the runtime's threads;
/// each call returns the bytes of the batch's records.
async fn in_window<F, Fut>(batches: &[Vec<(u32, u32)>], window: usize, fetch: F) -> Result<Served>
where
    F: Fn(Vec<(u32, u32)>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<u64>> + Send,
{
    let next = std::sync::Arc::new(AtomicUsize::new(0));
    let batches = std::sync::Arc::new(batches.to_vec());
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..window.max(1) {
        let (next, batches, fetch) = (next.clone(), batches.clone(), fetch.clone());
        tasks.spawn(async move {
            let mut out = Served::default();
            while let Some(b) = batches.get(next.fetch_add(1, Ordering::Relaxed)) {
                let t = Instant::now();
                out.bytes += fetch(b.clone()).await?;
                out.latencies.push(t.elapsed());
            }
            Ok::<_, Error>(out)
        });
    }
    let mut parts = Vec::new();
    while let Some(r) = tasks.join_next().await {
        parts.push(r.map_err(|e| Error::Internal {
            what: format!("bench task: {e}"),
        })??);
    }
    Ok(merge(parts, started))
}

/// Over gRPC with `channel`; `token` is sent as a bearer token. Records
/// are read as the node reads them: FetchExperts without tonic's decode
/// copy (`waste_proto::fetch`), chunks reassembled and verified in the
/// buffers of a pool that holds two windows' worth, as the node's holds
/// two layers' top-k.
pub async fn grpc(
    channel: Channel,
    token: Option<&str>,
    record_len: &HashMap<u32, u64>,
    batches: &[Vec<(u32, u32)>],
    window: usize,
) -> Result<Served> {
    let bearer = BearerToken::new(token).map_err(|reason| Error::Config { reason })?;
    let pool = client_pool(record_len, batches, window);
    let service = InterceptedService::new(channel, bearer);
    let record_len = std::sync::Arc::new(record_len.clone());
    in_window(batches, window, move |b| {
        let (service, record_len, pool) = (service.clone(), record_len.clone(), pool.clone());
        async move { fetch_one(service, &record_len, &pool, &b).await }
    })
    .await
}

/// A pool that holds two windows' worth of the largest batch, as the
/// node's holds two layers' top-k.
fn client_pool(
    record_len: &HashMap<u32, u64>,
    batches: &[Vec<(u32, u32)>],
    window: usize,
) -> BufferPool {
    let largest_batch = batches
        .iter()
        .map(|b| {
            b.iter()
                .map(|(l, _)| {
                    AlignedBuf::capacity_for(record_len.get(l).copied().unwrap_or(0) as usize)
                })
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    BufferPool::new(2 * window.max(1) * largest_batch)
}

/// The request a node makes for `batch`, and the reassembler of its answer.
fn request(
    record_len: &HashMap<u32, u64>,
    pool: &BufferPool,
    batch: &[(u32, u32)],
) -> (FetchExpertsRequest, Reassembler) {
    let req = FetchExpertsRequest {
        experts: batch
            .iter()
            .map(|&(layer, expert)| ExpertId { layer, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
        client_verifies: true,
    };
    let asm = Reassembler::new(
        batch
            .iter()
            .map(|&(l, e)| (l, e, record_len.get(&l).copied().unwrap_or(0))),
    )
    .in_pool(pool);
    (req, asm)
}

fn status(s: &waste_proto::Status) -> Error {
    Error::Internal {
        what: format!("fetch: {s}"),
    }
}

/// On the store's bulk channel with `client`, `window` requests at once,
/// each record read in place into a pool's buffer and verified, as the
/// node reads them.
pub async fn bulk(
    client: std::sync::Arc<BulkClient>,
    record_len: &HashMap<u32, u64>,
    batches: &[Vec<(u32, u32)>],
    window: usize,
) -> Result<Served> {
    let pool = client_pool(record_len, batches, window);
    let record_len = std::sync::Arc::new(record_len.clone());
    in_window(batches, window, move |b| {
        let (client, record_len, pool) = (client.clone(), record_len.clone(), pool.clone());
        async move {
            // The client blocks, as the node runs it.
            tokio::task::spawn_blocking(move || {
                let (req, mut asm) = request(&record_len, &pool, &b);
                let mut reply = client.fetch(req).map_err(|s| status(&s))?;
                let mut bytes = 0;
                while let Some(r) = reply.next_record().map_err(|s| status(&s))? {
                    let rec =
                        asm.read_whole(r.layer, r.expert, r.total_len, r.checksum, |block| {
                            reply.read_exact(block).map_err(|s| status(&s))
                        })?;
                    bytes += rec.bytes.len() as u64;
                }
                asm.finish()?;
                Ok(bytes)
            })
            .await
            .map_err(|e| Error::Internal {
                what: format!("bench task: {e}"),
            })?
        }
    })
    .await
}

async fn fetch_one(
    mut service: InterceptedService<Channel, BearerToken>,
    record_len: &HashMap<u32, u64>,
    pool: &BufferPool,
    batch: &[(u32, u32)],
) -> Result<u64> {
    let (req, mut asm) = request(record_len, pool, batch);
    let mut stream = fetch::fetch_experts(&mut service, &req, MAX_CHUNK_MESSAGE)
        .await
        .map_err(|s| status(&s))?;
    let mut bytes = 0;
    while let Some(c) = stream.next().await.map_err(|s| status(&s))? {
        if let Some(r) = waste_node::source::remote::push_chunk(&mut asm, &c)? {
            bytes += r.bytes.len() as u64;
        }
    }
    asm.finish()?;
    Ok(bytes)
}
