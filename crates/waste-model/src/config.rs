//! The architecture-independent description of a model that the layers are
//! built from. Each `arch/*.rs` parses its own Hugging Face `config.json`
//! (HF spelling, serde) into a [`ModelConfig`]; nothing here knows a family.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use waste_kernels::Activation;

use crate::error::CONFIG_JSON;
use crate::{Error, Result};

/// Everything the forward pass needs to know about a checkpoint.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// `model_type` as config.json spells it (`deepseek_v3`, `kimi_k2`, ...).
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: usize,
    /// The full (softmax) attention of the layers that use it.
    pub attention: AttentionConfig,
    /// Kimi Delta Attention, for hybrids whose other layers use it.
    pub linear_attention: Option<KdaConfig>,
    /// Which attention each decoder layer uses.
    pub layer_attention: Vec<LayerAttention>,
    /// What each sub-block reads from the residual stream.
    pub residual: ResidualKind,
    /// One entry per decoder layer.
    pub ffn: Vec<FfnKind>,
    /// Present when any layer is a mixture of experts.
    pub moe: Option<MoeConfig>,
    pub activation: Activation,
    /// End-of-sequence ids from config.json (generation_config.json may add more).
    pub eos_token_ids: Vec<u32>,
    pub bos_token_id: Option<u32>,
    /// State-dict names of the tensors outside the decoder layers.
    pub names: TensorNames,
}

/// Where the tensors of a family live in the state dict.
#[derive(Debug, Clone)]
pub struct TensorNames {
    /// Prefix of the decoder stack, e.g. `model.`.
    pub model_prefix: String,
    /// Name of the output projection, e.g. `lm_head.weight`.
    pub lm_head: String,
}

impl TensorNames {
    pub fn layer(&self, layer: usize, rest: &str) -> String {
        format!("{}layers.{layer}.{rest}", self.model_prefix)
    }

    pub fn model(&self, rest: &str) -> String {
        format!("{}{rest}", self.model_prefix)
    }
}

/// The attention block of every layer.
#[derive(Debug, Clone)]
pub enum AttentionConfig {
    /// Multi-head attention with grouped key/value heads (Llama, Mixtral, Qwen3).
    Gqa(GqaConfig),
    /// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2).
    Mla(MlaConfig),
}

#[derive(Debug, Clone)]
pub struct GqaConfig {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Per-head RMSNorm on q and k before rotary (Qwen3).
    pub qk_norm: bool,
    /// q/k/v projections carry a bias (Qwen2-style).
    pub qkv_bias: bool,
    pub o_bias: bool,
    /// Keys further back than this many positions are masked (Mistral/Mixtral).
    pub sliding_window: Option<usize>,
    /// The layers the window applies to, one flag per decoder layer
    /// (Qwen2-MoE's `layer_types`); `None`: every layer.
    pub window_layers: Option<Vec<bool>>,
    pub rope: RopeConfig,
    pub softmax_scale: f32,
}

/// The attention block type of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerAttention {
    /// [`ModelConfig::attention`] (GQA or MLA) with a growing cache.
    Full,
    /// [`ModelConfig::linear_attention`] (KDA) with a fixed-size recurrent state.
    Linear,
}

/// Kimi Delta Attention: gated delta-rule linear attention with short convolutions.
#[derive(Debug, Clone)]
pub struct KdaConfig {
    pub num_heads: usize,
    /// Key width per head; values have the same width.
    pub head_dim: usize,
    /// Width of the causal depthwise convolutions on q, k and v.
    pub conv_kernel: usize,
    pub gate: KdaGate,
    /// The output gate is one `g_proj` (true) or `g_b_proj(g_a_proj(x))`.
    pub full_rank_output_gate: bool,
    /// eps of the per-head output RMSNorm.
    pub norm_eps: f32,
}

/// How KDA turns the decay-gate input into a per-channel log decay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KdaGate {
    /// `-exp(A_log) · softplus(g + dt_bias)` (Kimi-Linear).
    Softplus,
    /// `lower_bound · sigmoid(exp(A_log) · (g + dt_bias))` (Kimi K3).
    LowerBound(f32),
}

/// The residual strategy a family chooses (built by `layers/residual.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualKind {
    /// The pre-norm transformer's running sum.
    Sum,
    /// Attention residuals over depth (Kimi K3).
    AttnRes(AttnResConfig),
}

