//! Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): GQA with q/k/v biases, a
//! softmax top-k router over SwiGLU experts under `mlp.experts`, and one
//! shared expert of its own width whose output a 1-row linear gates per
//! token (`mlp.shared_expert_gate`); llama.cpp's `qwen2moe`. The forward
//! pass is `waste-model/src/arch/qwen2_moe.rs`.

mod gguf;

use crate::{Family, Gguf, GgufConfig, HF_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "qwen2_moe",
    model_types: &["qwen2_moe"],
    hf_architecture: "Qwen2MoeForCausalLM",
    moe: MoeNames {
        block: "mlp",
        proj: HF_GLU,
    },
    gguf: Some(Gguf {
        arch: "qwen2moe",
        experts: true,
        permute_qk: false,
        layer_names: Some(gguf::layer_name),
        row_vectors: &["ffn_gate_inp_shexp"],
        config: GgufConfig::GatedSharedExpert,
    }),
    releases: &[],
};
