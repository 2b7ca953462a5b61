//! PrefetchExperts: a guess's records are read ahead and a ComputeExperts
//! uses them in place of reading them (same output, fewer disk bytes),
//! once; a new guess carries over what it repeats and drops the rest, and
//! a routed layer drops its wrong guesses; concurrent streams keep their
//! own guesses, which share half the engine's buffer bound first come,
//! first served until one goes stale; bad ids are refused
//! as FetchExperts refuses them; a corrupted guessed record still gives
//! DATA_LOSS naming it; a guess queued behind demand reads that take every
//! read buffer does not stall the request.

mod common;

use waste_format::ExpertsDir;
use waste_format::experts::ExpertActivation;
use waste_kernels::Format;
use waste_proto::Code;
use waste_proto::store::v1::expert_store_client::ExpertStoreClient;
use waste_proto::store::v1::{
    ComputeExpertsRequest, ComputeExpertsResponse, ExpertId, FetchExpertsRequest,
    PrefetchExpertsRequest, PrefetchExpertsResponse,
};
use waste_proto::transport::Channel;

/// Tokens 0-2 of layer 3, `d_model` wide, routed to experts 0, 1, 4 and 5.
fn compute_request(d_model: usize) -> ComputeExpertsRequest {
    let n = 3;
    let routes = [(0u32, 1u32, 0.7f32), (0, 4, 0.3), (1, 0, 1.2), (2, 5, -0.5)];
    let x = common::values(11, n * d_model, 1.0);
    common::compute_request(3, n as u32, d_model as u32, &x, &routes)
}

async fn compute(client: &mut ExpertStoreClient<Channel>) -> ComputeExpertsResponse {
    compute_wide(client, common::D_MODEL).await
}

/// [`compute`] for generation `stream`.
async fn compute_on(
    client: &mut ExpertStoreClient<Channel>,
    stream: u64,
) -> ComputeExpertsResponse {
    let req = ComputeExpertsRequest {
        stream,
        ..compute_request(common::D_MODEL)
    };
    client.compute_experts(req).await.unwrap().into_inner()
}

async fn compute_wide(
    client: &mut ExpertStoreClient<Channel>,
    d_model: usize,
) -> ComputeExpertsResponse {
    client
        .compute_experts(compute_request(d_model))
        .await
        .unwrap()
        .into_inner()
}

async fn prefetch(
    client: &mut ExpertStoreClient<Channel>,
    ids: &[(u32, u32)],
) -> Result<PrefetchExpertsResponse, waste_proto::Status> {
    prefetch_on(client, 0, ids).await
}

/// [`prefetch`] for generation `stream`.
async fn prefetch_on(
    client: &mut ExpertStoreClient<Channel>,
    stream: u64,
    ids: &[(u32, u32)],
) -> Result<PrefetchExpertsResponse, waste_proto::Status> {
    let req = PrefetchExpertsRequest {
        experts: ids
            .iter()
            .map(|&(layer, expert)| ExpertId { layer, expert })
            .collect(),
        stream,
        expect_experts_index_sha256: String::new(),
    };
    Ok(client.prefetch_experts(req).await?.into_inner())
}

