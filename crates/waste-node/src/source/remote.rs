//! The expert store, seen from the node: a client (lazy connection, HTTP/2
//! keep-alive, 96 KiB frames, optional TLS and bearer token) with retries on
//! the codes worth retrying (UNAVAILABLE, RESOURCE_EXHAUSTED,
//! DEADLINE_EXCEEDED: the store restarting or busy) for the reconnect
//! budget, the store's identity checked at connect and named in every
//! request (a store restarted on another model refuses it), a watcher of
//! the store that health follows, the `fetch` reader that
//! streams records back into whole verified records (on the store's bulk
//! channel where it offers one, else through FetchExperts), and the
//! `compute-at-store` source that sends activations instead of fetching
//! weights.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use waste_format::io::{BufferPool, ChunkView, FetchedRecord, Reassembler};
use waste_model::Routing;
use waste_proto::auth::BearerToken;
use waste_proto::bulk::BulkClient;
use waste_proto::fetch;
use waste_proto::store::v1 as pb;
use waste_proto::tonic::service::interceptor::InterceptedService;
use waste_proto::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::{BoxFuture, Done, ExpertSource, LayerStats, Priority, RecordReader, Stream};
use crate::{Error, Result};

/// Largest message the node accepts from the store (compute-at-store
/// outputs of a long prompt); chunks themselves are at most 1 MiB.
const MAX_MESSAGE: usize = 256 << 20;
/// A guess not scored by then lost its generation (for the accuracy count).
const FORGET_GUESS_AFTER: Duration = Duration::from_secs(60);
/// How often the watcher asks the store for its `Info`, and how long one
/// answer may take: together they bound how late health notices a lost
/// store (under 5 s).
const WATCH_EVERY: Duration = Duration::from_secs(1);
const WATCH_TIMEOUT: Duration = Duration::from_secs(2);

type Service = InterceptedService<Channel, BearerToken>;
type Client = pb::expert_store_client::ExpertStoreClient<Service>;

/// What the watcher last saw of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreState {
    /// It answers, and it is the expected store.
    Up,
    /// It does not answer: why.
    Lost(String),
    /// It answers as another store (the message names both hashes).
    Wrong(String),
}

/// A connection to the expert store, with the layer table from its `Info`.
#[derive(Debug, Clone)]
pub struct StoreClient {
    client: Client,
    /// The same channel for FetchExperts, read without tonic's decode copy
    /// (`waste_proto::fetch`).
    service: Service,
    /// The store's bulk channel, when it offers one and it is not turned off.
    bulk: Option<Arc<BulkClient>>,
    info: Arc<pb::InfoResponse>,
    retries: Arc<AtomicU64>,
    /// The store's address, for messages.
    addr: Arc<str>,
    /// The identity every request asks for (`expect_experts_index_sha256`):
    /// the backbone's recorded one, else the store's at connect.
    expected: Arc<str>,
    /// How long a store may stay unreachable before a request fails.
    retry_for: Duration,
    state: Arc<tokio::sync::watch::Sender<StoreState>>,
    /// Stops the watcher when the last clone goes.
    _watcher: Arc<tokio_util::sync::DropGuard>,
}

