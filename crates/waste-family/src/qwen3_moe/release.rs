//! Qwen3-30B-A3B, as `waste synth` and `waste synth-store` imitate it.

use serde_json::{Value, json};

use crate::HF_GLU;
use crate::release::{
    BackboneTensor, ExpertAct, ExpertShape, Fill, Options, Release, Store, StoreShape, Tensor,
    Tensors, depth, layer_with_norms,
};

/// The experts of the qwen3-30b-a3b release.
const EXPERTS: ExpertShape = ExpertShape {
    d_model: 2048,
    d_ff: 768,
    n_experts: 128,
    top_k: 8,
    activation: ExpertAct::Silu,
};

/// The releases of this family.
pub(super) const RELEASES: &[Release] = &[Release {
    // Qwen/Qwen3-30B-A3B: bf16, 128 experts of 2048x768, top-8.
    name: "qwen3-30b-a3b",
    model_type: "qwen3_moe",
    checkpoint: qwen3,
    store: Some(StoreShape {
        experts: EXPERTS,
        hidden: 2048,
        config: store_config,
        layer_tensors: Some(store_layer),
    }),
}];

/// Qwen3-30B-A3B (`qwen3_moe`, bf16).
fn qwen3(o: &Options) -> (Value, Vec<Tensor>) {
    let (layers, _) = depth(o, 48, 0);
    let experts = o.experts.unwrap_or(128);
    let vocab = o.vocab.unwrap_or(151_936);
    let (hidden, moe_inter, heads, kv_heads, head_dim) = (2048, 768, 32, 4, 128);
    let mut t = Tensors::default();
    t.add(
        "model.embed_tokens.weight".into(),
        vec![vocab, hidden],
        Fill::Bf16(0.02),
    );
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        t.norm(format!("{p}.input_layernorm.weight"), hidden);
        let a = format!("{p}.self_attn");
        t.linear(
            &format!("{a}.q_proj"),
            heads * head_dim,
            hidden,
            Store::Bf16,
        );
        t.linear(
            &format!("{a}.k_proj"),
            kv_heads * head_dim,
            hidden,
            Store::Bf16,
        );
        t.linear(
            &format!("{a}.v_proj"),
            kv_heads * head_dim,
            hidden,
            Store::Bf16,
        );
        t.linear(
            &format!("{a}.o_proj"),
            hidden,
            heads * head_dim,
            Store::Bf16,
        );
        t.norm(format!("{a}.q_norm.weight"), head_dim);
        t.norm(format!("{a}.k_norm.weight"), head_dim);
        t.norm(format!("{p}.post_attention_layernorm.weight"), hidden);
        t.router(&format!("{p}.mlp.gate"), experts, hidden, false);
        for x in 0..experts {
            t.glu(
                &format!("{p}.mlp.experts.{x}"),
                HF_GLU,
                hidden,
                moe_inter,
                Store::Bf16,
            );
        }
    }
    t.norm("model.norm.weight".into(), hidden);
    t.add(
        "lm_head.weight".into(),
        vec![vocab, hidden],
        Fill::Bf16(0.02),
    );
    let config = json!({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": 6144,
        "moe_intermediate_size": moe_inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "num_experts": experts, "num_experts_per_tok": 8.min(experts), "norm_topk_prob": true,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "hidden_act": "silu",
        "max_position_embeddings": 40_960, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "rope_scaling": null, "sliding_window": null, "use_sliding_window": false,
        "attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": false,
        "bos_token_id": 151_643, "eos_token_id": 151_645, "torch_dtype": "bfloat16",
        "router_aux_loss_coef": 0.001, "output_router_logits": false,
    });
    (config, t.0)
}

/// synth-store's `config.json` for `layers` MoE layers of `n_experts` experts.
fn store_config(layers: u32, n_experts: u32, vocab: usize, eos: usize) -> Value {
    let e = EXPERTS;
    json!({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": vocab, "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": e.d_ff, "num_hidden_layers": layers,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": n_experts, "num_experts_per_tok": e.top_k.min(n_experts),
        "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000, "tie_word_embeddings": false,
        "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "bfloat16",
    })
}

/// synth-store's backbone tensors of decoder layer `i` (of `n_experts` experts).
fn store_layer(i: u32, n_experts: u32) -> Vec<BackboneTensor> {
    let (e, h) = (n_experts as usize, 2048);
    layer_with_norms(
        i,
        h,
        &[
            ("self_attn.q_proj.weight", vec![32 * 128, h], false),
            ("self_attn.k_proj.weight", vec![4 * 128, h], false),
            ("self_attn.v_proj.weight", vec![4 * 128, h], false),
            ("self_attn.o_proj.weight", vec![h, 32 * 128], false),
            ("self_attn.q_norm.weight", vec![128], false),
            ("self_attn.k_norm.weight", vec![128], false),
            ("mlp.gate.weight", vec![e, h], false),
        ],
    )
}
