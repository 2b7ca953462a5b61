//! The server end: reads the FetchExperts request with tonic's own decoder
//! (the request is small) and answers with a body that sends each chunk as
//! two DATA frames, its encoded fields and then its data, which hyper
//! writes to the socket from the caller's buffer (a vectored write) instead
//! of a copy in an encode buffer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use tokio_stream::Stream;
use tonic::codec::{Codec, Streaming};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use super::wire::{ChunkHead, chunk_prefix};
use crate::store::v1::{ExpertChunk, FetchExpertsRequest};

/// Reads the one request message of a FetchExperts call; a message longer
/// than `max_message` is OUT_OF_RANGE, a compressed one UNIMPLEMENTED (no
/// compression is offered), as the generated service answers them.
pub async fn read_request(
    request: http::Request<tonic::body::Body>,
    max_message: usize,
) -> Result<FetchExpertsRequest, Status> {
    if let Some(encoding) = request.headers().get("grpc-encoding")
        && encoding.as_bytes() != b"identity"
    {
        return Err(Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            String::from_utf8_lossy(encoding.as_bytes())
        )));
    }
    let decoder = ProstCodec::<ExpertChunk, FetchExpertsRequest>::default().decoder();
    let mut messages =
        Streaming::new_request(decoder, request.into_body(), None, Some(max_message));
    messages
        .message()
        .await?
        .ok_or_else(|| Status::internal("Missing request message."))
}

/// An answer that is only a status (gRPC's trailers-only response).
pub fn status_response(status: Status) -> http::Response<tonic::body::Body> {
    status.into_http()
}

/// The streamed answer: one chunk per item of `chunks` as it comes, then
/// the status (OK, or the first error, which ends the stream).
pub fn chunk_response<S>(chunks: S) -> http::Response<tonic::body::Body>
where
    S: Stream<Item = Result<(ChunkHead, Bytes), Status>> + Send + Unpin + 'static,
{
    let body = ChunkBody {
        chunks,
        data: None,
        done: false,
    };
    let mut response = http::Response::new(tonic::body::Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

struct ChunkBody<S> {
    chunks: S,
    /// The data of the chunk whose fields were just sent.
    data: Option<Bytes>,
    done: bool,
}

impl<S> HttpBody for ChunkBody<S>
where
    S: Stream<Item = Result<(ChunkHead, Bytes), Status>> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let status = match Pin::new(&mut self.chunks).poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok((head, data)))) => {
                let prefix = chunk_prefix(&head, data.len());
                if !data.is_empty() {
                    self.data = Some(data);
                }
                return Poll::Ready(Some(Ok(Frame::data(prefix))));
            }
            Poll::Ready(Some(Err(status))) => status,
            Poll::Ready(None) => Status::new(Code::Ok, ""),
        };
        self.done = true;
        let mut trailers = http::HeaderMap::new();
        if let Err(e) = status.add_header(&mut trailers) {
            // Only a message that is not valid header text gets here.
            let _ = Status::internal(e.message().to_string()).add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.data.is_none()
    }
}
