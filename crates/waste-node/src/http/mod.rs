//! The OpenAI-compatible HTTP API of the node, served on the gRPC port (the
//! tonic routes ride in the same axum router, `server.rs`):
//! `POST /v1/chat/completions`, `POST /v1/completions` (both streaming
//! with server-sent events or not), `GET /v1/models`, `GET /v1/models/{id}`,
//! `GET /health` and `GET /metrics`. Errors come in OpenAI's JSON shape,
//! `{"error": {"message", "type", "param", "code"}}`, mapped from the node's
//! errors in one place ([`ApiError`]); so do 404 and 405 for what is not
//! routed (a gRPC request to an unknown method still gets gRPC's
//! UNIMPLEMENTED). With a node token set, every route but `/health` needs
//! `Authorization: Bearer <token>`.

mod completions;
pub use completions::{Kind, check};
pub mod openai;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::Error;
use crate::node::Node;

/// The HTTP routes of `node`, with OpenAI-shaped 404 and 405 answers for
/// anything else (gRPC requests excepted: see [`not_found`]).
pub fn router(node: Arc<Node>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completion))
        .route("/v1/models", get(models))
        // `{*id}`: ids such as `org/name` arrive unescaped from clients.
        .route("/v1/models/{*id}", get(model))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(middleware::from_fn_with_state(Arc::clone(&node), bearer));
    Router::new()
        .route("/health", get(health))
        .method_not_allowed_fallback(method_not_allowed)
        .merge(api)
        .with_state(node)
}

/// For a router that also serves gRPC: unrouted gRPC calls get gRPC's own
/// UNIMPLEMENTED, everything else OpenAI's 404.
pub async fn not_found(req: Request) -> Response {
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        let status = waste_proto::Status::unimplemented(format!("no method {}", req.uri().path()));
        return status.into_http::<axum::body::Body>().into_response();
    }
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "no route {} {}: this node serves /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics",
            req.method(),
            req.uri().path()
        ),
        kind: "invalid_request_error",
        code: Some("not_found"),
        param: None,
        reason: None,
    }
    .into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!("{} is not allowed on {}", req.method(), req.uri().path()),
        kind: "invalid_request_error",
        code: Some("method_not_allowed"),
        param: None,
        reason: None,
    }
    .into_response()
}

/// An error as OpenAI's API reports it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
    /// Why the request was refused, as the rejection metric counts it;
    /// None for a failure of the node.
    reason: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
            param: None,
            reason: Some("invalid_argument"),
        }
    }

    /// The reason a refused request is counted under, if it was refused.
    pub fn reason(&self) -> Option<&'static str> {
        self.reason
    }

    /// A bad request about one parameter.
    pub fn bad_param(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param),
            ..Self::bad_request(message)
        }
    }

    /// The `error` object, as sent in a response body or an SSE event.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, kind, code) = http_class(&e);
        if status.is_server_error() {
            tracing::warn!("request failed: {e:#}");
        }
        let param = match &e {
            Error::OutOfBounds { limit, .. } => limit.param,
            Error::ModelNotFound { .. } => Some("model"),
            _ => None,
        };
        Self {
            status,
            message: e.client_message(),
            kind,
            code,
            param,
            reason: e.rejection(),
        }
    }
}

/// The HTTP status, OpenAI error type and code of a node error; a shared
/// error (one store failure seen by several requests) is classed as its
/// cause, as the gRPC map does.
fn http_class(e: &Error) -> (StatusCode, &'static str, Option<&'static str>) {
    match e {
        Error::Shared(inner) => http_class(inner),
        Error::BadRequest(_) | Error::OutOfBounds { .. } => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", None)
        }
        Error::ModelNotFound { .. } => (
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            Some("model_not_found"),
        ),
        Error::Overloaded { .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            "server_error",
            Some("queue_full"),
        ),
        Error::ContextOverflow { .. } => (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("context_length_exceeded"),
        ),
        Error::SessionBusy(_) => (StatusCode::CONFLICT, "invalid_request_error", None),
        Error::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "server_error", None),
        Error::Store { .. }
        | Error::Transport(_)
        | Error::StoreLost { .. }
        | Error::WrongStore { .. } => (
            StatusCode::BAD_GATEWAY,
            "server_error",
            Some("expert_store"),
        ),
        Error::Tokenizer(_) | Error::ChatTemplate(_) => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", None)
        }
        Error::Config(_)
        | Error::RamPlan(_)
        | Error::Backbone { .. }
        | Error::Model(_)
        | Error::Format(_)
        | Error::Release(_)
        | Error::Record { .. }
        | Error::Mismatch(_) => (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(crate::error::RETRY_AFTER_SECS),
            );
        }
        response
    }
}

/// Requires the node's bearer token when one is set.
async fn bearer(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    let sent = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if node.auth.accepts(sent) {
        return next.run(req).await;
    }
    node.metrics.rejected_for("unauthenticated");
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: "a valid bearer token is required (Authorization: Bearer <token>)".into(),
        kind: "invalid_request_error",
        code: Some("invalid_api_key"),
        param: None,
        reason: Some("unauthenticated"),
    }
    .into_response()
}

async fn health(State(node): State<Arc<Node>>) -> Response {
    if node.draining() {
        let body = json!({"status": "shutting down"});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    if let Some(reason) = node.store_problem() {
        let body = json!({"status": "expert store unavailable", "reason": reason});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

/// The model object of `id`, one of the node's names.
fn model_object(node: &Node, id: &str) -> serde_json::Value {
    json!({
        "id": id,
        "object": "model",
        "created": node.started_unix(),
        "owned_by": "waste",
        "context_length": node.ctx_size,
    })
}

/// The model under its id (the same as `Info.model_id`); aliases are
/// answered by [`model`] but not listed, as one model is served.
async fn models(State(node): State<Arc<Node>>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [model_object(&node, &node.model_id())],
    }))
    .into_response()
}

async fn model(State(node): State<Arc<Node>>, Path(id): Path<String>) -> Response {
    match node.check_model(&id) {
        Ok(()) => axum::Json(model_object(&node, &id)).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        node.metrics.render(),
    )
        .into_response()
}