/// Attention residuals: the residual stream is replaced by sealed block
/// snapshots and softmax reads over them (Kimi K3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnResConfig {
    /// Layers `i` with `i % block_size == 0` seal the live sum.
    pub block_size: usize,
}

#[derive(Debug, Clone)]
pub struct MlaConfig {
    pub num_heads: usize,
    /// None: q comes from one `q_proj`; Some(r): `q_b_proj(norm(q_a_proj(x)))`.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    /// eps of `q_a_layernorm` / `kv_a_layernorm` (transformers: default 1e-6).
    pub latent_norm_eps: f32,
    /// None for NoPE MLA (Kimi): the rope dimensions are attended unrotated.
    pub rope: Option<RopeConfig>,
    /// A sigmoid gate `g_proj(x)` on the concatenated heads before `o_proj` (Kimi K3).
    pub output_gate: bool,
    pub softmax_scale: f32,
}

/// Rotary position embedding of one attention block.
#[derive(Debug, Clone)]
pub struct RopeConfig {
    /// Rotated dimensions per head.
    pub dim: usize,
    /// inv_freq per rotated pair, length dim/2.
    pub inv_freq: Vec<f32>,
    /// Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
    pub attention_scaling: f32,
    /// Pairs (x[2i], x[2i+1]) rotate (DeepSeek) instead of (x[i], x[i+dim/2]).
    pub interleaved: bool,
}

/// Whether a decoder layer's feed-forward block is dense or routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnKind {
    /// A gated MLP of this intermediate width, named `mlp.{gate,up,down}_proj`.
    Dense {
        intermediate_size: usize,
    },
    Moe,
}

#[derive(Debug, Clone)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub top_k: usize,
    pub moe_intermediate_size: usize,
    /// The always-on shared expert(s), if any.
    pub shared: Option<SharedExpertConfig>,
    /// LatentMoE (Kimi K3): experts run in a latent space between
    /// `routed_expert_down_proj` and `routed_expert_up_proj`.
    pub latent: Option<LatentConfig>,
    pub router: RouterConfig,
    pub names: MoeNames,
}

/// The always-on expert(s) of a MoE block, applied to every token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedExpertConfig {
    /// Intermediate width (all shared experts of a layer side by side).
    pub intermediate_size: usize,
    /// Its name under the MoE block: `shared_experts` (DeepSeek, Kimi) or
    /// `shared_expert` (Qwen2-MoE), with `{gate,up,down}_proj` below it.
    pub name: &'static str,
    /// A 1-row linear under the MoE block whose sigmoid scales the shared
    /// output token by token (Qwen2-MoE's `shared_expert_gate`), if any.
    pub gate: Option<&'static str>,
}

impl SharedExpertConfig {
    /// Ungated shared experts named `shared_experts` (DeepSeek, Kimi).
    pub fn ungated(intermediate_size: usize) -> Self {
        Self {
            intermediate_size,
            name: "shared_experts",
            gate: None,
        }
    }
}

/// The latent expert space of a LatentMoE block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatentConfig {
    pub size: usize,
    /// RMSNorm (`routed_expert_norm`) on the weighted expert sum before the up projection.
    pub norm: bool,
}

/// How a router turns logits into (expert, weight) pairs.
#[derive(Debug, Clone, PartialEq)]
pub enum RouterConfig {
    /// softmax over all experts, top-k, optional renormalisation (Mixtral, Qwen3-MoE).
    Softmax { norm_topk_prob: bool },
    /// sigmoid (DeepSeek-V3, Kimi K2) or softmax (DeepSeek-V2) scores plus
    /// a selection-only bias where the layer has one, group-limited top-k,
    /// optionally renormalised unbiased scores times a scaling factor.
    Grouped {
        scoring: Scoring,
        group_score: GroupScore,
        /// 1: no group limit.
        n_group: usize,
        topk_group: usize,
        norm_topk_prob: bool,
        routed_scaling_factor: f32,
    },
}

/// How a grouped router turns logits into expert scores (`scoring_func`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoring {
    Sigmoid,
    Softmax,
}

/// How a group of experts is ranked for group-limited selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupScore {
    /// The sum of its two best selection scores (`noaux_tc`: DeepSeek-V3).
    TopTwoSum,
    /// Its best selection score (`group_limited_greedy`: DeepSeek-V2).
    Max,
}

