//! One generator per family: draws the family's config from the seed, writes
//! its `config.json` keys as the family's real configs spell them and fills
//! the [`Gen`] with every tensor of its state dict, named as in Hugging Face
//! checkpoints.

use serde_json::{Value, json};

use super::{Gen, base_config, common, even, set_rope};

pub(super) fn llama(g: &mut Gen) -> Value {
    let c = common(&mut g.rng);
    let head_dim = even(&mut g.rng, 8, 24);
    let inter = 8 * g.rng.range(4, 16);
    let tied = g.rng.chance(0.3);
    let eps = g.rng.pick(&[1e-5, 1e-6]);
    let mut m = base_config("LlamaForCausalLM", "llama", &c, eps);
    m.insert("head_dim".into(), json!(head_dim));
    m.insert("intermediate_size".into(), json!(inter));
    m.insert("max_position_embeddings".into(), json!(4096));
    m.insert("attention_bias".into(), json!(false));
    m.insert("mlp_bias".into(), json!(false));
    m.insert("pretraining_tp".into(), json!(1));
    m.insert("tie_word_embeddings".into(), json!(tied));
    let theta = g.rng.pick(&[10000.0, 500_000.0]);
    if g.rng.chance(0.5) {
        set_rope(&mut m, c.v5, theta, "default", Value::Null, "rope_type");
    } else {
        let params = json!({
            "factor": g.rng.pick(&[2.0, 4.0, 8.0]),
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": g.rng.range(16, 64),
        });
        let type_key = g.rng.pick(&["type", "rope_type"]);
        set_rope(&mut m, c.v5, theta, "llama3", params, type_key);
    }

    g.skeleton(c.vocab, c.hidden, c.layers, tied);
    for layer in 0..c.layers {
        let p = format!("model.layers.{layer}.");
        g.gqa(&p, c.hidden, c.heads, c.kv_heads, head_dim, false);
        g.swiglu(
            &format!("{p}mlp."),
            ["gate_proj", "up_proj", "down_proj"],
            c.hidden,
            inter,
        );
    }
    Value::Object(m)
}

pub(super) fn mixtral(g: &mut Gen) -> Value {
    let mut c = common(&mut g.rng);
    // `head_dim: null` means hidden / heads: then pick heads that make it an even 8..=24.
    let implicit_head_dim = g.rng.chance(0.5);
    let head_dim = if implicit_head_dim {
        let ok: Vec<usize> = (2..=6)
            .filter(|h| {
                c.hidden.is_multiple_of(*h)
                    && (8..=24).contains(&(c.hidden / h))
                    && (c.hidden / h).is_multiple_of(2)
            })
            .collect();
        c.heads = g.rng.pick(&ok);
        let divisors: Vec<usize> = (1..=c.heads)
            .filter(|d| c.heads.is_multiple_of(*d))
            .collect();
        c.kv_heads = g.rng.pick(&divisors);
        c.hidden / c.heads
    } else {
        even(&mut g.rng, 8, 24)
    };
    let n_experts = g.rng.range(4, 12);
    let top_k = g.rng.range(1, 4);
    let inter = 8 * g.rng.range(2, 8);
    let window = g.rng.chance(0.5).then(|| g.rng.range(3, 6));
    let mut m = base_config(
        "MixtralForCausalLM",
        "mixtral",
        &c,
        g.rng.pick(&[1e-5, 1e-6]),
    );
    m.insert(
        "head_dim".into(),
        if implicit_head_dim {
            Value::Null
        } else {
            json!(head_dim)
        },
    );
    m.insert("intermediate_size".into(), json!(inter));
    m.insert("max_position_embeddings".into(), json!(4096));
    m.insert("num_local_experts".into(), json!(n_experts));
    m.insert("num_experts_per_tok".into(), json!(top_k));
    m.insert("sliding_window".into(), json!(window));
    m.insert("output_router_logits".into(), json!(false));
    m.insert("router_aux_loss_coef".into(), json!(0.001));
    m.insert("router_jitter_noise".into(), json!(0.0));
    let theta = g.rng.pick(&[10000.0, 1e6]);
    set_rope(&mut m, c.v5, theta, "default", Value::Null, "type");

    g.skeleton(c.vocab, c.hidden, c.layers, false);
    for layer in 0..c.layers {
        let p = format!("model.layers.{layer}.");
        g.gqa(&p, c.hidden, c.heads, c.kv_heads, head_dim, false);
        g.linear(
            format!("{p}block_sparse_moe.gate.weight"),
            n_experts,
            c.hidden,
        );
        for e in 0..n_experts {
            g.swiglu(
                &format!("{p}block_sparse_moe.experts.{e}."),
                ["w1", "w3", "w2"],
                c.hidden,
                inter,
            );
        }
    }
    Value::Object(m)
}

