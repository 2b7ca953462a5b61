//! Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): GQA with q/k/v biases and
//! no o bias, softmax top-k routing (renormalised only with
//! `norm_topk_prob`), one shared expert of `shared_expert_intermediate_size`
//! scaled token by token by `sigmoid(shared_expert_gate(x))`, dense MLPs of
//! `intermediate_size` on the layers `decoder_sparse_step` and
//! `mlp_only_layers` leave out, and a sliding window on the layers
//! `layer_types` names. See transformers' `modeling_qwen2_moe.py`.

use serde::Deserialize;
use serde_json::Value;

use crate::arch::{Trunk, TrunkDefaults, check_top_k, gqa};
use crate::config::{
    self, AttentionConfig, GqaConfig, ModelConfig, MoeConfig, RouterConfig, SharedExpertConfig,
};
use crate::{Error, Result};

/// config.json keys of a Qwen2-MoE checkpoint beyond the [`Trunk`] and the
/// heads; defaults are transformers' `Qwen2MoeConfig` ones (releases
/// before transformers 5 write no `qkv_bias`: their q/k/v projections
/// carry biases).
#[derive(Debug, Deserialize)]
struct Qwen2MoeConfig {
    intermediate_size: usize,
    #[serde(default = "super::yes")]
    qkv_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default = "default_max_window_layers")]
    max_window_layers: usize,
    sliding_window: Option<usize>,
    layer_types: Option<Vec<String>>,
    num_experts: usize,
    num_experts_per_tok: usize,
    moe_intermediate_size: usize,
    shared_expert_intermediate_size: usize,
    #[serde(default)]
    norm_topk_prob: bool,
    #[serde(default = "super::one")]
    decoder_sparse_step: usize,
    #[serde(default)]
    mlp_only_layers: Option<Vec<usize>>,
}

const DEFAULTS: TrunkDefaults = TrunkDefaults {
    rms_norm_eps: 1e-6,
    max_position_embeddings: 32_768,
};

fn default_max_window_layers() -> usize {
    28
}

/// The shared expert and its gate, under `mlp`.
const SHARED: &str = "shared_expert";
const SHARED_GATE: &str = "shared_expert_gate";

pub(crate) fn parse(_model_type: &str, json: &Value) -> Result<ModelConfig> {
    let t = Trunk::parse(json)?;
    let c: Qwen2MoeConfig = config::parse(json)?;
    check_top_k(
        "num_experts_per_tok",
        c.num_experts_per_tok,
        "num_experts",
        c.num_experts,
    )?;
    let base = gqa(json, t.hidden_size, 10_000.0)?;
    let (sliding_window, window_layers) = sliding_layers(&c, t.num_hidden_layers)?;
    if c.decoder_sparse_step == 0 {
        return Err(Error::config(
            "decoder_sparse_step",
            "0 would make no layer (transformers divides by it)",
        ));
    }
    let attention = GqaConfig {
        qkv_bias: c.qkv_bias,
        sliding_window,
        window_layers,
        ..base
    };
    let mlp_only = c.mlp_only_layers.unwrap_or_default();
    let ffn = t.ffn(c.intermediate_size, |i| {
        !mlp_only.contains(&i) && (i + 1) % c.decoder_sparse_step == 0
    });
    let moe = MoeConfig {
        num_experts: c.num_experts,
        top_k: c.num_experts_per_tok,
        moe_intermediate_size: c.moe_intermediate_size,
        shared: Some(SharedExpertConfig {
            intermediate_size: c.shared_expert_intermediate_size,
            name: SHARED,
            gate: Some(SHARED_GATE),
        }),
        latent: None,
        router: RouterConfig::Softmax {
            norm_topk_prob: c.norm_topk_prob,
        },
        names: waste_family::qwen2_moe::FAMILY.moe.into(),
    };
    Ok(t.model(
        "qwen2_moe",
        DEFAULTS,
        AttentionConfig::Gqa(attention),
        ffn,
        Some(moe),
        config::activation(json)?,
        json,
    ))
}

