//! Which tensors are routed experts, by their Hugging Face state-dict names
//! alone: `…layers.{L}.{block}.experts.{E}.{proj}.{suffix}` with the blocks
//! and projection spellings of the families in `waste-family` (`mlp` or
//! `block_sparse_moe`; `gate_proj`/`w1` (gate), `up_proj`/`w3` (up),
//! `down_proj`/`w2` (down)). `shared_experts` are backbone. Also which
//! backbone tensors are routers, whose precision a conversion never lowers.

/// One routed expert's projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExpertName {
    pub layer: u32,
    pub expert: u32,
    /// 0 gate, 1 up, 2 down.
    pub proj: usize,
}

/// The expert a tensor belongs to and the rest of its name after the
/// projection (`weight`, `weight_scale_inv`, `weight_packed`, `bias`, ...),
/// or `None` if it is not part of a routed expert.
pub fn parse_expert(name: &str) -> Option<(ExpertName, &str)> {
    let (_, rest) = name.split_once("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer = layer.parse().ok()?;
    let (block, rest) = rest.split_once('.')?;
    if !waste_family::is_moe_block(block) {
        return None;
    }
    let rest = rest.strip_prefix("experts.")?;
    let (expert, rest) = rest.split_once('.')?;
    let expert = expert.parse().ok()?;
    let (proj, suffix) = rest.split_once('.')?;
    let proj = waste_family::expert_projection(proj)?;
    Some((
        ExpertName {
            layer,
            expert,
            proj,
        },
        suffix,
    ))
}

/// Whether a backbone tensor is a MoE router (`{block}.gate.weight`, its
/// `e_score_correction_bias`): kept in its source precision by every
/// backbone format, since rounding it can flip routing decisions.
pub fn is_router(name: &str) -> bool {
    waste_family::moe_blocks().any(|b| {
        name.ends_with(&format!(".{b}.gate.weight"))
            || name.contains(&format!(".{b}.gate.e_score_correction_bias"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_experts_are_found_in_every_spelling() {
        let (e, s) = parse_expert("model.layers.3.mlp.experts.17.down_proj.weight").unwrap();
        assert_eq!((e.layer, e.expert, e.proj, s), (3, 17, 2, "weight"));
        let (e, s) = parse_expert(
            "language_model.model.layers.1.block_sparse_moe.experts.0.w3.weight_packed",
        )
        .unwrap();
        assert_eq!((e.layer, e.expert, e.proj, s), (1, 0, 1, "weight_packed"));
        let (e, s) =
            parse_expert("model.layers.2.mlp.experts.5.gate_proj.weight_scale_inv").unwrap();
        assert_eq!((e.proj, s), (0, "weight_scale_inv"));
        for not in [
            "model.layers.1.mlp.shared_experts.gate_proj.weight",
            "model.layers.1.mlp.gate_proj.weight",
            "model.layers.1.mlp.gate.weight",
            "model.layers.x.mlp.experts.1.w1.weight",
            "model.layers.1.mlp.experts.1.w4.weight",
            "model.layers.1.attn.experts.1.w1.weight",
        ] {
            assert!(parse_expert(not).is_none(), "{not}");
        }
    }

    #[test]
    fn routers_are_recognised() {
        assert!(is_router("model.layers.1.mlp.gate.weight"));
        assert!(is_router("model.layers.1.mlp.gate.e_score_correction_bias"));
        assert!(is_router("model.layers.0.block_sparse_moe.gate.weight"));
        assert!(!is_router("model.layers.0.mlp.gate_proj.weight"));
        assert!(!is_router("model.layers.0.self_attn.g_proj.weight"));
    }
}