pub(super) fn qwen3_moe(g: &mut Gen) -> Value {
    let c = common(&mut g.rng);
    let head_dim = even(&mut g.rng, 8, 24);
    let n_experts = g.rng.range(4, 12);
    let top_k = g.rng.range(1, 4);
    let (inter, moe_inter) = (8 * g.rng.range(4, 12), 8 * g.rng.range(2, 6));
    let step = g.rng.range(1, 2);
    let mut mlp_only: Vec<usize> = if g.rng.chance(0.4) {
        vec![g.rng.range(0, c.layers - 1)]
    } else {
        Vec::new()
    };
    let is_moe = |layer: usize, mlp_only: &[usize]| {
        !mlp_only.contains(&layer) && (layer + 1).is_multiple_of(step)
    };
    if !(0..c.layers).any(|l| is_moe(l, &mlp_only)) {
        mlp_only.clear();
    }
    let mut m = base_config(
        "Qwen3MoeForCausalLM",
        "qwen3_moe",
        &c,
        g.rng.pick(&[1e-6, 1e-5]),
    );
    m.insert("head_dim".into(), json!(head_dim));
    m.insert("intermediate_size".into(), json!(inter));
    m.insert("moe_intermediate_size".into(), json!(moe_inter));
    m.insert("max_position_embeddings".into(), json!(4096));
    let experts_key = if g.rng.chance(0.5) {
        "num_experts"
    } else {
        "num_local_experts"
    };
    m.insert(experts_key.into(), json!(n_experts));
    m.insert("num_experts_per_tok".into(), json!(top_k));
    m.insert("norm_topk_prob".into(), json!(g.rng.chance(0.5)));
    m.insert("decoder_sparse_step".into(), json!(step));
    m.insert("mlp_only_layers".into(), json!(mlp_only));
    m.insert("attention_bias".into(), json!(false));
    m.insert("use_sliding_window".into(), json!(false));
    m.insert("sliding_window".into(), Value::Null);
    m.insert("output_router_logits".into(), json!(false));
    m.insert("router_aux_loss_coef".into(), json!(0.001));
    if !c.v5 {
        m.insert("max_window_layers".into(), json!(c.layers));
    }
    let theta = g.rng.pick(&[10000.0, 1e6]);
    set_rope(&mut m, c.v5, theta, "default", Value::Null, "type");

    g.skeleton(c.vocab, c.hidden, c.layers, false);
    for layer in 0..c.layers {
        let p = format!("model.layers.{layer}.");
        g.gqa(&p, c.hidden, c.heads, c.kv_heads, head_dim, true);
        if is_moe(layer, &mlp_only) {
            g.linear(format!("{p}mlp.gate.weight"), n_experts, c.hidden);
            for e in 0..n_experts {
                g.swiglu(
                    &format!("{p}mlp.experts.{e}."),
                    ["gate_proj", "up_proj", "down_proj"],
                    c.hidden,
                    moe_inter,
                );
            }
        } else {
            g.swiglu(
                &format!("{p}mlp."),
                ["gate_proj", "up_proj", "down_proj"],
                c.hidden,
                inter,
            );
        }
    }
    Value::Object(m)
}