impl StoreClient {
    /// Connects (lazily: the first call dials) and reads `Info`, retrying
    /// while the store is not up yet for `retry_for`; refuses a store whose
    /// identity differs from `expected` (the backbone's, when it recorded
    /// one), and starts the watcher that keeps [`StoreClient::state`].
    /// With `bulk`, records are fetched on the store's bulk channel when
    /// its `Info` offers one.
    pub async fn connect(
        addr: &str,
        token: Option<&str>,
        ca: Option<&Path>,
        bulk: bool,
        expected: Option<&str>,
        retry_for: Duration,
    ) -> Result<Self> {
        let endpoint = Endpoint::from_shared(addr.to_string())
            .map_err(|e| Error::Config(format!("store address {addr:?}: {e}")))?;
        let mut endpoint = fetch::client_endpoint(endpoint)
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        if let Some(ca) = ca {
            let pem = fs_err::read(ca).map_err(|e| Error::Config(format!("store CA: {e}")))?;
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| Error::Config(format!("store TLS: {e}")))?;
        }
        let bearer =
            BearerToken::new(token).map_err(|e| Error::Config(format!("--store-token: {e}")))?;
        let service = InterceptedService::new(endpoint.connect_lazy(), bearer);
        let client = pb::expert_store_client::ExpertStoreClient::new(service.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let retries = Arc::new(AtomicU64::new(0));
        let info = retry(&retries, retry_for, addr, || {
            let mut c = client.clone();
            async move { Ok(c.info(pb::InfoRequest {}).await?.into_inner()) }
        })
        .await?;
        let found = identity(&info).to_string();
        let expected = expected.unwrap_or(&found).to_string();
        check_identity(addr, &expected, &found)?;
        // The bulk channel is plain text: never where the node speaks TLS
        // (to the store, or to a proxy in front of a plain-text one).
        let plain = ca.is_none() && addr.starts_with("http://");
        let bulk = if bulk && info.bulk_fetch && plain {
            let client = Arc::new(BulkClient::new(addr, token).map_err(Error::Config)?);
            let probing = Arc::clone(&client);
            let probe = tokio::task::spawn_blocking(move || probing.probe())
                .await
                .map_err(|e| panicked("the bulk channel's probe", &e))?;
            match probe {
                Ok(()) => {
                    tracing::info!("expert store {addr}: records come on its bulk channel");
                    Some(client)
                }
                Err(s) => {
                    tracing::warn!(
                        "expert store {addr}: its bulk channel does not answer ({:?}: {}), so records \
                         come through gRPC (a proxy that passes only HTTP/2?; --no-store-bulk says so)",
                        s.code(),
                        s.message()
                    );
                    None
                }
            }
        } else {
            None
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let me = Self {
            client,
            service,
            bulk,
            info: Arc::new(info),
            retries,
            addr: Arc::from(addr),
            expected: Arc::from(expected.as_str()),
            retry_for,
            state: Arc::new(tokio::sync::watch::Sender::new(StoreState::Up)),
            _watcher: Arc::new(cancel.clone().drop_guard()),
        };
        tokio::spawn(watch(
            me.client.clone(),
            Arc::clone(&me.state),
            Arc::clone(&me.addr),
            Arc::clone(&me.expected),
            cancel,
        ));
        Ok(me)
    }

    pub fn info(&self) -> &pb::InfoResponse {
        &self.info
    }

    /// The store's identity this client insists on.
    pub fn expected_identity(&self) -> &str {
        &self.expected
    }

    /// What the watcher last saw.
    pub fn state(&self) -> StoreState {
        self.state.borrow().clone()
    }

    /// Changes of [`StoreClient::state`].
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<StoreState> {
        self.state.subscribe()
    }

    /// Whether records come on the store's bulk channel (else FetchExperts).
    pub fn uses_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// Calls retried so far (a restarting store shows up here).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.info
            .layers
            .iter()
            .find(|l| l.layer == layer)
            .map(|l| l.record_bytes)
    }

