//! The model families waste runs, described as data that every crate can
//! read: the converter (GGUF names, routed-expert names), the synthetic
//! stores and checkpoints, the test harness and the forward pass. Each
//! family is one folder (`llama/`, `mixtral/`, `qwen2_moe/`, `qwen3_moe/`,
//! `deepseek_v3/`, `kimi_linear/`) and one line in [`FAMILIES`]
//! (`registry.rs`); a family's synthetic releases are its `release.rs`
//! ([`release`]). What a family *computes* is its `ModelConfig`, parsed
//! in `waste-model/src/arch/<family>.rs`: that crate owns the layers.

#![forbid(unsafe_code)]

pub mod deepseek_v3;
mod family;
pub mod kimi_linear;
pub mod llama;
pub mod mixtral;
pub mod qwen2_moe;
pub mod qwen3_moe;
mod registry;
pub mod release;

pub use family::{Family, Gguf, GgufConfig, HF_GLU, MIXTRAL_GLU, MoeNames};
pub use registry::{
    FAMILIES, by_gguf_arch, by_model_type, expert_projection, is_moe_block, moe_blocks,
};
