//! `run`: the store's gRPC server on a listener the caller bound (tests
//! pass `127.0.0.1:0`), with health, reflection (v1 and v1alpha), the bearer
//! check, optional TLS, 96 KiB HTTP/2 frames and explicit message limits,
//! and without TLS the bulk channel on the same listener ([`crate::bulk`]),
//! until `shutdown` is cancelled; then new calls get UNAVAILABLE, health
//! turns NOT_SERVING, and in-flight calls drain before it returns.
//!
//! Clients should match the transport settings, which
//! `waste_proto::fetch::client_endpoint` applies: `Endpoint::max_frame_size`
//! of [`MAX_FRAME_SIZE`] (why that size: there), receive
//! windows of [`CLIENT_STREAM_WINDOW`] / [`CLIENT_CONNECTION_WINDOW`]
//! (HTTP/2's 64 KiB default caps a stream at one window per round trip),
//! and a `max_decoding_message_size` of at least `InfoResponse.max_message_bytes`
//! (chunks are at most 1 MiB, a ComputeExperts reply is n_tokens x d_model x 4).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use waste_proto::store::v1::expert_store_server::ExpertStoreServer;

use crate::bulk::{self, BulkServer};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fetch_route::FetchRoute;
use crate::service::ExpertStoreService;
use crate::store::Store;
use waste_proto::auth::BearerAuth;

pub use waste_proto::fetch::{CLIENT_CONNECTION_WINDOW, CLIENT_STREAM_WINDOW, MAX_FRAME_SIZE};

/// Serves `cfg` on `listener` until `shutdown` is cancelled and in-flight calls finish.
pub async fn run(cfg: Config, listener: TcpListener, shutdown: CancellationToken) -> Result<()> {
    cfg.validate()?;
    let addr = listener.local_addr().map_err(|source| Error::Io {
        path: "listener".into(),
        source,
    })?;
    cfg.check_listen(&addr)?;
    let open_cfg = cfg.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&open_cfg))
        .await
        .map_err(|e| Error::Internal {
            what: format!("open task: {e}"),
        })??;
    let store = Arc::new(store);
    serve(&cfg, store, listener, shutdown).await
}

/// Like [`run`] with a store already opened (the in-process bench reads the same one).
pub async fn serve(
    cfg: &Config,
    store: Arc<Store>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<()> {
    let index = store.index();
    tracing::info!(
        experts = %cfg.experts.display(),
        layers = index.layers.len(),
        format = %index.expert_format,
        direct = store.is_direct(),
        token = cfg.token.is_some(),
        tls = cfg.tls.is_some(),
        limits = ?cfg.limits,
        "expert store ready"
    );
    if !store.is_direct() {
        tracing::warn!("O_DIRECT is unavailable here: records are read through the page cache");
    }
    let limit = cfg.limits.max_message_bytes as usize;
    // The bulk channel is plain text: a TLS store sends everything through gRPC.
    let bulk = cfg.tls.is_none().then(|| {
        BulkServer::new(
            Arc::clone(&store),
            BearerAuth::new(cfg.token.as_deref()),
            limit,
            shutdown.clone(),
        )
    });
    let service = ExpertStoreServer::new(
        ExpertStoreService::new(Arc::clone(&store)).offering_bulk(bulk.is_some()),
    )
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit.max(2 * MAX_FRAME_SIZE as usize));
    let service = FetchRoute::new(service, Arc::clone(&store), limit);
    let service = InterceptedService::new(service, BearerAuth::new(cfg.token.as_deref()));

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ExpertStoreServer<ExpertStoreService>>()
        .await;
    let reflection = |b: tonic_reflection::server::Builder<'static>| {
        b.register_encoded_file_descriptor_set(waste_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("waste.store.v1.ExpertStore")
            .with_service_name("grpc.health.v1.Health")
    };
    let builder = || reflection(tonic_reflection::server::Builder::configure());
    let reflection_v1 = builder().build_v1().map_err(|e| Error::Internal {
        what: format!("reflection: {e}"),
    })?;
    let reflection_v1alpha = builder().build_v1alpha().map_err(|e| Error::Internal {
        what: format!("reflection: {e}"),
    })?;

    let mut server = Server::builder()
        .max_frame_size(Some(MAX_FRAME_SIZE))
        .max_concurrent_streams(Some(cfg.limits.max_concurrent_streams))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    if let Some(tls) = &cfg.tls {
        let read = |p: &std::path::Path| {
            fs_err::read(p).map_err(|source| Error::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let identity = Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
        server = server.tls_config(ServerTlsConfig::new().identity(identity))?;
    }

    let metrics_task = spawn_metrics_log(&store, cfg.metrics_log_secs, shutdown.clone());
    let incoming = bulk::incoming(listener, bulk.clone(), shutdown.clone());
    let drain_store = Arc::clone(&store);
    let signal = async move {
        shutdown.cancelled().await;
        drain_store.begin_shutdown();
        health
            .set_not_serving::<ExpertStoreServer<ExpertStoreService>>()
            .await;
        tracing::info!("shutting down: draining in-flight calls");
    };
    let result = server
        .add_service(service)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(incoming, signal)
        .await;
    if let Some(bulk) = &bulk {
        bulk.drain().await;
    }
    metrics_task.abort();
    tracing::info!(
        "{}",
        store.metrics().summary(store.reader().engine().stats())
    );
    Ok(result?)
}

/// [`serve`] taking its config by value, for `tokio::spawn`.
pub async fn serve_owned(
    cfg: Config,
    store: Arc<Store>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<()> {
    serve(&cfg, store, listener, shutdown).await
}

/// Logs a metrics line every `secs` while the store is serving traffic.
fn spawn_metrics_log(
    store: &Arc<Store>,
    secs: u64,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let store = Arc::clone(store);
    tokio::spawn(async move {
        if secs == 0 {
            return;
        }
        let mut last = String::new();
        let period = Duration::from_secs(secs);
        // The first line comes one period after start, not at once.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let line = store.metrics().summary(store.reader().engine().stats());
            if line != last {
                tracing::info!("{line}");
                last = line;
            }
        }
    })
}
