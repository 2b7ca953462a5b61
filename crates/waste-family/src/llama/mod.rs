//! Llama (`llama`, `mistral`): dense GQA decoders with a SwiGLU MLP; SmolLM2,
//! the demo model, is one. The forward pass is `waste-model/src/arch/llama.rs`.

use crate::{Family, Gguf, GgufConfig, HF_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "llama",
    model_types: &["llama", "mistral"],
    hf_architecture: "LlamaForCausalLM",
    moe: MoeNames {
        block: "mlp",
        proj: HF_GLU,
    },
    gguf: Some(Gguf {
        arch: "llama",
        experts: false,
        permute_qk: true,
        layer_names: None,
        row_vectors: &[],
        config: GgufConfig::Dense,
    }),
    releases: &[],
};