pub(super) fn deepseek_v3(g: &mut Gen) -> Value {
    let mut c = common(&mut g.rng);
    c.kv_heads = c.heads; // MLA: num_key_value_heads plays no role, configs repeat heads.
    let q_lora_rank = (!g.rng.chance(0.3)).then(|| 8 * g.rng.range(2, 6));
    let kv_lora_rank = g.rng.range(8, 24);
    let (nope, rope, v) = (
        g.rng.range(4, 12),
        even(&mut g.rng, 2, 8),
        g.rng.range(4, 12),
    );
    let n_experts = g.rng.range(4, 12);
    let groups: Vec<usize> = (1..=n_experts)
        .filter(|n| n_experts.is_multiple_of(*n) && n_experts / n >= 2)
        .collect();
    let n_group = g.rng.pick(&groups);
    let topk_group = g.rng.range(1, n_group);
    let top_k = g.rng.range(1, 4.min(topk_group * (n_experts / n_group)));
    let first_dense = g.rng.range(0, 2.min(c.layers - 1));
    let n_shared = g.rng.range(0, 2);
    let (inter, moe_inter) = (8 * g.rng.range(4, 12), 8 * g.rng.range(2, 6));
    let scaling = ((1.0 + 2.0 * g.rng.uniform()) * 1000.0).round() / 1000.0;

    let mut m = base_config(
        "DeepseekV3ForCausalLM",
        "deepseek_v3",
        &c,
        g.rng.pick(&[1e-6, 1e-5]),
    );
    let entries = [
        ("q_lora_rank", json!(q_lora_rank)),
        ("kv_lora_rank", json!(kv_lora_rank)),
        ("qk_nope_head_dim", json!(nope)),
        ("qk_rope_head_dim", json!(rope)),
        ("v_head_dim", json!(v)),
        ("intermediate_size", json!(inter)),
        ("moe_intermediate_size", json!(moe_inter)),
        ("n_routed_experts", json!(n_experts)),
        ("n_shared_experts", json!(n_shared)),
        ("num_experts_per_tok", json!(top_k)),
        ("n_group", json!(n_group)),
        ("topk_group", json!(topk_group)),
        ("first_k_dense_replace", json!(first_dense)),
        ("routed_scaling_factor", json!(scaling)),
        ("norm_topk_prob", json!(g.rng.chance(0.5))),
        ("num_nextn_predict_layers", json!(0)),
        ("attention_bias", json!(false)),
    ];
    for (k, val) in entries {
        m.insert(k.into(), val);
    }
    if c.v5 {
        // transformers 5 writes head_dim = the rope dim and qk_head_dim = nope + rope.
        m.insert("head_dim".into(), json!(rope));
        m.insert("qk_head_dim".into(), json!(nope + rope));
        m.insert("rope_interleave".into(), json!(true));
    } else {
        // Release keys transformers ignores; rope_interleave absent (defaults to true).
        m.insert("moe_layer_freq".into(), json!(1));
        m.insert("topk_method".into(), json!("noaux_tc"));
        m.insert("scoring_func".into(), json!("sigmoid"));
        m.insert("ep_size".into(), json!(1));
    }
    let factor = g.rng.range(4, 40);
    let orig = g.rng.range(16, 64);
    // max / original == factor, as in real configs, so either reading of the factor agrees.
    m.insert("max_position_embeddings".into(), json!(orig * factor));
    let mscale = g.rng.pick(&[1.0, 0.707]);
    let mscale_all_dim = if g.rng.chance(0.5) {
        mscale
    } else {
        g.rng.pick(&[1.0, 0.707, 0.5])
    };
    let beta_fast = g.rng.pick(&[1.0, 4.0, 32.0]);
    let params = json!({
        "factor": factor as f64,
        "original_max_position_embeddings": orig,
        "beta_fast": beta_fast,
        "beta_slow": 1.0,
        "mscale": mscale,
        "mscale_all_dim": mscale_all_dim,
    });
    let theta = g.rng.pick(&[10000.0, 50000.0]);
    set_rope(&mut m, c.v5, theta, "yarn", params, "type");

    g.skeleton(c.vocab, c.hidden, c.layers, false);
    let (h, nh) = (c.hidden, c.heads);
    for layer in 0..c.layers {
        let p = format!("model.layers.{layer}.");
        let a = |name: &str| format!("{p}self_attn.{name}.weight");
        match q_lora_rank {
            Some(r) => {
                g.linear(a("q_a_proj"), r, h);
                g.norm(a("q_a_layernorm"), r);
                g.linear(a("q_b_proj"), nh * (nope + rope), r);
            }
            None => g.linear(a("q_proj"), nh * (nope + rope), h),
        }
        g.linear(a("kv_a_proj_with_mqa"), kv_lora_rank + rope, h);
        g.norm(a("kv_a_layernorm"), kv_lora_rank);
        g.linear(a("kv_b_proj"), nh * (nope + v), kv_lora_rank);
        g.linear(a("o_proj"), h, nh * v);
        let names = ["gate_proj", "up_proj", "down_proj"];
        if layer < first_dense {
            g.swiglu(&format!("{p}mlp."), names, h, inter);
            continue;
        }
        g.linear(format!("{p}mlp.gate.weight"), n_experts, h);
        g.tensor(
            format!("{p}mlp.gate.e_score_correction_bias"),
            vec![n_experts],
            0.0,
            0.1,
            true,
        );
        for e in 0..n_experts {
            g.swiglu(&format!("{p}mlp.experts.{e}."), names, h, moe_inter);
        }
        if n_shared > 0 {
            g.swiglu(
                &format!("{p}mlp.shared_experts."),
                names,
                h,
                moe_inter * n_shared,
            );
        }
    }
    Value::Object(m)
}

