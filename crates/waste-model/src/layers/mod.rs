//! The building blocks of a decoder layer, shared by every architecture.

pub mod attention;
pub mod attn_res;
pub mod kda;
pub mod linear;
pub mod mla;
pub mod moe;
pub mod residual;
pub mod router;

pub use linear::{Linear, Loader};
