//! Mixtral: GQA with an optional sliding window and a softmax top-k router
//! over SwiGLU experts named `block_sparse_moe.experts.{e}.w1/w3/w2`; in a
//! GGUF, llama.cpp's `llama` arch with experts. The forward pass is
//! `waste-model/src/arch/mixtral.rs`.

use crate::{Family, Gguf, GgufConfig, MIXTRAL_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "mixtral",
    model_types: &["mixtral"],
    hf_architecture: "MixtralForCausalLM",
    moe: MoeNames {
        block: "block_sparse_moe",
        proj: MIXTRAL_GLU,
    },
    gguf: Some(Gguf {
        arch: "llama",
        experts: true,
        permute_qk: true,
        layer_names: None,
        row_vectors: &[],
        config: GgufConfig::LocalExperts,
    }),
    releases: &[],
};
