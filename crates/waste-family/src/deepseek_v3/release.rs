//! DeepSeek-V3 and the Kimi K2 releases built on its architecture, as
//! `waste synth` and `waste synth-store` imitate them.

use serde_json::{Value, json};

use crate::HF_GLU;
use crate::release::{
    BackboneTensor, ExpertAct, ExpertShape, Fill, Mla, Options, Release, Store, StoreShape, Tensor,
    Tensors, depth, layer_with_norms,
};

/// The experts of the deepseek-v3 release.
const EXPERTS: ExpertShape = ExpertShape {
    d_model: 7168,
    d_ff: 2048,
    n_experts: 256,
    top_k: 8,
    activation: ExpertAct::Silu,
};

/// The releases of this family.
pub(super) const RELEASES: &[Release] = &[
    Release {
        // deepseek-ai/DeepSeek-V3: fp8 128x128 blocks, 256 experts of 7168x2048, top-8.
        name: "deepseek-v3",
        model_type: "deepseek_v3",
        checkpoint: deepseek_v3,
        store: Some(StoreShape {
            experts: EXPERTS,
            hidden: 7168,
            config: store_config,
            layer_tensors: Some(store_layer),
        }),
    },
    Release {
        // moonshotai/Kimi-K2-Instruct: DeepSeek-V3 architecture, 384 experts, fp8.
        name: "kimi-k2",
        model_type: "kimi_k2",
        checkpoint: kimi_k2,
        store: None,
    },
    Release {
        // moonshotai/Kimi-K2-Thinking: Kimi K2 with compressed-tensors int4 experts (group 32).
        name: "kimi-k2-thinking",
        model_type: "kimi_k2",
        checkpoint: kimi_k2_thinking,
        store: None,
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    DeepseekV3,
    KimiK2,
    KimiK2Thinking,
}

fn deepseek_v3(o: &Options) -> (Value, Vec<Tensor>) {
    deepseek(o, Variant::DeepseekV3)
}

fn kimi_k2(o: &Options) -> (Value, Vec<Tensor>) {
    deepseek(o, Variant::KimiK2)
}

fn kimi_k2_thinking(o: &Options) -> (Value, Vec<Tensor>) {
    deepseek(o, Variant::KimiK2Thinking)
}

/// DeepSeek-V3 / Kimi K2 (`deepseek_v3` architecture: MLA, fp8 linear layers).
fn deepseek(o: &Options, variant: Variant) -> (Value, Vec<Tensor>) {
    let k2 = variant != Variant::DeepseekV3;
    let (real_experts, heads, real_vocab, real_dense) = if k2 {
        (384, 64, 163_840, 1)
    } else {
        (256, 128, 129_280, 3)
    };
    let (layers, dense) = depth(o, 61, real_dense);
    let experts = o.experts.unwrap_or(real_experts);
    let vocab = o.vocab.unwrap_or(real_vocab);
    let (hidden, inter, moe_inter) = (7168, 18432, 2048);
    let (q_lora, kv_lora, nope, rope, v) = (1536, 512, 128, 64, 128);
    let mla = Mla {
        heads,
        q_lora,
        kv_lora,
        nope,
        rope,
        v,
    };
    let (mut n_group, mut topk_group) = if k2 { (1, 1) } else { (8, 4) };
    if !experts.is_multiple_of(n_group) || experts / n_group < 2 {
        (n_group, topk_group) = (1, 1);
    }
    let top_k = 8.min(experts);
    let (w, e) = match (o.bf16, variant) {
        (true, _) => (Store::Bf16, Store::Bf16),
        (false, Variant::KimiK2Thinking) => (Store::Bf16, Store::Int4),
        _ => (Store::Fp8, Store::Fp8),
    };
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
        t.mla(&a, hidden, mla, w);
        t.norm(format!("{p}.post_attention_layernorm.weight"), hidden);
        if l < dense {
            t.glu(&format!("{p}.mlp"), HF_GLU, hidden, inter, w);
            continue;
        }
        t.router(&format!("{p}.mlp.gate"), experts, hidden, true);
        t.glu(
            &format!("{p}.mlp.shared_experts"),
            HF_GLU,
            hidden,
            moe_inter,
            w,
        );
        for x in 0..experts {
            t.glu(
                &format!("{p}.mlp.experts.{x}"),
                HF_GLU,
                hidden,
                moe_inter,
                e,
            );
        }
    }
    t.norm("model.norm.weight".into(), hidden);
    t.add(
        "lm_head.weight".into(),
        vec![vocab, hidden],
        Fill::Bf16(0.02),
    );
    let quantization = match (w, e) {
        (Store::Fp8, _) => json!({"activation_scheme": "dynamic", "fmt": "e4m3",
            "quant_method": "fp8", "weight_block_size": [128, 128]}),
        (_, Store::Int4) => int4_quantization(),
        _ => Value::Null,
    };
    let mut config = json!({
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": if k2 { "kimi_k2" } else { "deepseek_v3" },
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
        "moe_intermediate_size": moe_inter, "num_hidden_layers": layers,
        "num_nextn_predict_layers": 0, "num_attention_heads": heads,
        "num_key_value_heads": heads, "n_shared_experts": 1, "n_routed_experts": experts,
        "routed_scaling_factor": if k2 { 2.827 } else { 2.5 }, "kv_lora_rank": kv_lora,
        "q_lora_rank": q_lora, "qk_rope_head_dim": rope, "v_head_dim": v,
        "qk_nope_head_dim": nope, "topk_method": "noaux_tc", "n_group": n_group,
        "topk_group": topk_group, "num_experts_per_tok": top_k, "moe_layer_freq": 1,
        "first_k_dense_replace": dense, "norm_topk_prob": true, "scoring_func": "sigmoid",
        "hidden_act": "silu", "max_position_embeddings": if k2 { 131_072 } else { 163_840 },
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": true,
        "tie_word_embeddings": false, "rope_theta": if k2 { 50_000.0 } else { 10_000.0 },
        "rope_scaling": {"type": "yarn", "factor": if k2 { 32.0 } else { 40.0 },
            "original_max_position_embeddings": 4096,
            "beta_fast": if k2 { 1.0 } else { 32.0 }, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0},
        "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
    });
    if !quantization.is_null() {
        config["quantization_config"] = quantization;
    }
    (config, t.0)
}