    /// Fetches `ids` of `layer`, put together in buffers of `pool` while it
    /// has some free; calls `done` for each as it completes. After a
    /// retryable failure only the records still missing are asked again.
    async fn fetch(
        &self,
        layer: u32,
        ids: Vec<u32>,
        priority: Priority,
        done: &Done,
        pool: &BufferPool,
    ) -> Result<()> {
        let len = self
            .record_bytes(layer)
            .ok_or_else(|| Error::Mismatch(format!("the store has no layer {layer}")))?;
        // A chunk's data and its few bytes of fields.
        let max_message = (self.info.max_chunk_bytes as usize).max(1 << 20) + 1024;
        let mut missing = ids;
        let mut backoff = Backoff::new(self.retry_for);
        loop {
            let mut asm = Reassembler::new(missing.iter().map(|&e| (layer, e, len))).in_pool(pool);
            let req = pb::FetchExpertsRequest {
                experts: missing
                    .iter()
                    .map(|&expert| pb::ExpertId { layer, expert })
                    .collect(),
                priority: match priority {
                    Priority::Demand => pb::FetchPriority::Demand,
                    Priority::Prefetch => pb::FetchPriority::Prefetch,
                } as i32,
                expect_experts_index_sha256: self.expected.to_string(),
                client_verifies: true,
            };
            let result: Result<()> = async {
                if let Some(bulk) = &self.bulk {
                    let (bulk, done) = (Arc::clone(bulk), Arc::clone(done));
                    let (arrived, result) = tokio::task::spawn_blocking(move || {
                        let mut arrived = Vec::new();
                        let result = fetch_bulk(&bulk, req, &mut asm, &done, &mut arrived);
                        (arrived, result)
                    })
                    .await
                    .map_err(|e| panicked("a bulk fetch", &e))?;
                    missing.retain(|e| !arrived.contains(e));
                    return result;
                }
                let mut service = self.service.clone();
                let mut stream = fetch::fetch_experts(&mut service, &req, max_message).await?;
                while let Some(c) = stream.next().await? {
                    if let Some(rec) = push_chunk(&mut asm, &c)? {
                        missing.retain(|&e| e != rec.expert);
                        done(rec.layer, rec.expert, Ok(rec.bytes));
                    }
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) if missing.is_empty() => return Ok(()),
                Ok(()) => {
                    return Err(Error::Mismatch(format!(
                        "layer {layer}: the store ended the stream without {missing:?}"
                    )));
                }
                Err(e) if e.is_retryable() => {
                    if !backoff.wait().await {
                        return Err(lost(&self.addr, self.retry_for, &e));
                    }
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("expert store: {e}; retrying layer {layer} experts {missing:?}");
                }
                Err(e) => return Err(e.from_store(&self.addr)),
            }
        }
    }
}

/// A blocking task of the bulk client that panicked (a bug here, not the
/// store's): INTERNAL, not retried.
fn panicked(what: &str, e: &tokio::task::JoinError) -> Error {
    Error::Store {
        code: tonic::Code::Internal,
        message: format!("{what} panicked on the node: {e}"),
    }
}

/// One FetchExperts chunk into `asm`: the record it completes, if any.
pub fn push_chunk(
    asm: &mut Reassembler,
    c: &fetch::ChunkParts,
) -> waste_format::Result<Option<FetchedRecord>> {
    let data: Vec<&[u8]> = c.data.iter().map(|d| &d[..]).collect();
    asm.push(ChunkView {
        layer: c.head.layer,
        expert: c.head.expert,
        offset: c.head.offset,
        total_len: c.head.total_len,
        checksum: c.head.checksum,
        data: &data,
    })
}

/// One request on the bulk channel, blocking: each record read in place,
/// verified and handed to `done`; the experts that arrived are pushed to
/// `arrived` (a retry asks only for the others).
fn fetch_bulk(
    bulk: &BulkClient,
    req: pb::FetchExpertsRequest,
    asm: &mut Reassembler,
    done: &Done,
    arrived: &mut Vec<u32>,
) -> Result<()> {
    let mut reply = bulk.fetch(req)?;
    while let Some(r) = reply.next_record()? {
        let rec = asm.read_whole(r.layer, r.expert, r.total_len, r.checksum, |block| {
            reply.read_exact(block).map_err(Error::from)
        })?;
        arrived.push(rec.expert);
        done(rec.layer, rec.expert, Ok(rec.bytes));
    }
    Ok(())
}

/// The identity a store reports: `experts_index_sha256`, or for a store
/// of an older build `manifest_hash` (its index's sha256 where no
/// manifest sat beside `experts/`).
fn identity(info: &pb::InfoResponse) -> &str {
    if info.experts_index_sha256.is_empty() {
        &info.manifest_hash
    } else {
        &info.experts_index_sha256
    }
}

fn check_identity(addr: &str, expected: &str, found: &str) -> Result<()> {
    if expected == found {
        return Ok(());
    }
    Err(Error::WrongStore {
        store: addr.to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
    })
}

/// The error of a request that waited `retry_for` on a store that did not come back.
fn lost(addr: &str, retry_for: Duration, last: &Error) -> Error {
    Error::StoreLost {
        store: addr.to_string(),
        secs: retry_for.as_secs(),
        reason: last.to_string(),
    }
}

