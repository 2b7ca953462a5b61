//! The Node gRPC service: decode the request, call the domain functions
//! (`request.rs`, `generate.rs`), encode the reply. Nothing else.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use waste_proto::node::v1 as pb;
use waste_proto::{Request, Response, Status};

use crate::generate::{Event, Summary};
use crate::node::Node;
use crate::request;

#[derive(Debug, Clone)]
pub struct NodeService {
    node: Arc<Node>,
}

impl NodeService {
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }
}

type GenerateStream = Pin<Box<dyn Stream<Item = Result<pb::GenerateResponse, Status>> + Send>>;

#[waste_proto::tonic::async_trait]
impl pb::node_server::Node for NodeService {
    type GenerateStream = GenerateStream;

    async fn generate(
        &self,
        req: Request<pb::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let rx = request::start(&self.node, &req.into_inner())?;
        let stream = ReceiverStream::new(rx).map(to_response);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn tokenize(
        &self,
        req: Request<pb::TokenizeRequest>,
    ) -> Result<Response<pb::TokenizeResponse>, Status> {
        Ok(Response::new(request::tokenize(
            &self.node,
            &req.into_inner(),
        )?))
    }

    async fn info(
        &self,
        _req: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        Ok(Response::new(request::info(&self.node)))
    }
}

/// One generation event as a protocol message.
fn to_response(e: crate::Result<Event>) -> Result<pb::GenerateResponse, Status> {
    let event = match e.map_err(Status::from)? {
        Event::Token {
            text,
            ids,
            logprobs,
        } => pb::generate_response::Event::Token(pb::Token {
            text,
            token_ids: ids,
            logprob: logprobs.map(|l| l.logprob),
        }),
        Event::Done(s) => pb::generate_response::Event::Stats(stats(&s)),
    };
    Ok(pb::GenerateResponse { event: Some(event) })
}

/// The final statistics as the protocol carries them.
pub fn stats(s: &Summary) -> pb::Stats {
    use waste_model::FinishReason as F;
    let finish = match s.finish {
        Some(F::Stop) => pb::FinishReason::Stop,
        Some(F::Length) => pb::FinishReason::Length,
        Some(F::Context) => pb::FinishReason::Context,
        Some(F::Cancelled) | None => pb::FinishReason::Cancelled,
    };
    pb::Stats {
        finish_reason: finish as i32,
        prompt_tokens: s.prompt_tokens as u32,
        cached_prompt_tokens: s.cached_prompt_tokens as u32,
        generated_tokens: s.generated_tokens as u32,
        time_to_first_token_ms: s.time_to_first_token.as_secs_f64() * 1e3,
        total_ms: s.total.as_secs_f64() * 1e3,
        tokens_per_second: s.decode_tokens_per_second(),
        prefill_tokens_per_second: s.prefill_tokens_per_second(),
        expert_bytes_read: s.prefill.bytes_read + s.decode.bytes_read,
        expert_bytes_per_token: s.bytes_per_token(),
        retention: s.retention(),
        matched_stop: s.matched_stop.clone(),
        prefetch_accuracy: s.prefetch_accuracy(),
    }
}
