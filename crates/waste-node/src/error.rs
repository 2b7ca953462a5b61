//! Errors of the compute node. Variants name the layer, expert, session or
//! setting at fault; `status.rs` maps each to a gRPC code in one place.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting that cannot work (before anything is bound or loaded).
    #[error("config: {0}")]
    Config(String),
    /// The RAM plan does not fit the budget.
    #[error("{0}")]
    RamPlan(String),
    /// The backbone folder could not be read.
    #[error("backbone {}: {source}", path.display())]
    Backbone {
        path: PathBuf,
        source: waste_format::checkpoint::Error,
    },
    /// A release the node runs straight from (`--model`: a GGUF file or a
    /// Hugging Face folder) could not be read.
    #[error(transparent)]
    Release(#[from] waste_convert::Error),
    /// The model could not be built or run.
    #[error(transparent)]
    Model(#[from] waste_model::Error),
    #[error(transparent)]
    Tokenizer(#[from] waste_model::TokenizerError),
    #[error(transparent)]
    ChatTemplate(#[from] waste_model::ChatTemplateError),
    /// The local experts folder could not be read, or a record is damaged.
    #[error(transparent)]
    Format(#[from] waste_format::Error),
    /// A record that does not parse as an expert.
    #[error("layer {layer} expert {expert}: {source}")]
    Record {
        layer: u32,
        expert: u32,
        source: waste_kernels::Error,
    },
    /// The expert store answered with an error (after retries where retrying makes sense).
    #[error("expert store: {code:?}: {message}")]
    Store { code: tonic::Code, message: String },
    /// The store and the backbone do not describe the same model.
    #[error("expert store does not match the backbone: {0}")]
    Mismatch(String),
    /// The experts (a store, or the local folder) are not those the
    /// backbone was converted with: their identities differ.
    #[error(
        "expert store {store} is not the one this backbone was converted with: its experts index sha256 is {found}, the node expects {expected}"
    )]
    WrongStore {
        store: String,
        expected: String,
        found: String,
    },
    /// The store did not come back within the reconnect budget.
    #[error("expert store {store} unreachable for {secs} s (--store-reconnect-secs): {reason}")]
    StoreLost {
        store: String,
        secs: u64,
        reason: String,
    },
    /// One failure handed to several waiters (the reads of one fetch).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
    /// A request the node cannot serve as asked.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A request field outside a bound the protocol documents.
    #[error("{} = {got}: must be {}", .limit.field, .limit.bound)]
    OutOfBounds {
        limit: &'static crate::limits::Limit,
        got: String,
    },
    /// A request named a model this node does not serve.
    #[error("model {model:?} is not served here (this node serves {served:?})")]
    ModelNotFound { model: String, served: Vec<String> },
    /// Every generation slot is taken and the queue is full.
    #[error("overloaded: {running} generations running and {queued} queued; retry later")]
    Overloaded { running: usize, queued: usize },
    /// The prompt plus the requested tokens do not fit the context.
    #[error("context overflow: {needed} positions needed, the context holds {capacity}")]
    ContextOverflow { needed: usize, capacity: usize },
    /// Another request is using this session.
    #[error("session {0:?} is in use by another request")]
    SessionBusy(String),
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
    #[error("transport: {0}")]
    Transport(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Seconds a refused client is told to wait (`retry-after`): about one
/// decode step of a big model, so a retry finds a finished generation.
pub const RETRY_AFTER_SECS: u64 = 1;

impl Error {
    /// Why the node refused a request, as the rejection metric counts it;
    /// None for a failure of the node itself.
    pub fn rejection(&self) -> Option<&'static str> {
        match self {
            Error::BadRequest(_)
            | Error::OutOfBounds { .. }
            | Error::ContextOverflow { .. }
            | Error::ChatTemplate(_) => Some("invalid_argument"),
            Error::ModelNotFound { .. } => Some("model_not_found"),
            Error::Overloaded { .. } => Some("queue_full"),
            Error::SessionBusy(_) => Some("session_busy"),
            Error::ShuttingDown => Some("shutting_down"),
            Error::Shared(inner) => inner.rejection(),
            Error::WrongStore { .. } | Error::StoreLost { .. } => None,
            Error::Config(_)
            | Error::RamPlan(_)
            | Error::Backbone { .. }
            | Error::Release(_)
            | Error::Model(_)
            | Error::Tokenizer(_)
            | Error::Format(_)
            | Error::Record { .. }
            | Error::Store { .. }
            | Error::Mismatch(_)
            | Error::Transport(_) => None,
        }
    }

    /// Whether a store error is worth retrying (the store restarting,
    /// overloaded, or slow), per STYLE 4.5. `Cancelled` counts: the node
    /// cancels its own calls by dropping them and never sees that status,
    /// so one that arrives is the store's stream reset by a store going
    /// down mid-reply (seen when a store is killed under load).
    pub fn is_retryable(&self) -> bool {
        if let Error::Shared(inner) = self {
            return inner.is_retryable();
        }
        matches!(
            self,
            Error::Store {
                code: tonic::Code::Unavailable
                    | tonic::Code::ResourceExhausted
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled,
                ..
            } | Error::Transport(_)
        )
    }
}

impl Error {
    /// A status the store sent, its message prefixed with the store's address.
    pub fn from_store(self, addr: &str) -> Self {
        match self {
            Error::Store { code, message } => Error::Store {
                code,
                message: format!("{addr}: {message}"),
            },
            other => other,
        }
    }

    /// The message a client sees: file paths of the node's folders cut to
    /// their last components (logs keep them whole).
    pub fn client_message(&self) -> String {
        match self {
            Error::Format(f) => f.redacted(),
            // Its text names the node's files.
            Error::Release(_) => "the model's files could not be read: see the node's log".into(),
            Error::Shared(inner) => inner.client_message(),
            other => other.to_string(),
        }
    }
}

/// Failures that say the node is set up wrong for this store, not that the
/// store is lost: retrying cannot help, so they are refused at once, in words.
/// Each is (a text somewhere in the error's source chain, the status, what to
/// tell the operator).
const MISCONFIGURED: &[(&str, tonic::Code, &str)] = &[
    (
        "invalid peer certificate",
        tonic::Code::Unauthenticated,
        "TLS: the store's certificate is not trusted by the CA given with --store-ca",
    ),
    // A TLS server answers an HTTP/2 preface with a TLS alert, which h2 reads
    // as a frame header of impossible length.
    (
        "frame with invalid size",
        tonic::Code::FailedPrecondition,
        "the store did not answer in plain-text gRPC: if it serves TLS (--tls-cert), address it as https:// and give --store-ca",
    ),
    // A plain-text server answers a TLS ClientHello with HTTP/2 bytes.
    (
        "InvalidContentType",
        tonic::Code::FailedPrecondition,
        "the store did not answer in TLS: address it as http://, or start it with --tls-cert and --tls-key",
    ),
];

impl From<tonic::Status> for Error {
    /// A status carrying a source error was made on this side from a
    /// failed connection (tonic maps an HTTP/2 stream broken by a store
    /// that died mid-reply to INTERNAL or UNKNOWN, with the h2 error as
    /// source): a transport failure, retried. A status the store sent
    /// arrives in trailers and never has a source.
    fn from(s: tonic::Status) -> Self {
        let mut texts = vec![s.message().to_string()];
        let mut cause = std::error::Error::source(&s);
        while let Some(c) = cause {
            texts.push(c.to_string());
            cause = c.source();
        }
        if let Some((code, message, text)) =
            MISCONFIGURED.iter().find_map(|(sign, code, message)| {
                texts
                    .iter()
                    .find(|t| t.contains(sign))
                    .map(|t| (*code, *message, t))
            })
        {
            return Error::Store {
                code,
                message: format!("{message} ({text})"),
            };
        }
        let local = std::error::Error::source(&s).is_some();
        if local && matches!(s.code(), tonic::Code::Internal | tonic::Code::Unknown) {
            return Error::Transport(format!("{:?}: {}", s.code(), s.message()));
        }
        Error::Store {
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use tonic::Code;

    #[test]
    fn transient_store_statuses_are_retried_and_request_errors_are_not() {
        let store = |code| Error::Store {
            code,
            message: String::new(),
        };
        for code in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::DeadlineExceeded,
            Code::Cancelled,
        ] {
            assert!(store(code).is_retryable(), "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::Unauthenticated,
            Code::DataLoss,
        ] {
            assert!(!store(code).is_retryable(), "{code:?}");
        }
        assert!(Error::Transport("reset".into()).is_retryable());
        let untrusted = Error::from(tonic::Status::unavailable(
            "invalid peer certificate: BadSignature",
        ));
        assert!(!untrusted.is_retryable(), "{untrusted}");
        assert!(untrusted.to_string().contains("--store-ca"), "{untrusted}");
        // h2's text for a TLS alert read as a frame, and rustls's for HTTP/2
        // bytes read as a TLS record.
        for (text, hint) in [
            (
                "h2 protocol error: connection error detected: frame with invalid size",
                "https://",
            ),
            (
                "received corrupt message of type InvalidContentType",
                "http://",
            ),
        ] {
            let wrong = Error::from(tonic::Status::internal(text));
            assert!(!wrong.is_retryable(), "{wrong}");
            assert!(wrong.to_string().contains(hint), "{wrong}");
        }
        let shared = |e| Error::Shared(std::sync::Arc::new(e));
        assert!(!shared(store(Code::DataLoss)).is_retryable());
        assert!(shared(Error::Transport("reset".into())).is_retryable());
    }

    /// INTERNAL from the store itself is a request that will fail again;
    /// INTERNAL made here from a broken HTTP/2 stream is the store going
    /// away, worth a retry.
    #[test]
    fn an_internal_status_is_retried_only_when_made_from_a_transport_error() {
        let sent = tonic::Status::internal("record 3 failed");
        assert!(!Error::from(sent).is_retryable());
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let mut local = tonic::Status::internal("h2 protocol error: http2 error");
        local.set_source(std::sync::Arc::new(broken));
        assert!(Error::from(local.clone()).is_retryable());
        assert!(Error::from(local).to_string().contains("h2 protocol error"));
    }
}
