//! The one mapping from node errors to gRPC status codes (STYLE 4.5).

use waste_proto::{Code, Status};

use crate::Error;

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::BadRequest(_) | Error::ContextOverflow { .. } | Error::ChatTemplate(_) => {
                Code::InvalidArgument
            }
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
        Status::new(code, e.to_string())
    }
}