/// Bytes of one record of `layer` (all of a layer's are alike here).
fn record_bytes(cfg: &waste_store::Config, layer: u32) -> u64 {
    ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(layer, 0)
        .unwrap()
        .len as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guess_is_used_once_in_place_of_a_read() {
    let (_tmp, cfg) = common::tiny();
    let rec = ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(3, 0)
        .unwrap()
        .len as u64;
    let server = common::start(cfg).await;
    let mut client = server.client().await;

    let unguessed = compute(&mut client).await;
    assert_eq!(unguessed.disk_bytes_read, 4 * rec);
    assert_eq!(unguessed.experts_in_ram, 0);

    // Layer 1 records are the same size in this store.
    let first = prefetch(&mut client, &[(3, 1), (3, 4), (1, 2)])
        .await
        .unwrap();
    assert_eq!((first.staged, first.bytes_queued), (3, 3 * rec));
    // Repeated ids are not read again; (1, 2) is dropped.
    let second = prefetch(&mut client, &[(3, 4), (3, 1), (3, 0)])
        .await
        .unwrap();
    assert_eq!((second.staged, second.bytes_queued), (3, rec));

    let guessed = compute(&mut client).await;
    assert_eq!(
        guessed.output, unguessed.output,
        "same sums from guessed records"
    );
    assert_eq!(guessed.experts_used, 4);
    // Experts 0, 1 and 4 came from the guess: only 5 was read for the request.
    assert_eq!(guessed.disk_bytes_read, rec);
    assert!(guessed.experts_in_ram <= 3, "{}", guessed.experts_in_ram);

    // Each guessed record serves one request.
    let again = compute(&mut client).await;
    assert_eq!(again.output, unguessed.output);
    assert_eq!((again.disk_bytes_read, again.experts_in_ram), (4 * rec, 0));

    let dropped = prefetch(&mut client, &[]).await.unwrap();
    assert_eq!((dropped.staged, dropped.bytes_queued), (0, 0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_drops_its_wrong_guesses_when_it_routes() {
    let (_tmp, cfg) = common::tiny();
    let rec = record_bytes(&cfg, 3);
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let r = prefetch(&mut client, &[(3, 0), (3, 2), (1, 2)])
        .await
        .unwrap();
    assert_eq!((r.staged, r.bytes_queued), (3, 3 * rec));
    // Layer 3 routes to 0, 1, 4 and 5: 0 comes from the guess, 2 was wrong.
    let resp = compute(&mut client).await;
    assert_eq!(resp.disk_bytes_read, 3 * rec);
    // The same guess again: (1, 2) is still held, (3, 2) was dropped.
    let again = prefetch(&mut client, &[(3, 2), (1, 2)]).await.unwrap();
    assert_eq!((again.staged, again.bytes_queued), (2, rec));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_keep_their_own_guesses() {
    let (_tmp, cfg) = common::tiny();
    let rec = record_bytes(&cfg, 3);
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let unguessed = compute(&mut client).await;
    // Two generations guess layer 3 before either computes it (a single
    // guess for the store would leave the first with none).
    let (a, b) = (7u64, u64::MAX);
    prefetch_on(&mut client, a, &[(3, 1), (3, 4)])
        .await
        .unwrap();
    prefetch_on(&mut client, b, &[(3, 0), (3, 5), (3, 4)])
        .await
        .unwrap();
    let on_a = compute_on(&mut client, a).await;
    assert_eq!(on_a.output, unguessed.output);
    assert_eq!(on_a.disk_bytes_read, 2 * rec, "experts 0 and 5 read for a");
    let on_b = compute_on(&mut client, b).await;
    assert_eq!(on_b.output, unguessed.output);
    assert_eq!(on_b.disk_bytes_read, rec, "expert 1 read for b");
    // A stream without a guess reads everything.
    let other = compute_on(&mut client, 3).await;
    assert_eq!(other.disk_bytes_read, 4 * rec);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_goes_first_come_first_served_until_a_guess_goes_stale() {
    // f32 records of 72 KiB against 1 MiB of read buffers: 7 fit in half.
    let (_tmp, mut cfg) = common::tiny_with([Format::F32; 3], ExpertActivation::Silu);
    cfg.io.inflight_bytes = 1 << 20;
    cfg.limits.guess_ttl_ms = 2_000;
    let rec = record_bytes(&cfg, 1);
    assert_eq!((1u64 << 19) / rec, 7, "the bound must bite");
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let layer = |l: u32| -> Vec<(u32, u32)> { (0..common::N_EXPERTS).map(|e| (l, e)).collect() };
    let (a, b) = (1u64, 2u64);
    let first = prefetch_on(&mut client, a, &layer(3)).await.unwrap();
    assert_eq!(first.staged, 6);
    // b gets what a leaves: a's reads are under way and a computes sooner.
    let second = prefetch_on(&mut client, b, &layer(1)).await.unwrap();
    assert_eq!(second.staged, 1);
    // Once a's layer routes, its guess is spent and b's next one fits.
    let on_a = compute_on(&mut client, a).await;
    assert_eq!(on_a.disk_bytes_read, 0, "a's four experts were all guessed");
    let third = prefetch_on(&mut client, b, &layer(1)).await.unwrap();
    assert_eq!((third.staged, third.bytes_queued), (6, 5 * rec));
    // A guess left unused past the TTL (its stream went away) gives way.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let fourth = prefetch_on(&mut client, a, &layer(3)).await.unwrap();
    assert_eq!(fourth.staged, 6);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guess_stays_under_half_the_read_buffers() {
    // f32 records of 72 KiB against 1 MiB of read buffers.
    let (_tmp, mut cfg) = common::tiny_with([Format::F32; 3], ExpertActivation::Silu);
    cfg.io.inflight_bytes = 1 << 20;
    let rec = ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(1, 0)
        .unwrap()
        .len as u64;
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let all: Vec<(u32, u32)> = common::LAYERS
        .iter()
        .flat_map(|&l| (0..common::N_EXPERTS).map(move |e| (l, e)))
        .collect();
    let r = prefetch(&mut client, &all).await.unwrap();
    let fit = (1u64 << 19) / rec;
    assert!(fit < all.len() as u64, "the bound must bite: {fit}");
    assert_eq!(
        (u64::from(r.staged), r.bytes_queued),
        (fit, fit * rec),
        "the most likely first, while they fit"
    );
    // Demand reads still find buffers.
    let resp = compute(&mut client).await;
    assert_eq!(resp.experts_used, 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_guesses_are_refused_and_a_corrupted_one_is_named() {
    let (_tmp, cfg) = common::tiny();
    common::corrupt_record(&cfg, 3, 4);
    let max = cfg.limits.max_fetch_experts;
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let too_many: Vec<(u32, u32)> = (0..=max).map(|i| (3, i % common::N_EXPERTS)).collect();
    for (ids, says) in [
        (&[(3u32, 99u32)][..], "out of range"),
        (&[(2, 0)][..], "layer 2"),
        (&[(3, 1), (3, 1)][..], "twice"),
        (&too_many[..], "at most"),
    ] {
        let s = prefetch(&mut client, ids).await.unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument, "{ids:?}: {s}");
        assert!(s.message().contains(says), "{}", s.message());
    }
    // The corrupted record is guessed; the request using it still fails
    // with the layer and expert named, and the store stays up.
    prefetch(&mut client, &[(3, 4)]).await.unwrap();
    let s = client
        .compute_experts(compute_request(common::D_MODEL))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::DataLoss, "{s}");
    assert!(s.message().contains("layer 3 expert 4"), "{}", s.message());
    prefetch(&mut client, &[(3, 0)]).await.unwrap();
    server.stop().await;
}

/// ComputeExperts once waited for its records in expert order. With read
/// buffers for two records, a guessed record (expert 0) whose read queued
/// behind the request's own demand reads (experts 1, 4, 5, which go first)
/// then never got a buffer: the demand records held both, waiting their
/// turn behind it. Here a FetchExperts stream its client does not read
/// holds the buffers while the guess and the request queue up; once it is
/// dropped, the request must finish, with the sums of an unguessed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guess_queued_behind_demand_reads_that_take_every_buffer_does_not_stall() {
    // f32 experts of 256 x 128: 384 KiB records, two to 1 MiB of buffers.
    let d_model = 256;
    let (_tmp, mut cfg) = common::shaped([Format::F32; 3], ExpertActivation::Silu, (d_model, 128));
    let rec = ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(3, 0)
        .unwrap()
        .len as u64;
    cfg.io.inflight_bytes = 1 << 20;
    assert_eq!(
        (1 << 20) / waste_format::align_up(rec),
        2,
        "two records fit"
    );
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let unguessed = compute_wide(&mut client, d_model).await;

    let mut slow = server.slow_client().await;
    let all = FetchExpertsRequest {
        experts: (0..common::N_EXPERTS)
            .map(|expert| ExpertId { layer: 1, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
        client_verifies: false,
    };
    let mut held = slow.fetch_experts(all).await.unwrap().into_inner();
    held.message().await.unwrap().unwrap();

    let guess = prefetch(&mut client, &[(3, 0)]).await.unwrap();
    assert_eq!(guess.staged, 1);
    let mut other = server.client().await;
    let request = tokio::spawn(async move { compute_wide(&mut other, d_model).await });
    // Let the request queue its demand reads behind the held buffers.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(held);
    drop(slow);
    let guessed = tokio::time::timeout(std::time::Duration::from_secs(20), request)
        .await
        .expect("ComputeExperts stalled behind its own reads")
        .unwrap();
    assert_eq!(guessed.output, unguessed.output);
    assert_eq!(guessed.experts_used, 4);
    server.stop().await;
}