/// The window and the layers it applies to, as transformers reads them:
/// `layer_types` when given, else (with `use_sliding_window`) the even
/// layers below `max_window_layers`; `sliding_window` applies only when
/// `use_sliding_window` is set (transformers makes it 0 otherwise).
fn sliding_layers(c: &Qwen2MoeConfig, layers: usize) -> Result<(Option<usize>, Option<Vec<bool>>)> {
    let window = c.sliding_window.filter(|&w| c.use_sliding_window && w > 0);
    let layers: Vec<bool> = match &c.layer_types {
        Some(types) => {
            if types.len() != layers {
                return Err(Error::config(
                    "layer_types",
                    format!("{} entries for num_hidden_layers {layers}", types.len()),
                ));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    "full_attention" => Ok(false),
                    "sliding_attention" => Ok(true),
                    other => Err(Error::config(
                        "layer_types",
                        format!("{other:?} is not full_attention or sliding_attention"),
                    )),
                })
                .collect::<Result<_>>()?
        }
        None => (0..layers)
            .map(|i| c.use_sliding_window && i % 2 == 0 && i < c.max_window_layers)
            .collect(),
    };
    if !layers.contains(&true) || window.is_none() {
        return Ok((None, None));
    }
    Ok((window, Some(layers)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::FfnKind;

    fn base() -> Value {
        json!({
            "model_type": "qwen2_moe", "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24,
        })
    }

    #[test]
    fn release_defaults_are_transformers_ones() {
        let c = parse("qwen2_moe", &base()).unwrap();
        let AttentionConfig::Gqa(a) = &c.attention else {
            panic!("GQA expected")
        };
        assert!(a.qkv_bias && !a.o_bias && !a.qk_norm);
        let moe = c.moe.unwrap();
        assert_eq!(
            moe.router,
            RouterConfig::Softmax {
                norm_topk_prob: false
            }
        );
        assert_eq!(
            moe.shared,
            Some(SharedExpertConfig {
                intermediate_size: 24,
                name: "shared_expert",
                gate: Some("shared_expert_gate"),
            })
        );
        assert_eq!(c.ffn, vec![FfnKind::Moe; 4]);
    }

    #[test]
    fn sparse_step_and_mlp_only_layers_choose_dense_layers() {
        let mut j = base();
        j["decoder_sparse_step"] = json!(2);
        j["mlp_only_layers"] = json!([3]);
        j["norm_topk_prob"] = json!(true);
        j["qkv_bias"] = json!(false);
        let c = parse("qwen2_moe", &j).unwrap();
        let dense = FfnKind::Dense {
            intermediate_size: 48,
        };
        assert_eq!(c.ffn, vec![dense, FfnKind::Moe, dense, dense]);
        let AttentionConfig::Gqa(a) = &c.attention else {
            panic!("GQA expected")
        };
        assert!(!a.qkv_bias);
        assert_eq!(
            c.moe.unwrap().router,
            RouterConfig::Softmax {
                norm_topk_prob: true
            }
        );
    }

    #[test]
    fn the_window_applies_to_the_layers_transformers_windows() {
        let window = |j: &Value| {
            let c = ModelConfig::from_json(j).unwrap();
            let AttentionConfig::Gqa(a) = c.attention else {
                panic!("GQA expected")
            };
            (a.sliding_window, a.window_layers)
        };
        let mut j = base();
        j["use_sliding_window"] = json!(false);
        j["sliding_window"] = json!(0);
        assert_eq!(window(&j), (None, None));
        j["sliding_window"] = json!(8);
        assert_eq!(window(&j), (None, None));
        j["use_sliding_window"] = json!(true);
        j["max_window_layers"] = json!(3);
        assert_eq!(window(&j), (Some(8), Some(vec![true, false, true, false])));
        j["layer_types"] = json!(vec!["full_attention"; 4]);
        assert_eq!(window(&j), (None, None));
        j["layer_types"] = json!([
            "full_attention",
            "sliding_attention",
            "full_attention",
            "full_attention"
        ]);
        assert_eq!(window(&j), (Some(8), Some(vec![false, true, false, false])));
        j["layer_types"] = json!(["full_attention"]);
        assert!(ModelConfig::from_json(&j).is_err());
        j["layer_types"] = Value::Null;
        j["decoder_sparse_step"] = json!(0);
        assert!(ModelConfig::from_json(&j).is_err());
    }
}
