//! The one mapping from node errors to gRPC status codes (STYLE 4.5).

use waste_proto::{Code, Status};

use crate::Error;

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let code = match &e {
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
                _ => Code::Internal,
            },
            Error::Transport(_) => Code::Unavailable,
            Error::Record { .. } | Error::Format(_) => Code::DataLoss,
            Error::Model(
                waste_model::Error::TokenOutOfRange { .. }
                | waste_model::Error::ContextOverflow { .. },
            ) => Code::InvalidArgument,
            Error::Config(_)
            | Error::RamPlan(_)
            | Error::Backbone { .. }
            | Error::Model(_)
            | Error::Tokenizer(_)
            | Error::Mismatch(_) => Code::Internal,
        };
        let mut status = Status::new(code, e.to_string());
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

#[cfg(test)]
mod tests {
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
}
