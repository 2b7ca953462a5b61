//! Bearer-token check for every ExpertStore call: `authorization: Bearer T`
//! compared in constant time. Health and reflection stay open (probes and
//! tools need no secret; they reveal no weights).

use std::sync::Arc;

use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Accepts every request when no token is configured.
#[derive(Debug, Clone)]
pub struct BearerAuth {
    expected: Option<Arc<[u8]>>,
}

impl BearerAuth {
    pub fn new(token: Option<&str>) -> Self {
        Self {
            expected: token.map(|t| Arc::from(format!("Bearer {t}").into_bytes())),
        }
    }
}

/// Equal without revealing, through timing, how long a prefix matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Interceptor for BearerAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(req);
        };
        match req.metadata().get("authorization") {
            Some(v) if constant_time_eq(v.as_bytes(), expected) => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong bearer token")),
            None => Err(Status::unauthenticated(
                "this store requires `authorization: Bearer <token>`",
            )),
        }
    }
}
