//! DeepSeek-V3 and Kimi K2 (`deepseek_v3`, `kimi_k2`): MLA attention and
//! DeepSeek-MoE (grouped sigmoid routing, shared experts); llama.cpp's
//! `deepseek2`. The forward pass is `waste-model/src/arch/deepseek_v3.rs`.

mod gguf;
mod release;

use crate::{Family, Gguf, GgufConfig, HF_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "deepseek_v3",
    model_types: &["deepseek_v3", "kimi_k2"],
    hf_architecture: "DeepseekV3ForCausalLM",
    moe: MoeNames {
        block: "mlp",
        proj: HF_GLU,
    },
    gguf: Some(Gguf {
        arch: "deepseek2",
        experts: true,
        permute_qk: false,
        layer_names: Some(gguf::layer_name),
        row_vectors: &[],
        config: GgufConfig::Deepseek2,
    }),
    releases: release::RELEASES,
};
