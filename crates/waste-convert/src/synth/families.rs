//! The releases `waste synth` imitates: their config.json (the keys the
//! release ships, with its real dimensions) and their tensor list (names,
//! dtypes and shapes as the release stores them). Dimensions are the
//! published configs'; `--layers`, `--experts` and `--vocab` shrink a copy.
//! With fewer layers a DeepSeek-style model keeps one dense layer in front.

use std::str::FromStr;

use serde_json::{Value, json};

use super::{Fill, Options};

/// A release to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Like {
    /// deepseek-ai/DeepSeek-V3: fp8 128x128 blocks, 256 experts of 7168x2048, top-8.
    DeepseekV3,
    /// moonshotai/Kimi-K2-Instruct: DeepSeek-V3 architecture, 384 experts, fp8.
    KimiK2,
    /// moonshotai/Kimi-K2-Thinking: Kimi K2 with compressed-tensors int4 experts (group 32).
    KimiK2Thinking,
    /// Qwen/Qwen3-30B-A3B: bf16, 128 experts of 2048x768, top-8.
    Qwen3_30bA3b,
    /// Kimi K3: hybrid KDA/MLA, attention residuals, LatentMoE of 896 MXFP4
    /// experts of 3584x3072, top-16, SiTU-GLU.
    KimiK3,
}

impl Like {
    pub const ALL: [Like; 5] = [
        Like::DeepseekV3,
        Like::KimiK2,
        Like::KimiK2Thinking,
        Like::Qwen3_30bA3b,
        Like::KimiK3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Like::DeepseekV3 => "deepseek-v3",
            Like::KimiK2 => "kimi-k2",
            Like::KimiK2Thinking => "kimi-k2-thinking",
            Like::Qwen3_30bA3b => "qwen3-30b-a3b",
            Like::KimiK3 => "kimi-k3",
        }
    }
}

impl FromStr for Like {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Like::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Like::ALL.iter().map(|l| l.name()).collect();
                format!("unknown release {s:?} ({})", names.join(", "))
            })
    }
}

/// One tensor of the checkpoint.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub fill: Fill,
}

impl Tensor {
    pub fn bytes(&self) -> u64 {
        (self.shape.iter().product::<usize>() * self.fill.element_bytes()) as u64
    }
}

/// How a linear weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Bf16,
    /// F8_E4M3 + `weight_scale_inv` per 128x128 block.
    Fp8,
    /// `weight_packed` int32 + `weight_scale` bf16 per 32 + `weight_shape`.
    Int4,
    /// `weight_packed` u8 + `weight_scale` E8M0 per 32.
    Mxfp4,
}

/// Collects tensors in release order.
#[derive(Debug, Default)]
struct Tensors(Vec<Tensor>);

impl Tensors {
    fn add(&mut self, name: String, shape: Vec<usize>, fill: Fill) {
        self.0.push(Tensor { name, shape, fill });
    }

    fn norm(&mut self, name: String, len: usize) {
        self.add(name, vec![len], Fill::Bf16Norm);
    }

    /// `{p}.weight` of (rows, cols) stored as `store`.
    fn linear(&mut self, p: &str, rows: usize, cols: usize, store: Store) {
        match store {
            Store::Bf16 => self.add(format!("{p}.weight"), vec![rows, cols], Fill::Bf16(0.02)),
            Store::Fp8 => {
                self.add(format!("{p}.weight"), vec![rows, cols], Fill::Fp8);
                self.add(
                    format!("{p}.weight_scale_inv"),
                    vec![rows.div_ceil(128), cols.div_ceil(128)],
                    Fill::Fp8Scale,
                );
            }
            Store::Int4 => {
                self.add(
                    format!("{p}.weight_packed"),
                    vec![rows, cols.div_ceil(8)],
                    Fill::Int4Words,
                );
                self.add(
                    format!("{p}.weight_scale"),
                    vec![rows, cols.div_ceil(32)],
                    Fill::Int4Scale,
                );
                self.add(
                    format!("{p}.weight_shape"),
                    vec![2],
                    Fill::Shape(rows, cols),
                );
            }
            Store::Mxfp4 => {
                self.add(
                    format!("{p}.weight_packed"),
                    vec![rows, cols.div_ceil(2)],
                    Fill::Mxfp4,
                );
                self.add(
                    format!("{p}.weight_scale"),
                    vec![rows, cols.div_ceil(32)],
                    Fill::E8m0,
                );
            }
        }
    }

    /// A SwiGLU block `{p}.{gate,up,down}_proj` (or `w1/w3/w2`) of width `ff`.
    fn glu(&mut self, p: &str, names: [&str; 3], d: usize, ff: usize, store: Store) {
        self.linear(&format!("{p}.{}", names[0]), ff, d, store);
        self.linear(&format!("{p}.{}", names[1]), ff, d, store);
        self.linear(&format!("{p}.{}", names[2]), d, ff, store);
    }
}

const HF_GLU: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];
const MIXTRAL_GLU: [&str; 3] = ["w1", "w3", "w2"];