/// Qwen2-MoE: q/k/v biases (or none), softmax top-k with or without
/// renormalisation, a shared expert of its own width under its sigmoid gate,
/// dense layers from `decoder_sparse_step` / `mlp_only_layers`.
pub(super) fn qwen2_moe(g: &mut Gen) -> Value {
    let c = common(&mut g.rng);
    let n_experts = g.rng.range(4, 12);
    let top_k = g.rng.range(1, 4);
    let (inter, moe_inter, shared_inter) = (
        8 * g.rng.range(4, 12),
        8 * g.rng.range(2, 6),
        8 * g.rng.range(2, 8),
    );
    let step = g.rng.range(1, 2);
    let mut mlp_only: Vec<usize> = if g.rng.chance(0.4) {
        vec![g.rng.range(0, c.layers - 1)]
    } else {
        Vec::new()
    };
    let is_moe = |layer: usize, mlp_only: &[usize]| {
        !mlp_only.contains(&layer) && (layer + 1).is_multiple_of(step)
    };
    if !(0..c.layers).any(|l| is_moe(l, &mlp_only)) {
        mlp_only.clear();
    }
    // Releases before transformers 5 write no qkv_bias (and have biases).
    let qkv_bias = !g.rng.chance(0.2);
    let mut m = base_config(
        "Qwen2MoeForCausalLM",
        "qwen2_moe",
        &c,
        g.rng.pick(&[1e-6, 1e-5]),
    );
    m.insert("intermediate_size".into(), json!(inter));
    m.insert("moe_intermediate_size".into(), json!(moe_inter));
    m.insert(
        "shared_expert_intermediate_size".into(),
        json!(shared_inter),
    );
    m.insert("max_position_embeddings".into(), json!(4096));
    m.insert("num_experts".into(), json!(n_experts));
    m.insert("num_experts_per_tok".into(), json!(top_k));
    m.insert("norm_topk_prob".into(), json!(g.rng.chance(0.5)));
    m.insert("decoder_sparse_step".into(), json!(step));
    m.insert("mlp_only_layers".into(), json!(mlp_only));
    // A window of 2-6 on the even layers below max_window_layers (release
    // style), or on the layers layer_types names (transformers 5 style).
    let sliding = g.rng.chance(0.4);
    let window = g.rng.range(2, 6);
    let max_window_layers = g.rng.range(1, c.layers);
    m.insert("use_sliding_window".into(), json!(sliding));
    m.insert("max_window_layers".into(), json!(max_window_layers));
    m.insert("output_router_logits".into(), json!(false));
    m.insert("router_aux_loss_coef".into(), json!(0.001));
    if c.v5 {
        m.insert("qkv_bias".into(), json!(qkv_bias));
        m.insert(
            "sliding_window".into(),
            json!(if sliding { window } else { 0 }),
        );
        let types: Vec<&str> = (0..c.layers)
            .map(|_| {
                if sliding && g.rng.chance(0.5) {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        m.insert("layer_types".into(), json!(types));
    } else {
        m.insert("sliding_window".into(), json!(window));
        if !qkv_bias {
            m.insert("qkv_bias".into(), json!(false));
        }
    }
    let theta = g.rng.pick(&[10000.0, 1e6]);
    set_rope(&mut m, c.v5, theta, "default", Value::Null, "type");

    let head_dim = c.hidden / c.heads;
    g.skeleton(c.vocab, c.hidden, c.layers, false);
    for layer in 0..c.layers {
        let p = format!("model.layers.{layer}.");
        g.gqa(&p, c.hidden, c.heads, c.kv_heads, head_dim, false);
        if qkv_bias {
            for (w, n) in [
                ("q_proj", c.heads * head_dim),
                ("k_proj", c.kv_heads * head_dim),
                ("v_proj", c.kv_heads * head_dim),
            ] {
                g.tensor(format!("{p}self_attn.{w}.bias"), vec![n], 0.0, 0.15, false);
            }
        }
        if is_moe(layer, &mlp_only) {
            g.linear(format!("{p}mlp.gate.weight"), n_experts, c.hidden);
            for e in 0..n_experts {
                g.swiglu(
                    &format!("{p}mlp.experts.{e}."),
                    ["gate_proj", "up_proj", "down_proj"],
                    c.hidden,
                    moe_inter,
                );
            }
            g.swiglu(
                &format!("{p}mlp.shared_expert."),
                ["gate_proj", "up_proj", "down_proj"],
                c.hidden,
                shared_inter,
            );
            g.linear(format!("{p}mlp.shared_expert_gate.weight"), 1, c.hidden);
        } else {
            g.swiglu(
                &format!("{p}mlp."),
                ["gate_proj", "up_proj", "down_proj"],
                c.hidden,
                inter,
            );
        }
    }
    Value::Object(m)
}
