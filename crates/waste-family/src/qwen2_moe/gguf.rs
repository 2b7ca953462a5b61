//! The shared-expert tensors of llama.cpp's `qwen2moe`, beyond the names
//! every arch shares (its q/k/v biases are among those).

/// The HF name within the layer (suffix included) of GGUF `{stem}.{suffix}`.
pub(super) fn layer_name(stem: &str, suffix: &str) -> Option<String> {
    let hf = match stem {
        // The 1-row linear whose sigmoid scales the shared expert.
        "ffn_gate_inp_shexp" => "mlp.shared_expert_gate",
        "ffn_gate_shexp" => "mlp.shared_expert.gate_proj",
        "ffn_up_shexp" => "mlp.shared_expert.up_proj",
        "ffn_down_shexp" => "mlp.shared_expert.down_proj",
        _ => return None,
    };
    Some(format!("{hf}.{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_expert_and_its_gate_take_hf_names() {
        assert_eq!(
            layer_name("ffn_gate_inp_shexp", "weight").as_deref(),
            Some("mlp.shared_expert_gate.weight")
        );
        assert_eq!(
            layer_name("ffn_down_shexp", "weight").as_deref(),
            Some("mlp.shared_expert.down_proj.weight")
        );
        // The router and the biases are the shared table's.
        assert_eq!(layer_name("ffn_gate_inp", "weight"), None);
        assert_eq!(layer_name("attn_q", "bias"), None);
    }
}
