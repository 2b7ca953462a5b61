//! Qwen3-MoE: GQA with q/k norms, a softmax router over SwiGLU experts
//! under `mlp.experts`; llama.cpp's `qwen3moe`. The forward pass is
//! `waste-model/src/arch/qwen3_moe.rs`.

mod release;

use crate::{Family, Gguf, GgufConfig, HF_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "qwen3_moe",
    model_types: &["qwen3_moe"],
    hf_architecture: "Qwen3MoeForCausalLM",
    moe: MoeNames {
        block: "mlp",
        proj: HF_GLU,
    },
    gguf: Some(Gguf {
        arch: "qwen3moe",
        experts: true,
        permute_qk: false,
        layer_names: None,
        row_vectors: &[],
        config: GgufConfig::Experts,
    }),
    releases: release::RELEASES,
};
