//! Bearer-token interceptors for both daemons and their clients. The only
//! non-generated code in this crate: transport glue that the store and the
//! node (which may not depend on each other) both need, kept beside the
//! protocols they protect. Health and reflection are not wrapped by callers.

use std::sync::Arc;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Server side: requires `authorization: Bearer <token>` when a token is
/// configured, compared in constant time; accepts everything otherwise.
#[derive(Debug, Clone)]
pub struct BearerAuth {
    expected: Option<Arc<[u8]>>,
}

impl BearerAuth {
    pub fn new(token: Option<&str>) -> Self {
        Self {
            expected: token.map(|t| Arc::from(t.as_bytes())),
        }
    }

    /// Whether an `authorization` header value (None: absent) passes; the
    /// HTTP routes of the node check theirs with this too. The scheme is
    /// matched without regard to case and may be followed by several spaces
    /// (RFC 7235: `credentials = auth-scheme 1*SP token68`); the token
    /// itself is compared exactly.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        match (&self.expected, authorization) {
            (None, _) => true,
            (Some(expected), Some(v)) => {
                bearer_token(v).is_some_and(|sent| constant_time_eq(sent, expected))
            }
            (Some(_), None) => false,
        }
    }
}

impl BearerAuth {
    /// [`BearerAuth::accepts`] as a status: UNAUTHENTICATED saying whether
    /// the token was wrong or missing (the store's bulk channel answers
    /// with it too).
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), Status> {
        match (self.accepts(authorization), authorization) {
            (true, _) => Ok(()),
            (false, Some(_)) => Err(Status::unauthenticated("wrong bearer token")),
            (false, None) => Err(Status::unauthenticated(
                "this service requires `authorization: Bearer <token>`",
            )),
        }
    }
}

/// The credentials of a `Bearer` authorization value, None for another scheme.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let (scheme, rest) = value.split_at_checked(SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

/// Equal without revealing, through timing, how long a prefix matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Interceptor for BearerAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let sent = req
            .metadata()
            .get("authorization")
            .map(tonic::metadata::MetadataValue::as_bytes);
        self.check(sent).map(|()| req)
    }
}

/// Client side: adds `authorization: Bearer <token>` to every call.
#[derive(Debug, Clone, Default)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl BearerToken {
    /// None sends no header; a token that is not valid header text is an error.
    pub fn new(token: Option<&str>) -> Result<Self, String> {
        match token {
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Self(Some(v)))
                .map_err(|_| "the token is not valid header text".to_string()),
            None => Ok(Self(None)),
        }
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::BearerAuth;

    #[test]
    fn the_scheme_is_matched_without_case_and_the_token_exactly() {
        let auth = BearerAuth::new(Some("s3cret"));
        for ok in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR   s3cret",
        ] {
            assert!(auth.accepts(Some(ok.as_bytes())), "{ok:?}");
        }
        for bad in [
            "Bearer S3CRET",
            "Bearer s3cre",
            "Bearer s3cret ",
            "Bearers3cret",
            "Basic s3cret",
            "Bearer",
            "Bearer ",
            "s3cret",
            "",
        ] {
            assert!(!auth.accepts(Some(bad.as_bytes())), "{bad:?}");
        }
        assert!(!auth.accepts(None));
        assert!(BearerAuth::new(None).accepts(None));
    }
}
