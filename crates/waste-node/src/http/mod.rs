//! The OpenAI-compatible HTTP API of the node, served on the gRPC port (the
//! tonic routes ride in the same axum router, `server.rs`):
//! `POST /v1/chat/completions`, `POST /v1/completions` (both streaming
//! with server-sent events or not), `GET /v1/models`, `GET /health` and
//! `GET /metrics`. Errors come in OpenAI's JSON shape,
//! `{"error": {"message", "type", "param", "code"}}`, mapped from the node's
//! errors in one place ([`ApiError`]). With a node token set, every route
//! but `/health` needs `Authorization: Bearer <token>`.

mod completions;
pub mod openai;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::Error;
use crate::node::Node;

/// The HTTP routes of `node`.
pub fn router(node: Arc<Node>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completion))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&node), bearer));
    Router::new()
        .route("/health", get(health))
        .merge(api)
        .with_state(node)
}

/// An error as OpenAI's API reports it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
            param: None,
        }
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
        let (status, kind, code) = match &e {
            Error::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
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
            | Error::WrongStore { .. }
            | Error::Shared(_) => (
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
            | Error::Record { .. }
            | Error::Mismatch(_) => (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None),
        };
        if status.is_server_error() {
            tracing::warn!("request failed: {e:#}");
        }
        Self {
            status,
            message: e.client_message(),
            kind,
            code,
            param: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
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
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: "a valid bearer token is required (Authorization: Bearer <token>)".into(),
        kind: "invalid_request_error",
        code: Some("invalid_api_key"),
        param: None,
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

async fn models(State(node): State<Arc<Node>>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": node.model_id(),
            "object": "model",
            "created": node.started_unix(),
            "owned_by": "waste",
            "context_length": node.ctx_size,
        }],
    }))
    .into_response()
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        node.metrics.render(),
    )
        .into_response()
}