/// Asks the store for its `Info` every [`WATCH_EVERY`] until `cancel`,
/// and publishes what it saw: health follows it, and a store that came
/// back as another model shows up here within a second (requests are
/// refused by the store itself, since each names the identity it expects).
async fn watch(
    client: Client,
    state: Arc<tokio::sync::watch::Sender<StoreState>>,
    addr: Arc<str>,
    expected: Arc<str>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut c = client.clone();
        let mut req = tonic::Request::new(pb::InfoRequest {});
        req.set_timeout(WATCH_TIMEOUT);
        let call = tokio::time::timeout(WATCH_TIMEOUT, c.info(req));
        let now = match call.await {
            Ok(Ok(info)) => match check_identity(&addr, &expected, identity(info.get_ref())) {
                Ok(()) => StoreState::Up,
                Err(e) => StoreState::Wrong(e.to_string()),
            },
            Ok(Err(status)) => StoreState::Lost(format!(
                "expert store {addr}: {:?}: {}",
                status.code(),
                status.message()
            )),
            Err(_) => StoreState::Lost(format!(
                "expert store {addr}: no answer within {} s",
                WATCH_TIMEOUT.as_secs()
            )),
        };
        state.send_if_modified(|s| {
            if *s == now {
                return false;
            }
            match &now {
                StoreState::Up => tracing::info!("expert store {addr} is back"),
                StoreState::Lost(why) | StoreState::Wrong(why) => {
                    tracing::warn!("expert store unusable: {why}");
                }
            }
            *s = now;
            true
        });
    }
}

/// Exponential backoff from 50 ms to 2 s, for `budget` in all.
struct Backoff {
    delay: Duration,
    start: std::time::Instant,
    budget: Duration,
}

impl Backoff {
    fn new(budget: Duration) -> Self {
        Self {
            delay: Duration::from_millis(50),
            start: std::time::Instant::now(),
            budget,
        }
    }

    /// Sleeps and returns true, or false when the time is up.
    async fn wait(&mut self) -> bool {
        let left = self.budget.saturating_sub(self.start.elapsed());
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(self.delay.min(left)).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(2));
        true
    }
}

/// Runs `call` until it succeeds, fails with a code not worth retrying, or
/// `budget` runs out (then UNAVAILABLE naming the store and the last error).
async fn retry<T, F, Fut>(
    retries: &AtomicU64,
    budget: Duration,
    addr: &str,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(budget);
    loop {
        match call().await {
            Err(e) if e.is_retryable() => {
                if !backoff.wait().await {
                    return Err(lost(addr, budget, &e));
                }
                retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("expert store: {e}; retrying");
            }
            Err(e) => return Err(e.from_store(addr)),
            ok => return ok,
        }
    }
}

/// `fetch` mode: records come from the store, compute happens here.
#[derive(Debug)]
pub struct RemoteReader {
    client: StoreClient,
    runtime: Handle,
    /// Buffers records are put together in: the plan's in-flight share, as
    /// a local reader's IO pool.
    pool: BufferPool,
}

impl RemoteReader {
    /// Must be called inside the tokio runtime that will run the fetches;
    /// `in_flight_bytes` bounds the buffers kept for records in flight.
    pub fn new(client: StoreClient, in_flight_bytes: usize) -> Self {
        Self {
            client,
            runtime: Handle::current(),
            pool: BufferPool::new(in_flight_bytes),
        }
    }
}

impl RecordReader for RemoteReader {
    fn fetch(&self, layer: u32, ids: &[u32], priority: Priority, done: Done) {
        let (client, pool) = (self.client.clone(), self.pool.clone());
        let ids = ids.to_vec();
        self.runtime.spawn(async move {
            if let Err(e) = client
                .fetch(layer, ids.clone(), priority, &done, &pool)
                .await
            {
                // Every id still waiting fails with the cause, kind kept
                // (DATA_LOSS is not a network error); done ignores completed ones.
                let e = Arc::new(e);
                for id in ids {
                    done(layer, id, Err(Error::Shared(Arc::clone(&e))));
                }
            }
        });
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.client.record_bytes(layer)
    }

    fn mode(&self) -> &'static str {
        "fetch"
    }
}

/// `compute-at-store` mode: the store runs the experts next to its disk,
/// and reads a guess of the next layer's ahead (PrefetchExperts).
#[derive(Debug)]
pub struct ComputeSource {
    client: StoreClient,
    bytes_read: AtomicU64,
    runtime: Handle,
    /// Each stream's last guess, scored when its layer routes.
    guessed: Mutex<HashMap<Stream, SentGuess>>,
}

