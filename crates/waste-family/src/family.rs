//! The description of one family: the fields every family fills in.

use crate::release::Release;

/// HF projection names of a SwiGLU expert: gate, up, down.
pub const HF_GLU: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];
/// Mixtral's spelling of the same projections.
pub const MIXTRAL_GLU: [&str; 3] = ["w1", "w3", "w2"];

/// What waste knows about a family outside its forward pass.
#[derive(Debug)]
pub struct Family {
    /// The family's folder name, also `waste-model`'s `arch/<name>.rs`.
    pub name: &'static str,
    /// HF `model_type` values read as this family; the first is the one
    /// a config synthesised for it (from a GGUF) carries.
    pub model_types: &'static [&'static str],
    /// HF `architectures[0]` of a config synthesised for it.
    pub hf_architecture: &'static str,
    /// HF names of its routed experts (for a dense family, the names its
    /// MoE sibling would use; nothing reads them).
    pub moe: MoeNames,
    /// How llama.cpp stores it, when waste reads its GGUF files.
    pub gguf: Option<Gguf>,
    /// The releases `waste synth` / `synth-store` imitate (`--like`).
    pub releases: &'static [Release],
}

/// Hugging Face names of a MoE block, router excluded:
/// `layers.{L}.{block}.experts.{E}.{proj}.weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeNames {
    /// `mlp` or `block_sparse_moe`.
    pub block: &'static str,
    /// Projection names of one expert: gate, up, down.
    pub proj: [&'static str; 3],
}

/// A family as llama.cpp writes it.
#[derive(Debug)]
pub struct Gguf {
    /// `general.architecture`.
    pub arch: &'static str,
    /// Whether the file has routed experts (`{arch}.expert_count` > 0):
    /// llama.cpp's `llama` arch holds both Llama and Mixtral.
    pub experts: bool,
    /// Whether llama.cpp permuted the q/k rows for its rope (its `llama`
    /// arch does; the reader undoes it).
    pub permute_qk: bool,
    /// Layer tensors beyond the names every arch shares: the HF name
    /// within the layer of GGUF `blk.{L}.{stem}.{suffix}`, if any.
    pub layer_names: Option<fn(stem: &str, suffix: &str) -> Option<String>>,
    /// Layer tensor stems that HF holds as one row, (1, n), and llama.cpp
    /// may store 1-D, [n]: its quantizer drops trailing dims of 1.
    pub row_vectors: &'static [&'static str],
    /// Which metadata keys become its config.json.
    pub config: GgufConfig,
}

/// The shapes of GGUF metadata the converter translates into a config.json
/// (`waste-convert/src/gguf/config.rs`); a family picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufConfig {
    /// Dense GQA: `intermediate_size` from `feed_forward_length`.
    Dense,
    /// Mixtral-style experts: `num_local_experts`, one `intermediate_size`.
    LocalExperts,
    /// Qwen3-MoE-style experts: `num_experts`, `moe_intermediate_size`.
    Experts,
    /// The same plus one shared expert of its own width under a sigmoid
    /// gate, q/k/v biases without an o bias, top-k weights never
    /// renormalised (`qwen2moe`).
    GatedSharedExpert,
    /// `deepseek2`: MLA with `attn_kv_b` split in two, grouped routing
    /// (`waste-convert/src/gguf/deepseek2.rs`).
    Deepseek2,
}
