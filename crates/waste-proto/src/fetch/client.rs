//! The client end: calls FetchExperts on any gRPC channel (with its
//! interceptors, TLS and all) and yields the chunks with their data still
//! in the HTTP/2 frames they came in. Statuses are made as tonic makes them
//! (the same codes, and a source error on those raised on this side), so
//! callers tell a store's answer from a broken connection the same way.

use std::pin::Pin;

use bytes::Bytes;
use http_body::Body as HttpBody;
use http_body_util::BodyExt;
use prost::Message;
use tonic::client::GrpcService;
use tonic::{Code, Status};

use super::PATH;
use super::wire::{ChunkDecoder, ChunkParts, MESSAGE_PREFIX};
use crate::store::v1::FetchExpertsRequest;

type BoxBody =
    Pin<Box<dyn HttpBody<Data = Bytes, Error = Box<dyn std::error::Error + Send + Sync>> + Send>>;

/// The chunks of one FetchExperts call, as they arrive.
pub struct ChunkStream {
    body: BoxBody,
    decoder: ChunkDecoder,
    http_status: http::StatusCode,
    done: bool,
}

impl std::fmt::Debug for ChunkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStream")
            .field("decoder", &self.decoder)
            .field("http_status", &self.http_status)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// Starts `ExpertStore.FetchExperts` on `service`; messages longer than
/// `max_message` (a chunk's data plus a few bytes) end the stream with
/// OUT_OF_RANGE.
pub async fn fetch_experts<T>(
    service: &mut T,
    request: &FetchExpertsRequest,
    max_message: usize,
) -> Result<ChunkStream, Status>
where
    T: GrpcService<tonic::body::Body>,
    T::ResponseBody: HttpBody<Data = Bytes> + Send + 'static,
    <T::ResponseBody as HttpBody>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut framed = Vec::with_capacity(MESSAGE_PREFIX + request.encoded_len());
    framed.push(0);
    framed.extend_from_slice(&(request.encoded_len() as u32).to_be_bytes());
    request.encode(&mut framed).expect("a Vec grows as needed");
    let body = http_body_util::Full::new(Bytes::from(framed));
    let http_request = http::Request::builder()
        .method(http::Method::POST)
        .uri(PATH)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(tonic::body::Body::new(body))
        .expect("static parts are valid");
    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {}", e.into())))?;
    let response = service
        .call(http_request)
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    // A trailers-only answer: the status came in the headers.
    if let Some(status) = Status::from_header_map(response.headers())
        && status.code() != Code::Ok
    {
        return Err(status);
    }
    let http_status = response.status();
    let body = response.into_body().map_err(Into::into);
    Ok(ChunkStream {
        body: Box::pin(body),
        decoder: ChunkDecoder::new(max_message),
        http_status,
        done: false,
    })
}

impl ChunkStream {
    /// The next chunk; `Ok(None)` once the store ended the stream with OK.
    pub async fn next(&mut self) -> Result<Option<ChunkParts>, Status> {
        loop {
            if let Some(chunk) = self.decoder.next_chunk()? {
                return Ok(Some(chunk));
            }
            if self.done {
                return Ok(None);
            }
            let frame = match self.body.frame().await {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Err(Status::from_error(e)),
                None => return self.end(None),
            };
            match frame.into_data() {
                Ok(data) => self.decoder.push(data),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        return self.end(Some(&trailers));
                    }
                }
            }
        }
    }

    /// The stream's end: its status from the trailers, or from the HTTP
    /// status when they are missing (gRPC's HTTP-to-status mapping).
    fn end(&mut self, trailers: Option<&http::HeaderMap>) -> Result<Option<ChunkParts>, Status> {
        self.done = true;
        if let Some(status) = trailers.and_then(Status::from_header_map) {
            if status.code() != Code::Ok {
                return Err(status);
            }
            if !self.decoder.is_idle() {
                return Err(Status::internal("the stream ended inside a message"));
            }
            return Ok(None);
        }
        let code = match self.http_status {
            http::StatusCode::BAD_REQUEST => Code::Internal,
            http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            http::StatusCode::FORBIDDEN => Code::PermissionDenied,
            http::StatusCode::NOT_FOUND => Code::Unimplemented,
            http::StatusCode::TOO_MANY_REQUESTS
            | http::StatusCode::BAD_GATEWAY
            | http::StatusCode::SERVICE_UNAVAILABLE
            | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
            _ => Code::Unknown,
        };
        Err(Status::new(
            code,
            format!(
                "the stream ended without grpc-status (HTTP status {})",
                self.http_status.as_u16()
            ),
        ))
    }
}
