//! The bulk channel's server end (`BulkFetchRequest` in the proto): the
//! daemon's listener is shared with gRPC, each accepted connection sorted
//! by its first byte, and a bulk connection answers fetches with each
//! record's header and then its bytes written straight from the read
//! buffer. The same domain call as FetchExperts ([`Store::fetch`]): the
//! same validation, admission, metrics, statuses and cancellation (a
//! client that leaves closes the socket; the write fails and the dropped
//! stream skips the reads not yet started).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use waste_format::io::Check;
use waste_proto::auth::BearerAuth;
use waste_proto::bulk::{FrameError, MAGIC, end_frame, read_frame, write_frame};
use waste_proto::store::v1::bulk_fetch_reply::Reply;
use waste_proto::store::v1::{BulkFetchReply, BulkFetchRequest, BulkRecord};

use crate::service::fetch_args;
use crate::store::Store;

/// How long a new connection may take to send its first byte before it is
/// handed to gRPC anyway (which then applies its own timeouts).
const FIRST_BYTE_WITHIN: Duration = Duration::from_secs(10);
/// Connections sorted but not yet taken by the gRPC server.
const ACCEPT_BACKLOG: usize = 64;
/// Largest request frame read, whatever `max_message_bytes` allows: a
/// request holds only ids (256 by default, a few bytes each), and it is
/// read whole before its bearer token is checked, so a client without the
/// token makes the store hold no more than this per connection.
const MAX_REQUEST_FRAME: usize = 1 << 20;

/// The bulk side of one serving daemon.
#[derive(Debug)]
pub struct BulkServer {
    store: Arc<Store>,
    auth: BearerAuth,
    /// Largest request frame: `Limits::max_message_bytes`, at most [`MAX_REQUEST_FRAME`].
    max_message: usize,
    shutdown: CancellationToken,
    connections: TaskTracker,
}

impl BulkServer {
    pub fn new(
        store: Arc<Store>,
        auth: BearerAuth,
        max_message: usize,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            auth,
            max_message: max_message.min(MAX_REQUEST_FRAME),
            shutdown,
            connections: TaskTracker::new(),
        })
    }

    /// Waits for the bulk connections still answering a request (each
    /// stops taking new ones at shutdown).
    pub async fn drain(&self) {
        self.connections.close();
        self.connections.wait().await;
    }

    async fn serve(self: Arc<Self>, mut conn: TcpStream) {
        let mut magic = [0u8; MAGIC.len()];
        let read = tokio::select! {
            r = tokio::io::AsyncReadExt::read_exact(&mut conn, &mut magic) => r,
            () = self.shutdown.cancelled() => return,
        };
        if read.is_err() || &magic != MAGIC {
            return;
        }
        loop {
            let next = tokio::select! {
                r = read_frame::<_, BulkFetchRequest>(&mut conn, self.max_message) => r,
                () = self.shutdown.cancelled() => return,
            };
            let request = match next {
                Ok(Some(r)) => r,
                Ok(None) | Err(FrameError::Io(_)) => return,
                Err(e @ FrameError::TooLong { .. }) => {
                    let _ = end(&mut conn, &Status::out_of_range(e.to_string())).await;
                    return;
                }
                Err(e @ FrameError::Undecodable(_)) => {
                    let _ = end(&mut conn, &Status::invalid_argument(e.to_string())).await;
                    return;
                }
            };
            let sent =
                (!request.authorization.is_empty()).then_some(request.authorization.as_bytes());
            if let Err(refused) = self.auth.check(sent) {
                let _ = end(&mut conn, &refused).await;
                return;
            }
            if self.answer(&mut conn, request).await.is_err() {
                return;
            }
        }
    }

    /// Sends the records of one request and its status; an error only when
    /// the connection failed.
    async fn answer(&self, conn: &mut TcpStream, request: BulkFetchRequest) -> io::Result<()> {
        let fetch = request.fetch.unwrap_or_default();
        let started = self
            .store
            .check_identity(&fetch.expect_experts_index_sha256)
            .and_then(|()| {
                let (ids, priority, _) = fetch_args(&fetch);
                self.store.fetch(&ids, priority, Check::ByReceiver)
            });
        let mut stream = match started {
            Ok(s) => s,
            Err(e) => return end(conn, &Status::from(e)).await,
        };
        while let Some(chunk) = stream.next().await {
            let c = match chunk {
                Ok(c) => c,
                Err(e) => return end(conn, &Status::from(e)).await,
            };
            if c.offset == 0 {
                let head = BulkFetchReply {
                    reply: Some(Reply::Record(BulkRecord {
                        layer: c.layer,
                        expert: c.expert,
                        total_len: c.total_len,
                        checksum: c.checksum,
                    })),
                };
                write_frame(conn, &head).await?;
            }
            conn.write_all(&c.data).await?;
        }
        end(conn, &Status::ok("")).await
    }
}

async fn end(conn: &mut TcpStream, status: &Status) -> io::Result<()> {
    write_frame(conn, &end_frame(status)).await
}

/// Accepts on `listener` until `shutdown`, with TCP_NODELAY (the builder's
/// `tcp_nodelay` is ignored for a listener of ours, and without it a small
/// message, a ComputeExperts answer or a stream's trailers, waits for the
/// client's delayed ACK, 40 ms a layer on Linux). With `bulk`, connections
/// that open with the bulk magic's first byte are served there; every
/// other goes to gRPC through the returned stream.
pub fn incoming(
    listener: TcpListener,
    bulk: Option<Arc<BulkServer>>,
    shutdown: CancellationToken,
) -> ReceiverStream<io::Result<TcpStream>> {
    let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = shutdown.cancelled() => return,
            };
            let conn = match accepted {
                Ok((conn, _)) => conn,
                Err(e) => {
                    // Out of descriptors and the like: pass, after a pause.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Err(e) = conn.set_nodelay(true) {
                tracing::warn!("TCP_NODELAY: {e}");
            }
            let Some(bulk) = &bulk else {
                if tx.send(Ok(conn)).await.is_err() {
                    return;
                }
                continue;
            };
            let (bulk, tx) = (Arc::clone(bulk), tx.clone());
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                let peeked = tokio::time::timeout(FIRST_BYTE_WITHIN, conn.peek(&mut first)).await;
                if matches!(peeked, Ok(Ok(1))) && first[0] == MAGIC[0] {
                    let tracker = bulk.connections.clone();
                    tracker.spawn(bulk.serve(conn));
                } else {
                    let _ = tx.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = incoming(listener, None, CancellationToken::new());
        let _client = TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap());
    }
}