/// Kimi-K2-Thinking's compressed-tensors config: int4 experts, group 32.
fn int4_quantization() -> Value {
    json!({
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
            "output_activations": null,
            "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
                "group_size": 32, "dynamic": false, "observer": "minmax", "actorder": null}}},
        "format": "pack-quantized", "quant_method": "compressed-tensors",
        "quantization_status": "compressed", "kv_cache_scheme": null,
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    })
}

/// synth-store's `config.json` for `layers` MoE layers of `n_experts` experts.
fn store_config(layers: u32, n_experts: u32, vocab: usize, eos: usize) -> Value {
    let e = EXPERTS;
    let groups = if n_experts.is_multiple_of(8) { 8 } else { 1 };
    json!({
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": vocab, "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": e.d_ff, "num_hidden_layers": layers,
        "num_attention_heads": 128, "num_key_value_heads": 128,
        "n_shared_experts": 1, "n_routed_experts": n_experts,
        "num_experts_per_tok": e.top_k.min(n_experts), "routed_scaling_factor": 2.5,
        "n_group": groups, "topk_group": groups.min(4), "topk_method": "noaux_tc",
        "scoring_func": "sigmoid", "norm_topk_prob": true,
        "first_k_dense_replace": 0, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "hidden_act": "silu",
        "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
        "rope_theta": 10000, "tie_word_embeddings": false,
        "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "bfloat16",
    })
}

/// synth-store's backbone tensors of decoder layer `i` (of `n_experts` experts).
fn store_layer(i: u32, n_experts: u32) -> Vec<BackboneTensor> {
    let (e, h) = (n_experts as usize, 7168);
    layer_with_norms(
        i,
        h,
        &[
            ("self_attn.q_a_proj.weight", vec![1536, h], false),
            ("self_attn.q_a_layernorm.weight", vec![1536], false),
            ("self_attn.q_b_proj.weight", vec![128 * 192, 1536], false),
            (
                "self_attn.kv_a_proj_with_mqa.weight",
                vec![512 + 64, h],
                false,
            ),
            ("self_attn.kv_a_layernorm.weight", vec![512], false),
            ("self_attn.kv_b_proj.weight", vec![128 * 256, 512], false),
            ("self_attn.o_proj.weight", vec![h, 128 * 128], false),
            ("mlp.gate.weight", vec![e, h], false),
            ("mlp.gate.e_score_correction_bias", vec![e], true),
            ("mlp.shared_experts.gate_proj.weight", vec![2048, h], false),
            ("mlp.shared_experts.up_proj.weight", vec![2048, h], false),
            ("mlp.shared_experts.down_proj.weight", vec![h, 2048], false),
        ],
    )
}
