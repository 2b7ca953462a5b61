//! The weights a [`ModelConfig`] implies, by state-dict name and shape, so
//! that a checkpoint can be checked against its config from the tensor
//! table alone (no weight read): what `waste convert` and `waste inspect
//! --verify` check before they accept a model, with the shapes
//! [`crate::Model::load`] asks its loader for. Kimi Delta Attention's
//! convolutions, gates and decay, and the attention-residual reads, are
//! left to the loader, which checks them when it reads them.

use std::collections::HashSet;

use crate::config::{AttentionConfig, FfnKind, LayerAttention, ModelConfig};
use crate::{Error, Result};

/// One weight the config implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedTensor {
    pub name: String,
    /// Row-major shape, as the loader checks it.
    pub shape: Vec<usize>,
    /// False for a weight the loader reads only when present (a tied
    /// `lm_head`, the router's selection bias); its shape is checked then.
    pub required: bool,
}

/// The shape of a routed expert layer, as a store's experts index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertLayerShape {
    pub layer: usize,
    pub n_experts: usize,
    pub d_model: usize,
    pub d_ff: usize,
}

impl ModelConfig {
    /// The backbone weights (everything but the routed experts) the loader reads.
    pub fn expected_backbone(&self) -> Vec<ExpectedTensor> {
        let h = self.hidden_size;
        let names = &self.names;
        let mut out = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, required: bool| {
            out.push(ExpectedTensor {
                name,
                shape,
                required,
            });
        };
        push(
            names.model("embed_tokens.weight"),
            vec![self.vocab_size, h],
            true,
        );
        push(
            names.lm_head.clone(),
            vec![self.vocab_size, h],
            !self.tie_word_embeddings,
        );
        push(names.model("norm.weight"), vec![h], true);
        for layer in 0..self.num_hidden_layers {
            let at = |rest: &str| names.layer(layer, rest);
            push(at("input_layernorm.weight"), vec![h], true);
            push(at("post_attention_layernorm.weight"), vec![h], true);
            let attn = |s: &str| at(&format!("self_attn.{s}"));
            match (self.layer_attention.get(layer), &self.attention) {
                (Some(LayerAttention::Linear), _) => {
                    if let Some(k) = &self.linear_attention {
                        let width = k.num_heads * k.head_dim;
                        for p in ["q_proj", "k_proj", "v_proj"] {
                            push(attn(&format!("{p}.weight")), vec![width, h], true);
                        }
                    }
                }
                (_, AttentionConfig::Gqa(a)) => {
                    let (q, kv) = (a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim);
                    push(attn("q_proj.weight"), vec![q, h], true);
                    push(attn("k_proj.weight"), vec![kv, h], true);
                    push(attn("v_proj.weight"), vec![kv, h], true);
                    push(attn("o_proj.weight"), vec![h, q], true);
                    if a.qkv_bias {
                        push(attn("q_proj.bias"), vec![q], true);
                        push(attn("k_proj.bias"), vec![kv], true);
                        push(attn("v_proj.bias"), vec![kv], true);
                    }
                    if a.o_bias {
                        push(attn("o_proj.bias"), vec![h], true);
                    }
                    if a.qk_norm {
                        push(attn("q_norm.weight"), vec![a.head_dim], true);
                        push(attn("k_norm.weight"), vec![a.head_dim], true);
                    }
                }
                (_, AttentionConfig::Mla(a)) => {
                    let q_out = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim);
                    match a.q_lora_rank {
                        None => push(attn("q_proj.weight"), vec![q_out, h], true),
                        Some(r) => {
                            push(attn("q_a_proj.weight"), vec![r, h], true);
                            push(attn("q_a_layernorm.weight"), vec![r], true);
                            push(attn("q_b_proj.weight"), vec![q_out, r], true);
                        }
                    }
                    push(
                        attn("kv_a_proj_with_mqa.weight"),
                        vec![a.kv_lora_rank + a.qk_rope_head_dim, h],
                        true,
                    );
                    push(attn("kv_a_layernorm.weight"), vec![a.kv_lora_rank], true);
                    push(
                        attn("kv_b_proj.weight"),
                        vec![
                            a.num_heads * (a.qk_nope_head_dim + a.v_head_dim),
                            a.kv_lora_rank,
                        ],
                        true,
                    );
                    let v = a.num_heads * a.v_head_dim;
                    if a.output_gate {
                        push(attn("g_proj.weight"), vec![v, h], true);
                    }
                    push(attn("o_proj.weight"), vec![h, v], true);
                }
            }
            let mlp = |p: &str| at(&format!("mlp.{p}.weight"));
            match (self.ffn.get(layer), &self.moe) {
                (Some(FfnKind::Dense { intermediate_size }), _) => {
                    let d_ff = *intermediate_size;
                    push(mlp("gate_proj"), vec![d_ff, h], true);
                    push(mlp("up_proj"), vec![d_ff, h], true);
                    push(mlp("down_proj"), vec![h, d_ff], true);
                }
                (Some(FfnKind::Moe), Some(moe)) => {
                    let block = |rest: &str| at(&format!("{}.{rest}", moe.names.block));
                    push(block("gate.weight"), vec![moe.num_experts, h], true);
                    push(
                        block("gate.e_score_correction_bias"),
                        vec![moe.num_experts],
                        false,
                    );
                    if let Some(s) = moe.shared {
                        let d_ff = s.intermediate_size;
                        let shared = |p: &str| block(&format!("{}.{p}.weight", s.name));
                        push(shared("gate_proj"), vec![d_ff, h], true);
                        push(shared("up_proj"), vec![d_ff, h], true);
                        push(shared("down_proj"), vec![h, d_ff], true);
                        if let Some(gate) = s.gate {
                            push(block(&format!("{gate}.weight")), vec![1, h], true);
                        }
                    }
                    if let Some(l) = moe.latent {
                        push(
                            block("routed_expert_down_proj.weight"),
                            vec![l.size, h],
                            true,
                        );
                        push(block("routed_expert_up_proj.weight"), vec![h, l.size], true);
                        if l.norm {
                            push(block("routed_expert_norm.weight"), vec![l.size], true);
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The routed-expert layers: which layers route, to how many experts of
    /// which shape.
    pub fn expert_layers(&self) -> Vec<ExpertLayerShape> {
        let Some(moe) = &self.moe else {
            return Vec::new();
        };
        (0..self.num_hidden_layers)
            .filter(|&l| self.ffn.get(l) == Some(&FfnKind::Moe))
            .map(|layer| ExpertLayerShape {
                layer,
                n_experts: moe.num_experts,
                d_model: self.expert_width(),
                d_ff: moe.moe_intermediate_size,
            })
            .collect()
    }

    /// The routed-expert weights, gate, up and down of every expert of every
    /// MoE layer, made one at a time: at the configuration maxima they are
    /// millions, and a checkpoint that lacks the first is refused at once.
    pub fn expected_experts(&self) -> impl Iterator<Item = ExpectedTensor> + '_ {
        let layers = self.moe.as_ref().map(|moe| (moe, self.expert_layers()));
        layers.into_iter().flat_map(move |(moe, layers)| {
            layers.into_iter().flat_map(move |l| {
                (0..l.n_experts).flat_map(move |e| {
                    let [gate, up, down] = moe.names.expert(&self.names, l.layer, e as u32);
                    [
                        (gate, vec![l.d_ff, l.d_model]),
                        (up, vec![l.d_ff, l.d_model]),
                        (down, vec![l.d_model, l.d_ff]),
                    ]
                    .map(|(name, shape)| ExpectedTensor {
                        name,
                        shape,
                        required: true,
                    })
                })
            })
        })
    }
}

/// Checks `expected` against the shapes a checkpoint holds (`shape_of`
/// gives a tensor's shape, `None` when absent).
pub fn check_shapes<'a>(
    expected: impl IntoIterator<Item = &'a ExpectedTensor>,
    shape_of: &dyn Fn(&str) -> Option<Vec<usize>>,
) -> Result<()> {
    for t in expected {
        match shape_of(&t.name) {
            None if t.required => {
                return Err(Error::MissingWeight {
                    name: t.name.clone(),
                    expected: t.shape.clone(),
                });
            }
            Some(got) if got != t.shape => {
                return Err(Error::WeightShape {
                    name: t.name.clone(),
                    got,
                    expected: t.shape.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a checkpoint (its tensor `names` and `shape_of`) against
/// `config`: every backbone weight and routed expert the config implies is
/// there with its shape, and no routed expert of a decoder layer lies
/// outside the config's MoE layers and experts. Layers past
/// `num_hidden_layers` (DeepSeek-V3's multi-token-prediction layer) are
/// never loaded and not checked.
pub fn check_checkpoint(
    config: &ModelConfig,
    names: &[&str],
    shape_of: &dyn Fn(&str) -> Option<Vec<usize>>,
) -> Result<()> {
    check_shapes(&config.expected_backbone(), shape_of)?;
    for t in config.expected_experts() {
        check_shapes([&t], shape_of)?;
    }
    // Every expected expert is in the checkpoint now, so this set is no
    // larger than the checkpoint's own table of names.
    let known: HashSet<String> = config.expected_experts().map(|t| t.name).collect();
    let layers_prefix = config.names.model("layers.");
    let stray = names.iter().find(|n| {
        let layer = n
            .strip_prefix(layers_prefix.as_str())
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(l, _)| l.parse::<usize>().ok());
        n.contains(".experts.")
            && n.ends_with(".weight")
            && layer.is_some_and(|l| l < config.num_hidden_layers)
            && !known.contains(**n)
    });
    if let Some(stray) = stray {
        return Err(Error::UnexpectedWeight {
            name: (*stray).to_string(),
            reason: format!(
                "a routed expert outside the config's MoE layers or past its {} experts per layer",
                config.moe.as_ref().map_or(0, |m| m.num_experts)
            ),
        });
    }
    Ok(())
}

/// Checks a store's expert layers (from its experts index) and top-k
/// against `config`.
pub fn check_expert_layers(
    config: &ModelConfig,
    layers: &[ExpertLayerShape],
    top_k: usize,
) -> Result<()> {
    let want = config.expert_layers();
    for l in layers {
        let name = format!("experts layer {}", l.layer);
        match want.iter().find(|w| w.layer == l.layer) {
            None => {
                return Err(Error::UnexpectedWeight {
                    name,
                    reason: "the config has no routed experts in this layer".into(),
                });
            }
            Some(w) if w != l => {
                return Err(Error::WeightShape {
                    name,
                    got: vec![l.n_experts, l.d_model, l.d_ff],
                    expected: vec![w.n_experts, w.d_model, w.d_ff],
                });
            }
            Some(_) => {}
        }
    }
    if let Some(w) = want
        .iter()
        .find(|w| !layers.iter().any(|l| l.layer == w.layer))
    {
        return Err(Error::MissingWeight {
            name: format!("experts layer {}", w.layer),
            expected: vec![w.n_experts, w.d_model, w.d_ff],
        });
    }
    let config_k = config.moe.as_ref().map_or(0, |m| m.top_k);
    if !want.is_empty() && top_k != config_k {
        return Err(Error::config(
            "num_experts_per_tok",
            format!("{config_k}, but the experts index records top-k {top_k}"),
        ));
    }
    Ok(())
}
