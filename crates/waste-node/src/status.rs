//! The one mapping from node errors to gRPC status codes (STYLE 4.5).

use waste_proto::{Code, Status};

use crate::Error;

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let mut status = Status::new(code(&e), e.client_message());
        if let Error::Overloaded { .. } = e {
            status.metadata_mut().insert(
                "retry-after",
                crate::error::RETRY_AFTER_SECS
                    .to_string()
                    .parse()
                    .expect("digits are ASCII"),
            );
        }
        status
    }
}

fn code(e: &Error) -> Code {
    match e {
        Error::BadRequest(_)
        | Error::OutOfBounds { .. }
        | Error::ContextOverflow { .. }
        | Error::ChatTemplate(_) => Code::InvalidArgument,
        Error::ModelNotFound { .. } => Code::NotFound,
        Error::Overloaded { .. } => Code::ResourceExhausted,
        Error::SessionBusy(_) => Code::Aborted,
        Error::ShuttingDown => Code::Unavailable,
        Error::Store { code, .. } => match code {
            Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded => {
                Code::Unavailable
            }
            Code::DataLoss => Code::DataLoss,
            Code::FailedPrecondition => Code::FailedPrecondition,
            _ => Code::Internal,
        },
        Error::Transport(_) | Error::StoreLost { .. } => Code::Unavailable,
        Error::WrongStore { .. } => Code::FailedPrecondition,
        Error::Shared(inner) => code(inner),
        Error::Record { .. } | Error::Format(_) | Error::Release(_) => Code::DataLoss,
        Error::Model(
            waste_model::Error::TokenOutOfRange { .. } | waste_model::Error::ContextOverflow { .. },
        ) => Code::InvalidArgument,
        Error::Config(_)
        | Error::RamPlan(_)
        | Error::Backbone { .. }
        | Error::Model(_)
        | Error::Tokenizer(_)
        | Error::Mismatch(_) => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn refusals_get_the_protocol_codes() {
        let limit = &crate::limits::TEMPERATURE;
        let bad = Status::from(Error::OutOfBounds {
            limit,
            got: "101".into(),
        });
        assert_eq!(bad.code(), Code::InvalidArgument);
        assert!(
            bad.message().contains("sampling.temperature") && bad.message().contains("0 to 100")
        );
        let busy = Status::from(Error::Overloaded {
            running: 1,
            queued: 0,
        });
        assert_eq!(busy.code(), Code::ResourceExhausted);
        assert_eq!(
            busy.metadata()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let unknown = Error::ModelNotFound {
            model: "x".into(),
            served: vec!["m".into()],
        };
        assert_eq!(Status::from(unknown).code(), Code::NotFound);
    }

    #[test]
    fn corruption_is_data_loss_without_server_paths_and_a_wrong_store_a_failed_precondition() {
        let corrupt = || {
            Error::Format(waste_format::Error::ChecksumMismatch {
                path: "/srv/stores/qwen/experts/layer-003.experts".into(),
                layer: 3,
                expert: 5,
                offset: 4096,
                expected: 1,
                found: 2,
            })
        };
        for e in [corrupt(), Error::Shared(Arc::new(corrupt()))] {
            let s = Status::from(e);
            assert_eq!(s.code(), Code::DataLoss);
            assert!(s.message().contains("layer 3 expert 5"), "{}", s.message());
            assert!(s.message().contains("qwen/experts"), "{}", s.message());
            assert!(!s.message().contains("/srv"), "{}", s.message());
        }
        let wrong = Error::WrongStore {
            store: "http://s:1".into(),
            expected: "aa".into(),
            found: "bb".into(),
        };
        let s = Status::from(wrong);
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert!(s.message().contains("aa") && s.message().contains("bb"));
        let refused = Error::Store {
            code: Code::FailedPrecondition,
            message: "wrong store".into(),
        };
        assert_eq!(Status::from(refused).code(), Code::FailedPrecondition);
        let lost = Error::StoreLost {
            store: "http://s:1".into(),
            secs: 3,
            reason: "connection refused".into(),
        };
        let s = Status::from(lost);
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.message().contains("connection refused"));
    }
}
