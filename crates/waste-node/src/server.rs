//! `serve`: one port for everything, on a listener the caller bound (tests
//! pass `127.0.0.1:0`): the Node gRPC service with health and reflection
//! (v1 and v1alpha) behind the bearer check, and the OpenAI-compatible HTTP
//! API ([`crate::http`]), in one axum router (HTTP/1.1 and h2c; gRPC clients
//! speak HTTP/2 with prior knowledge). Health follows the expert store's
//! watcher: NOT_SERVING while the store is lost or is another store, SERVING
//! again when it is back. Until `shutdown` is cancelled; then health turns
//! NOT_SERVING and in-flight calls drain before it returns.

use std::sync::Arc;

use axum::serve::{Listener, ListenerExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use waste_proto::node::v1::node_server::NodeServer;
use waste_proto::tonic::service::Routes;
use waste_proto::tonic::service::interceptor::InterceptedService;

use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::node::Node;
use crate::service::NodeService;
use crate::source::remote::StoreState;
use crate::{Error, Result};

/// Largest request a client may send (a long prompt as ids is far below).
const MAX_MESSAGE: usize = 64 << 20;

/// Serves `node` on `listener` until `shutdown` is cancelled and in-flight calls finish.
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<()> {
    let service = NodeServer::new(NodeService::new(Arc::clone(&node)))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let service = InterceptedService::new(service, node.auth.clone());
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<NodeServer<NodeService>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(waste_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("waste.node.v1.Node")
            .with_service_name("grpc.health.v1.Health")
    };
    let reflect = |e: tonic_reflection::server::Error| Error::Config(format!("reflection: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflect)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflect)?;
    let grpc = Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .into_axum_router();
    // The merged router's fallback replaces tonic's, which would answer
    // any unknown path with a gRPC status in an HTTP 200.
    let app = crate::http::router(Arc::clone(&node))
        .merge(grpc)
        .fallback(crate::http::not_found);
    follow_store(&node, health.clone(), shutdown.clone());
    let signal = async move {
        shutdown.cancelled().await;
        node.set_draining();
        health.set_not_serving::<NodeServer<NodeService>>().await;
        health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        tracing::info!("shutting down: draining in-flight requests");
    };
    axum::serve(nodelay(listener), app)
        .with_graceful_shutdown(signal)
        .await
        .map_err(|e| Error::Transport(e.to_string()))
}

/// Sets gRPC health (the node's service and the whole server, "") from the
/// store watcher's state until `shutdown`; local mode has nothing to follow.
fn follow_store(node: &Arc<Node>, health: HealthReporter, shutdown: CancellationToken) {
    let Some(store) = &node.store else {
        return;
    };
    let mut state = store.subscribe();
    let node = Arc::downgrade(node);
    tokio::spawn(async move {
        loop {
            let up = *state.borrow_and_update() == StoreState::Up;
            let Some(n) = node.upgrade() else {
                return;
            };
            if n.draining() {
                return;
            }
            drop(n);
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            health
                .set_service_status(<NodeServer<NodeService> as NamedService>::NAME, status)
                .await;
            health.set_service_status("", status).await;
            // Shutdown may have written NOT_SERVING while this wrote: its
            // word is final, so write it again rather than leave ours.
            if node.upgrade().is_none_or(|n| n.draining()) {
                let down = ServingStatus::NotServing;
                health
                    .set_service_status(<NodeServer<NodeService> as NamedService>::NAME, down)
                    .await;
                health.set_service_status("", down).await;
                return;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = state.changed() => if changed.is_err() { return },
            }
        }
    });
}

/// `listener` with TCP_NODELAY on each accepted connection: without it a
/// streamed token waits for the client's delayed ACK (up to 40 ms on
/// Linux) whenever the one before is unacknowledged.
fn nodelay(listener: TcpListener) -> impl Listener<Io = TcpStream, Addr = std::net::SocketAddr> {
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on an accepted connection: {e}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = nodelay(listener);
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await;
        assert!(accepted.nodelay().unwrap());
    }
}