/// The config.json and tensor list of `options`.
pub fn build(options: &Options) -> (Value, Vec<Tensor>) {
    match options.like {
        Like::DeepseekV3 | Like::KimiK2 | Like::KimiK2Thinking => deepseek(options),
        Like::Qwen3_30bA3b => qwen3(options),
        Like::KimiK3 => kimi_k3(options),
    }
}

/// (layers, dense layers in front) for a release of `real` layers of which
/// `real_dense` are dense: `--layers` keeps at most one dense layer.
fn depth(options: &Options, real: usize, real_dense: usize) -> (usize, usize) {
    match options.layers {
        None => (real, real_dense),
        Some(n) => (n, real_dense.min(1).min(n.saturating_sub(1))),
    }
}

/// DeepSeek-V3 / Kimi K2 (`deepseek_v3` architecture: MLA, fp8 linear layers).
fn deepseek(o: &Options) -> (Value, Vec<Tensor>) {
    let k2 = o.like != Like::DeepseekV3;
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
    let (mut n_group, mut topk_group) = if k2 { (1, 1) } else { (8, 4) };
    if !experts.is_multiple_of(n_group) || experts / n_group < 2 {
        (n_group, topk_group) = (1, 1);
    }
    let top_k = 8.min(experts);
    let (w, e) = match (o.bf16, o.like) {
        (true, _) => (Store::Bf16, Store::Bf16),
        (false, Like::KimiK2Thinking) => (Store::Bf16, Store::Int4),
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
        t.linear(&format!("{a}.q_a_proj"), q_lora, hidden, w);
        t.norm(format!("{a}.q_a_layernorm.weight"), q_lora);
        t.linear(&format!("{a}.q_b_proj"), heads * (nope + rope), q_lora, w);
        t.linear(
            &format!("{a}.kv_a_proj_with_mqa"),
            kv_lora + rope,
            hidden,
            w,
        );
        t.norm(format!("{a}.kv_a_layernorm.weight"), kv_lora);
        t.linear(&format!("{a}.kv_b_proj"), heads * (nope + v), kv_lora, w);
        t.linear(&format!("{a}.o_proj"), hidden, heads * v, w);
        t.norm(format!("{p}.post_attention_layernorm.weight"), hidden);
        if l < dense {
            t.glu(&format!("{p}.mlp"), HF_GLU, hidden, inter, w);
            continue;
        }
        t.add(
            format!("{p}.mlp.gate.weight"),
            vec![experts, hidden],
            Fill::Bf16(0.02),
        );
        t.add(
            format!("{p}.mlp.gate.e_score_correction_bias"),
            vec![experts],
            Fill::F32(0.1),
        );
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

/// Adds the keys of `more` to `base` (json! recursion limits cap one literal's size).
fn merge(base: &mut Value, more: Value) {
    if let (Some(b), Value::Object(m)) = (base.as_object_mut(), more) {
        b.extend(m);
    }
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
        t.add(
            format!("{p}.mlp.gate.weight"),
            vec![experts, hidden],
            Fill::Bf16(0.02),
        );
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

/// Kimi K3 (`kimi_k3` wrapping a `kimi_linear` text config, tensors under
/// `language_model.`): the release's dimensions from the fixture's
/// `release_config.json`. Layer lists are 1-based: full attention at every
/// fourth layer and the last, KDA elsewhere.
fn kimi_k3(o: &Options) -> (Value, Vec<Tensor>) {
    let (layers, dense) = depth(o, 93, 1);
    let experts = o.experts.unwrap_or(896);
    let vocab = o.vocab.unwrap_or(163_840);
    let (hidden, inter, moe_inter, latent, shared) = (7168, 33792, 3072, 3584, 2);
    let (heads, q_lora, kv_lora, nope, rope, v) = (96, 1536, 512, 128, 64, 128);
    let (kda_heads, kda_dim, conv) = (96, 128, 4);
    let width = kda_heads * kda_dim;
    let full: Vec<usize> = (1..=layers)
        .filter(|i| i % 4 == 0 || *i == layers)
        .collect();
    let kda: Vec<usize> = (1..=layers).filter(|i| !full.contains(i)).collect();
    let w = Store::Bf16;
    let e = if o.bf16 { Store::Bf16 } else { Store::Mxfp4 };
    let mut t = Tensors::default();
    t.add(
        "language_model.lm_head.weight".into(),
        vec![vocab, hidden],
        Fill::Bf16(0.02),
    );
    let m = "language_model.model";
    t.add(
        format!("{m}.embed_tokens.weight"),
        vec![vocab, hidden],
        Fill::Bf16(0.02),
    );
    for l in 0..layers {
        let p = format!("{m}.layers.{l}");
        t.norm(format!("{p}.input_layernorm.weight"), hidden);
        for r in ["self_attention", "mlp"] {
            t.norm(format!("{p}.{r}_res_norm.weight"), hidden);
            t.add(
                format!("{p}.{r}_res_proj.weight"),
                vec![1, hidden],
                Fill::Bf16(0.02),
            );
        }
        let a = format!("{p}.self_attn");
        if full.contains(&(l + 1)) {
            t.linear(&format!("{a}.q_a_proj"), q_lora, hidden, w);
            t.norm(format!("{a}.q_a_layernorm.weight"), q_lora);
            t.linear(&format!("{a}.q_b_proj"), heads * (nope + rope), q_lora, w);
            t.linear(
                &format!("{a}.kv_a_proj_with_mqa"),
                kv_lora + rope,
                hidden,
                w,
            );
            t.norm(format!("{a}.kv_a_layernorm.weight"), kv_lora);
            t.linear(&format!("{a}.kv_b_proj"), heads * (nope + v), kv_lora, w);
            t.linear(&format!("{a}.o_proj"), hidden, heads * v, w);
            t.linear(&format!("{a}.g_proj"), heads * v, hidden, w);
        } else {
            for x in ["q", "k", "v"] {
                t.linear(&format!("{a}.{x}_proj"), width, hidden, w);
                t.add(
                    format!("{a}.{x}_conv1d.weight"),
                    vec![width, 1, conv],
                    Fill::F32(0.2),
                );
            }
            // The release pads A_log to a multiple of 32 heads.
            t.add(
                format!("{a}.A_log"),
                vec![kda_heads.next_multiple_of(32)],
                Fill::F32(0.5),
            );
            t.add(format!("{a}.dt_bias"), vec![width], Fill::F32(0.5));
            t.linear(&format!("{a}.f_a_proj"), kda_dim, hidden, w);
            t.linear(&format!("{a}.f_b_proj"), width, kda_dim, w);
            t.linear(&format!("{a}.b_proj"), kda_heads, hidden, w);
            t.linear(&format!("{a}.g_proj"), width, hidden, w);
            t.add(format!("{a}.o_norm.weight"), vec![kda_dim], Fill::F32(0.1));
            t.linear(&format!("{a}.o_proj"), hidden, width, w);
        }
        t.norm(format!("{p}.post_attention_layernorm.weight"), hidden);
        if l < dense {
            t.glu(&format!("{p}.mlp"), HF_GLU, hidden, inter, w);
            continue;
        }
        let b = format!("{p}.block_sparse_moe");
        t.add(
            format!("{b}.gate.weight"),
            vec![experts, hidden],
            Fill::Bf16(0.02),
        );
        t.add(
            format!("{b}.gate.e_score_correction_bias"),
            vec![experts],
            Fill::F32(0.1),
        );
        t.linear(&format!("{b}.routed_expert_down_proj"), latent, hidden, w);
        t.add(
            format!("{b}.routed_expert_norm.weight"),
            vec![latent],
            Fill::F32(0.1),
        );
        t.linear(&format!("{b}.routed_expert_up_proj"), hidden, latent, w);
        t.glu(
            &format!("{b}.shared_experts"),
            HF_GLU,
            hidden,
            shared * moe_inter,
            w,
        );
        for x in 0..experts {
            t.glu(
                &format!("{b}.experts.{x}"),
                MIXTRAL_GLU,
                latent,
                moe_inter,
                e,
            );
        }
    }
    t.norm(format!("{m}.norm.weight"), hidden);
    t.norm(format!("{m}.output_attn_res_norm.weight"), hidden);
    t.add(
        format!("{m}.output_attn_res_proj.weight"),
        vec![1, hidden],
        Fill::Bf16(0.02),
    );
    let mut text = json!({
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
        "moe_intermediate_size": moe_inter, "routed_expert_hidden_size": latent,
        "latent_moe_use_norm": true, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": heads, "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
        "v_head_dim": v, "mla_use_nope": true, "mla_use_output_gate": true,
        "linear_attn_config": {"full_attn_layers": full, "kda_layers": kda,
            "gate_lower_bound": -5.0, "head_dim": kda_dim, "num_heads": kda_heads,
            "short_conv_kernel_size": conv, "use_full_rank_gate": true},
    });
    merge(
        &mut text,
        json!({
            "num_experts": experts, "num_experts_per_token": 16.min(experts),
            "num_shared_experts": shared, "moe_renormalize": true, "moe_layer_freq": 1,
            "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 1.0,
            "num_expert_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
            "use_grouped_topk": true, "first_k_dense_replace": dense,
            "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
            "attn_res_block_size": 12, "rms_norm_eps": 1e-5, "max_position_embeddings": 1_048_576,
            "tie_word_embeddings": false, "num_nextn_predict_layers": 0,
            "bos_token_id": 163_584, "eos_token_id": 163_586, "pad_token_id": 163_839,
            "dtype": "bfloat16",
        }),
    );
    if e == Store::Mxfp4 {
        text["quantization_config"] = json!({
            "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "float", "symmetric": true,
                    "strategy": "group", "group_size": 32, "scale_dtype": "torch.uint8",
                    "dynamic": false, "observer": "minmax"}}},
            "format": "mxfp4-pack-quantized", "quant_method": "compressed-tensors",
            "quantization_status": "compressed",
            "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*",
                "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
                "re:.*routed_expert_(down|up)_proj.*"],
        });
    }
    let config = json!({
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "bos_token_id": 163_584, "eos_token_id": 163_586, "pad_token_id": 163_839,
        "tie_word_embeddings": false, "dtype": "bfloat16", "text_config": text,
    });
    (config, t.0)
}
