//! The MLA and DeepSeek-MoE tensors of llama.cpp's `deepseek2`, beyond the
//! names every arch shares; `attn_k_b` / `attn_v_b` become `kv_b_proj`
//! together (`waste-convert/src/gguf/deepseek2.rs`).

/// The HF name within the layer (suffix included) of GGUF `{stem}.{suffix}`.
pub(super) fn layer_name(stem: &str, suffix: &str) -> Option<String> {
    let hf = match (stem, suffix) {
        // The router's selection bias, a bare HF parameter.
        ("exp_probs_b", "bias") => return Some("mlp.gate.e_score_correction_bias".into()),
        (_, "bias") => return None,
        ("attn_q_a", _) => "self_attn.q_a_proj",
        ("attn_q_a_norm", _) => "self_attn.q_a_layernorm",
        ("attn_q_b", _) => "self_attn.q_b_proj",
        ("attn_kv_a_mqa", _) => "self_attn.kv_a_proj_with_mqa",
        ("attn_kv_a_norm", _) => "self_attn.kv_a_layernorm",
        ("attn_kv_b", _) => "self_attn.kv_b_proj",
        ("ffn_gate_shexp", _) => "mlp.shared_experts.gate_proj",
        ("ffn_up_shexp", _) => "mlp.shared_experts.up_proj",
        ("ffn_down_shexp", _) => "mlp.shared_experts.down_proj",
        _ => return None,
    };
    Some(format!("{hf}.{suffix}"))
}
