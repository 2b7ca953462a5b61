//! The one mapping from [`Error`] to a gRPC status (STYLE 4.5), exhaustive
//! so that a new variant cannot reach a client unmapped. Codes follow the
//! contract in `proto/waste/store/v1/store.proto`: out-of-range ids are
//! INVALID_ARGUMENT there (not NOT_FOUND), since a valid id always exists.

use tonic::{Code, Status};

use crate::error::Error;

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let msg = match &e {
            // Logs keep the full paths; clients get store-relative ones.
            Error::Format(f) => f.redacted(),
            // fs_err's own text names the path again.
            Error::Io { path, source } => {
                let short = waste_format::error::short_path(path);
                format!("{short}: {source}").replace(&path.display().to_string(), &short)
            }
            _ => e.to_string(),
        };
        match e {
            Error::BadRequest { .. } => Status::invalid_argument(msg),
            Error::ChecksumMismatch { .. } => Status::data_loss(msg),
            Error::Overloaded {
                retry_after_secs, ..
            } => {
                let mut s = Status::resource_exhausted(msg);
                s.metadata_mut()
                    .insert("retry-after", retry_after_secs.into());
                s
            }
            Error::ShuttingDown => Status::unavailable(msg),
            Error::WrongStore { .. } => Status::failed_precondition(msg),
            Error::BadRecord { .. }
            | Error::Format(_)
            | Error::Config { .. }
            | Error::Io { .. }
            | Error::Transport(_)
            | Error::Internal { .. } => Status::new(Code::Internal, msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_maps_to_its_code() {
        let fmt = || waste_format::Error::LayerNotFound { layer: 1 };
        let cases = [
            (
                Error::BadRequest { reason: "x".into() },
                Code::InvalidArgument,
            ),
            (
                Error::ChecksumMismatch {
                    layer: 7,
                    expert: 113,
                    source: fmt(),
                },
                Code::DataLoss,
            ),
            (
                Error::Overloaded {
                    what: "x".into(),
                    retry_after_secs: 2,
                },
                Code::ResourceExhausted,
            ),
            (Error::ShuttingDown, Code::Unavailable),
            (
                Error::WrongStore {
                    expected: "a".into(),
                    found: "b".into(),
                },
                Code::FailedPrecondition,
            ),
            (
                Error::BadRecord {
                    layer: 1,
                    expert: 2,
                    reason: "x".into(),
                },
                Code::Internal,
            ),
            (Error::Format(fmt()), Code::Internal),
            (Error::Config { reason: "x".into() }, Code::Internal),
            (Error::Internal { what: "x".into() }, Code::Internal),
        ];
        for (e, code) in cases {
            let s = Status::from(e);
            assert_eq!(s.code(), code, "{s:?}");
            if code == Code::ResourceExhausted {
                assert_eq!(s.metadata().get("retry-after").unwrap(), "2");
            }
        }
        let dl = Status::from(Error::ChecksumMismatch {
            layer: 7,
            expert: 113,
            source: fmt(),
        });
        assert!(dl.message().contains("layer 7 expert 113"));
        // No server path reaches a client.
        let dl = Status::from(Error::from(waste_format::Error::ChecksumMismatch {
            path: "/srv/stores/qwen/experts/layer-007.experts".into(),
            layer: 7,
            expert: 113,
            offset: 0,
            expected: 1,
            found: 2,
        }));
        assert_eq!(dl.code(), Code::DataLoss);
        assert!(!dl.message().contains("/srv"), "{}", dl.message());
        assert!(
            dl.message().contains("qwen/experts/layer-007.experts"),
            "{}",
            dl.message()
        );
        let io = Status::from(Error::Format(waste_format::Error::Io {
            path: "/srv/stores/qwen/experts/index.json".into(),
            source: std::io::Error::other("x"),
        }));
        assert!(!io.message().contains("/srv"), "{}", io.message());
        let missing = std::path::Path::new("/srv/stores/qwen/experts/index.json");
        let source = fs_err::read(missing).unwrap_err();
        assert!(source.to_string().contains("/srv"), "{source}");
        let io = Status::from(Error::Io {
            path: missing.into(),
            source,
        });
        assert!(!io.message().contains("/srv"), "{}", io.message());
        assert!(
            io.message().contains("qwen/experts/index.json"),
            "{}",
            io.message()
        );
        // Format errors about client ids are the client's fault.
        let e = Error::from(waste_format::Error::ExpertOutOfRange {
            layer: 1,
            expert: 9,
            n_experts: 4,
        });
        assert_eq!(Status::from(e).code(), Code::InvalidArgument);
    }
}
