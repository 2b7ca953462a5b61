//! Kimi Linear and Kimi K3 (`kimi_linear`, `kimi_k3`): hybrid KDA / MLA
//! attention, latent MoE with SwiGLU or SiTU-GLU experts named
//! `block_sparse_moe.experts.{e}.w1/w3/w2` and, in K3, attention residuals.
//! No GGUF form. The forward pass is `waste-model/src/arch/kimi_linear.rs`.

mod release;

use crate::{Family, MIXTRAL_GLU, MoeNames};

pub const FAMILY: Family = Family {
    name: "kimi_linear",
    model_types: &["kimi_linear", "kimi_k3"],
    hf_architecture: "KimiLinearForCausalLM",
    moe: MoeNames {
        block: "block_sparse_moe",
        proj: MIXTRAL_GLU,
    },
    gguf: None,
    releases: release::RELEASES,
};