/// State-dict names of a MoE block, relative to `layers.{i}.`.
#[derive(Debug, Clone)]
pub struct MoeNames {
    /// `mlp` or `block_sparse_moe`.
    pub block: &'static str,
    /// Projection names of one expert: gate, up, down (`gate_proj` or `w1`, ...).
    pub expert_proj: [&'static str; 3],
}

impl From<waste_family::MoeNames> for MoeNames {
    fn from(n: waste_family::MoeNames) -> Self {
        Self {
            block: n.block,
            expert_proj: n.proj,
        }
    }
}

impl MoeNames {
    /// The three weight names of an expert, in gate, up, down order.
    pub fn expert(&self, names: &TensorNames, layer: usize, expert: u32) -> [String; 3] {
        self.expert_proj.map(|p| {
            names.layer(
                layer,
                &format!("{}.experts.{expert}.{p}.weight", self.block),
            )
        })
    }
}

impl ModelConfig {
    /// Parses and validates a Hugging Face config.json of any supported
    /// family; errors name `config.json` and the key at fault.
    pub fn from_json(json: &Value) -> Result<Self> {
        Self::from_json_file(json, Path::new(CONFIG_JSON))
    }

    /// [`Self::from_json`] for the config read from `file` (a config.json, or
    /// the GGUF file a config was synthesised from), which errors name.
    ///
    /// Every count is checked against [`crate::limits`] before it sizes
    /// anything, and the relations the layers rely on (heads divisible by
    /// kv heads, 1 ≤ top-k ≤ experts, ...) hold for any config this returns.
    pub fn from_json_file(json: &Value, file: &Path) -> Result<Self> {
        Self::parse(json).map_err(|e| e.in_file(file))
    }

    fn parse(json: &Value) -> Result<Self> {
        let model_type = match json.get("model_type") {
            Some(Value::String(t)) => t.as_str(),
            None | Some(Value::Null) => "",
            Some(other) => {
                return Err(Error::config(
                    "model_type",
                    format!("{other} is not a string"),
                ));
            }
        };
        crate::limits::check_counts(json, "")?;
        // Kimi K3's text model is its `text_config`.
        if model_type == "kimi_k3"
            && let Some(text) = json.get("text_config")
        {
            crate::limits::check_counts(text, "text_config.")?;
        }
        crate::arch::parse_config(model_type, json)
    }

    /// Values one position adds to the cache of a full-attention layer: its
    /// key and value rows as stored in `ty` (padded,
    /// `crate::cache::kv_row_stride`), or its latent row.
    pub fn kv_row_width(&self, ty: crate::cache::CacheType) -> usize {
        match &self.attention {
            AttentionConfig::Gqa(a) => {
                2 * crate::cache::kv_row_stride(a.num_kv_heads * a.head_dim, ty)
            }
            AttentionConfig::Mla(a) => a.kv_lora_rank + a.qk_rope_head_dim,
        }
    }

    /// Width of the rows a routed expert consumes and produces.
    pub fn expert_width(&self) -> usize {
        self.moe
            .as_ref()
            .and_then(|m| m.latent)
            .map_or(self.hidden_size, |l| l.size)
    }
}

/// Deserialises `T` from the config, naming the key on failure.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(json: &Value) -> Result<T> {
    serde_path_to_error::deserialize(json).map_err(|e| {
        let inner = e.inner().to_string();
        // A missing field is reported at its parent: name the field itself.
        let key = match inner.strip_prefix("missing field `") {
            Some(rest) => rest.trim_end_matches('`').to_string(),
            None => e.path().to_string(),
        };
        Error::config(key, inner)
    })
}

/// `eos_token_id` is a number or a list of numbers in config.json.
pub(crate) fn eos_ids(json: &Value) -> Vec<u32> {
    match json.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|v| v as u32)
            .collect(),
        _ => Vec::new(),
    }
}

pub(crate) fn bos_id(json: &Value) -> Option<u32> {
    json.get("bos_token_id")
        .and_then(Value::as_u64)
        .map(|v| v as u32)
}

/// `hidden_act` must name an activation waste implements.
pub(crate) fn activation(json: &Value) -> Result<Activation> {
    match json
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or("silu")
    {
        "silu" | "swish" => Ok(Activation::Silu),
        other => Err(Error::config(
            "hidden_act",
            format!("{other:?} is not supported (only silu)"),
        )),
    }
}