/// A guess sent to the store: (layer, experts, when).
type SentGuess = (u32, Vec<u32>, Instant);

impl ComputeSource {
    /// Must be called inside the tokio runtime that will send the guesses.
    pub fn new(client: StoreClient) -> Self {
        Self {
            client,
            bytes_read: AtomicU64::new(0),
            runtime: Handle::current(),
            guessed: Mutex::default(),
        }
    }
}

impl ExpertSource for ComputeSource {
    fn routed_sum(
        &self,
        stream: Stream,
        routing: Arc<Routing>,
    ) -> BoxFuture<'_, Result<(Vec<f32>, LayerStats)>> {
        Box::pin(async move {
            let ids = routing.unique_experts();
            let width = routing.expert_width();
            let req = pb::ComputeExpertsRequest {
                layer: routing.layer as u32,
                n_tokens: routing.n as u32,
                d_model: width as u32,
                activations: routing
                    .input
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>()
                    .into(),
                routes: routing
                    .routes(&ids)
                    .iter()
                    .map(|r| pb::Route {
                        token: r.token as u32,
                        expert: ids[r.expert],
                        weight: r.weight,
                    })
                    .collect(),
                stream,
                expect_experts_index_sha256: self.client.expected.to_string(),
            };
            let c = &self.client;
            let resp = retry(&c.retries, c.retry_for, &c.addr, || {
                let mut c = self.client.client.clone();
                let req = req.clone();
                async move { Ok(c.compute_experts(req).await?.into_inner()) }
            })
            .await?;
            if resp.output.len() != routing.n * width * 4 {
                return Err(Error::Mismatch(format!(
                    "layer {}: compute-at-store returned {} bytes for {} x {width} values",
                    routing.layer,
                    resp.output.len(),
                    routing.n
                )));
            }
            let sum = resp
                .output
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            self.bytes_read
                .fetch_add(resp.disk_bytes_read, Ordering::Relaxed);
            let layer = routing.layer as u32;
            let guess = {
                let mut guessed = self.guessed.lock().unwrap_or_else(PoisonError::into_inner);
                match guessed.entry(stream) {
                    Entry::Occupied(e) if e.get().0 == layer => e.remove().1,
                    _ => Vec::new(),
                }
            };
            let stats = LayerStats {
                requested: ids.len() as u64,
                retained: u64::from(resp.experts_in_ram),
                bytes_read: resp.disk_bytes_read,
                guessed: guess.len() as u64,
                guessed_right: ids.iter().filter(|id| guess.contains(id)).count() as u64,
            };
            Ok((sum, stats))
        })
    }

    fn prefetch(&self, stream: Stream, layer: u32, ids: &[u32]) -> u64 {
        {
            let mut guessed = self.guessed.lock().unwrap_or_else(PoisonError::into_inner);
            // A stream whose generation ended (or was cancelled) between a
            // guess and its layer leaves its entry; forget those.
            let now = Instant::now();
            guessed.retain(|_, (_, _, made)| now.duration_since(*made) < FORGET_GUESS_AFTER);
            guessed.insert(stream, (layer, ids.to_vec(), now));
        }
        let req = pb::PrefetchExpertsRequest {
            experts: ids
                .iter()
                .map(|&expert| pb::ExpertId { layer, expert })
                .collect(),
            stream,
            expect_experts_index_sha256: self.client.expected.to_string(),
        };
        let mut client = self.client.client.clone();
        self.runtime.spawn(async move {
            // Best effort, not retried: a guess the store refuses or lacks
            // is read when the layer's ComputeExperts asks for it.
            if let Err(s) = client.prefetch_experts(req).await {
                tracing::debug!(layer, status = %s, "prefetch guess refused");
            }
        });
        // The store reads the guess (less any record its previous guess
        // already holds, which a different layer's guess never does).
        let bytes = self.client.record_bytes(layer).unwrap_or(0) * ids.len() as u64;
        self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        bytes
    }

    fn mode(&self) -> &'static str {
        "compute-at-store"
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.client.record_bytes(layer)
    }

    fn total_bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
}
