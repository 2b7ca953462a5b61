//! The list of families, one line each, and lookups over it.

use crate::{Family, deepseek_v3, kimi_linear, llama, mixtral, qwen2_moe, qwen3_moe};

/// Every family waste runs. Adding a family adds its folder and one line here.
pub const FAMILIES: &[&Family] = &[
    &llama::FAMILY,
    &mixtral::FAMILY,
    &deepseek_v3::FAMILY,
    &qwen3_moe::FAMILY,
    &kimi_linear::FAMILY,
    &qwen2_moe::FAMILY,
];

/// The family that reads HF `model_type`.
pub fn by_model_type(model_type: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.model_types.contains(&model_type))
}

/// The family of a GGUF file of `arch`, with or without routed experts.
pub fn by_gguf_arch(arch: &str, experts: bool) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| {
        f.gguf
            .as_ref()
            .is_some_and(|g| g.arch == arch && g.experts == experts)
    })
}

/// The blocks that hold routed experts, family by family (repeats kept).
pub fn moe_blocks() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().map(|f| f.moe.block)
}

/// Whether some family keeps routed experts in a block called `block`.
pub fn is_moe_block(block: &str) -> bool {
    moe_blocks().any(|b| b == block)
}

/// 0 gate, 1 up, 2 down for an expert projection some family spells `proj`.
pub fn expert_projection(proj: &str) -> Option<usize> {
    FAMILIES
        .iter()
        .find_map(|f| f.moe.proj.iter().position(|p| *p == proj))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_types_and_gguf_archs_name_one_family() {
        for (i, a) in FAMILIES.iter().enumerate() {
            for b in &FAMILIES[i + 1..] {
                assert_ne!(a.name, b.name);
                for t in a.model_types {
                    assert!(
                        !b.model_types.contains(t),
                        "{t} in {} and {}",
                        a.name,
                        b.name
                    );
                }
                if let (Some(x), Some(y)) = (&a.gguf, &b.gguf) {
                    assert!((x.arch, x.experts) != (y.arch, y.experts), "{}", x.arch);
                }
            }
            for t in a.model_types {
                assert_eq!(by_model_type(t).map(|f| f.name), Some(a.name));
            }
        }
        assert!(by_model_type("gpt2").is_none());
        assert_eq!(by_gguf_arch("llama", true).map(|f| f.name), Some("mixtral"));
        assert_eq!(by_gguf_arch("llama", false).map(|f| f.name), Some("llama"));
        assert!(by_gguf_arch("qwen2", false).is_none());
    }

    #[test]
    fn both_expert_spellings_are_known() {
        assert!(is_moe_block("mlp") && is_moe_block("block_sparse_moe"));
        assert!(!is_moe_block("self_attn") && !is_moe_block("experts"));
        for (i, [a, b]) in [["gate_proj", "w1"], ["up_proj", "w3"], ["down_proj", "w2"]]
            .into_iter()
            .enumerate()
        {
            assert_eq!(
                (expert_projection(a), expert_projection(b)),
                (Some(i), Some(i))
            );
        }
        assert_eq!(expert_projection("w4"), None);
    }
}
