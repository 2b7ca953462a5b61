//! The daemon's FetchExperts route: in front of the generated service,
//! calls to FetchExperts are answered by [`waste_proto::fetch::server`],
//! which sends each record slice from its read buffer without tonic's
//! encode copy; every other call goes on to the generated service. Same
//! wire format, same statuses (validation and admission errors before any
//! chunk, a read error as the stream's final status), same metrics (the
//! [`FetchStream`] underneath is the one the generated service streams).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio_stream::StreamExt;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use waste_proto::fetch::{ChunkHead, PATH, server};

use crate::fetch::FetchStream;
use crate::service::fetch_args;
use crate::store::Store;

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;

/// Wraps the generated `ExpertStoreServer` (`inner`).
#[derive(Debug, Clone)]
pub struct FetchRoute<S> {
    inner: S,
    store: Arc<Store>,
    /// Largest request message decoded (`Limits::max_message_bytes`).
    max_message: usize,
}

impl<S> FetchRoute<S> {
    pub fn new(inner: S, store: Arc<Store>, max_message: usize) -> Self {
        Self {
            inner,
            store,
            max_message,
        }
    }
}

impl<S> Service<Request> for FetchRoute<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if req.uri().path() != PATH {
            return Box::pin(self.inner.call(req));
        }
        let (store, max_message) = (Arc::clone(&self.store), self.max_message);
        Box::pin(async move { Ok(fetch(&store, req, max_message).await) })
    }
}

impl<S: NamedService> NamedService for FetchRoute<S> {
    const NAME: &'static str = S::NAME;
}

async fn fetch(store: &Arc<Store>, req: Request, max_message: usize) -> Response {
    match start(store, req, max_message).await {
        Ok(stream) => server::chunk_response(stream.map(|r| {
            let c = r?;
            let head = ChunkHead {
                layer: c.layer,
                expert: c.expert,
                offset: c.offset,
                total_len: c.total_len,
                checksum: c.checksum,
            };
            Ok((head, c.data))
        })),
        Err(status) => server::status_response(status),
    }
}

async fn start(
    store: &Arc<Store>,
    req: Request,
    max_message: usize,
) -> Result<FetchStream, tonic::Status> {
    let req = server::read_request(req, max_message).await?;
    store.check_identity(&req.expect_experts_index_sha256)?;
    let (ids, priority, check) = fetch_args(&req);
    Ok(store.fetch(&ids, priority, check)?)
}
