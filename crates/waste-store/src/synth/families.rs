//! The model families synth-store imitates: their real expert shapes and
//! counts, a `config.json` a node can load, and the backbone's tensor list
//! (Hugging Face names and shapes, routed experts excluded). Attention and
//! shared experts keep the release's dimensions; the vocabulary is the
//! synthetic byte-level one (`tokenizer.rs`), and every layer is a MoE layer.

use serde_json::{Value, json};
use waste_format::experts::ExpertActivation;

/// A family `--like` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    DeepseekV3,
    Qwen3_30bA3b,
    KimiK3,
}

impl std::str::FromStr for Family {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "deepseek-v3" => Ok(Self::DeepseekV3),
            "qwen3-30b-a3b" => Ok(Self::Qwen3_30bA3b),
            "kimi-k3" => Ok(Self::KimiK3),
            _ => Err(format!(
                "unknown family {s:?} (deepseek-v3, qwen3-30b-a3b, kimi-k3)"
            )),
        }
    }
}

/// Expert shapes of a family, as released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertShape {
    /// Width the experts consume (K3: the latent width).
    pub d_model: usize,
    pub d_ff: usize,
    /// Routed experts per layer in the release.
    pub n_experts: u32,
    pub top_k: u32,
    pub activation: ExpertActivation,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Self::DeepseekV3 => "deepseek-v3",
            Self::Qwen3_30bA3b => "qwen3-30b-a3b",
            Self::KimiK3 => "kimi-k3",
        }
    }

    pub fn model_type(self) -> &'static str {
        match self {
            Self::DeepseekV3 => "deepseek_v3",
            Self::Qwen3_30bA3b => "qwen3_moe",
            Self::KimiK3 => "kimi_k3",
        }
    }

    pub fn experts(self) -> ExpertShape {
        match self {
            Self::DeepseekV3 => ExpertShape {
                d_model: 7168,
                d_ff: 2048,
                n_experts: 256,
                top_k: 8,
                activation: ExpertActivation::Silu,
            },
            Self::Qwen3_30bA3b => ExpertShape {
                d_model: 2048,
                d_ff: 768,
                n_experts: 128,
                top_k: 8,
                activation: ExpertActivation::Silu,
            },
            // 896 experts of width 3072 in a 3584-wide latent space, top-16, SiTU-GLU.
            Self::KimiK3 => ExpertShape {
                d_model: 3584,
                d_ff: 3072,
                n_experts: 896,
                top_k: 16,
                activation: ExpertActivation::Situ {
                    beta: 4.0,
                    linear_beta: Some(25.0),
                },
            },
        }
    }

    /// Whether this module writes a backbone a node can load. Kimi K3's
    /// hybrid attention (KDA + gated MLA, attention residuals) is not
    /// generated here: `waste synth-store` makes its store from a synthetic
    /// checkpoint and the converter instead.
    pub fn has_backbone(self) -> bool {
        !matches!(self, Self::KimiK3)
    }

    /// `config.json` for `layers` MoE layers of `n_experts` experts.
    pub fn config(self, layers: u32, n_experts: u32, vocab: usize, eos: usize) -> Value {
        let e = self.experts();
        match self {
            Self::DeepseekV3 => {
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
            Self::Qwen3_30bA3b => json!({
                "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                "vocab_size": vocab, "hidden_size": 2048, "intermediate_size": 6144,
                "moe_intermediate_size": e.d_ff, "num_hidden_layers": layers,
                "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                "num_experts": n_experts, "num_experts_per_tok": e.top_k.min(n_experts),
                "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
                "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
                "rope_theta": 1_000_000, "tie_word_embeddings": false,
                "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "bfloat16",
            }),
            Self::KimiK3 => json!({
                "model_type": "kimi_k3",
                "text_config": {
                    "model_type": "kimi_linear", "hidden_size": 7168,
                    "routed_expert_hidden_size": e.d_model, "moe_intermediate_size": e.d_ff,
                    "num_experts": n_experts, "num_experts_per_token": e.top_k.min(n_experts),
                    "num_hidden_layers": layers, "hidden_act": "situ",
                    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
                },
            }),
        }
    }

    /// Backbone tensors of one decoder layer: (name, shape, is f32).
    pub fn layer_tensors(self, i: u32, n_experts: u32) -> Vec<(String, Vec<usize>, bool)> {
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let e = n_experts as usize;
        let mut t = vec![
            (p("input_layernorm.weight"), vec![0], false),
            (p("post_attention_layernorm.weight"), vec![0], false),
        ];
        match self {
            Self::DeepseekV3 => {
                let h = 7168;
                t.extend([
                    (p("self_attn.q_a_proj.weight"), vec![1536, h], false),
                    (p("self_attn.q_a_layernorm.weight"), vec![1536], false),
                    (p("self_attn.q_b_proj.weight"), vec![128 * 192, 1536], false),
                    (
                        p("self_attn.kv_a_proj_with_mqa.weight"),
                        vec![512 + 64, h],
                        false,
                    ),
                    (p("self_attn.kv_a_layernorm.weight"), vec![512], false),
                    (p("self_attn.kv_b_proj.weight"), vec![128 * 256, 512], false),
                    (p("self_attn.o_proj.weight"), vec![h, 128 * 128], false),
                    (p("mlp.gate.weight"), vec![e, h], false),
                    (p("mlp.gate.e_score_correction_bias"), vec![e], true),
                    (
                        p("mlp.shared_experts.gate_proj.weight"),
                        vec![2048, h],
                        false,
                    ),
                    (p("mlp.shared_experts.up_proj.weight"), vec![2048, h], false),
                    (
                        p("mlp.shared_experts.down_proj.weight"),
                        vec![h, 2048],
                        false,
                    ),
                ]);
            }
            Self::Qwen3_30bA3b => {
                let h = 2048;
                t.extend([
                    (p("self_attn.q_proj.weight"), vec![32 * 128, h], false),
                    (p("self_attn.k_proj.weight"), vec![4 * 128, h], false),
                    (p("self_attn.v_proj.weight"), vec![4 * 128, h], false),
                    (p("self_attn.o_proj.weight"), vec![h, 32 * 128], false),
                    (p("self_attn.q_norm.weight"), vec![128], false),
                    (p("self_attn.k_norm.weight"), vec![128], false),
                    (p("mlp.gate.weight"), vec![e, h], false),
                ]);
            }
            Self::KimiK3 => return Vec::new(),
        }
        // The two block norms are hidden-wide.
        let hidden = self.hidden();
        t[0].1 = vec![hidden];
        t[1].1 = vec![hidden];
        t
    }

    pub fn hidden(self) -> usize {
        match self {
            Self::DeepseekV3 | Self::KimiK3 => 7168,
            Self::Qwen3_30bA3b => 2048,
        }
    }
}
