//! Feed-forward blocks of the reference forward: which layers are dense, the
//! three routers (Mixtral, Qwen2/Qwen3, DeepSeek-V3) and the weighted expert
//! sum plus shared experts (Qwen2-MoE's under its sigmoid gate).

use anyhow::{Result, bail};
use serde_json::Value;

use super::config::{Arch, Config, field, opt_bool, opt_f64, opt_usize, req_usize};
use super::ops::{Swiglu, dot, load, mat, softmax, swiglu_named, top_k};
use crate::MemorySource;

/// The experts and combine weights chosen for one token from its router
/// logits (`bias`: DeepSeek's `e_score_correction_bias`, empty otherwise).
pub(super) fn route(cfg: &Config, logits: &[f64], bias: &[f32]) -> Result<Vec<(usize, f64)>> {
    let k = req_usize(cfg.json, "num_experts_per_tok")?;
    let norm_topk_prob = opt_bool(cfg.json, "norm_topk_prob")?.unwrap_or(false);
    Ok(match cfg.arch {
        // Quirk 11: softmax over all experts, top-k, always renormalised.
        Arch::Mixtral => {
            let p = softmax(logits);
            let top = top_k(&p, k);
            let sum: f64 = top.iter().map(|&e| p[e]).sum();
            top.iter().map(|&e| (e, p[e] / sum)).collect()
        }
        // Quirk 8: softmax, top-k, renormalised iff norm_topk_prob.
        Arch::Qwen2Moe | Arch::Qwen3Moe => {
            let p = softmax(logits);
            let top = top_k(&p, k);
            let sum: f64 = if norm_topk_prob {
                top.iter().map(|&e| p[e]).sum()
            } else {
                1.0
            };
            top.iter().map(|&e| (e, p[e] / sum)).collect()
        }
        // Quirk 1: sigmoid, bias for selection only, group-limited top-k,
        // unbiased weights, optional renormalisation, always scaled.
        Arch::DeepseekV3 => {
            let n_group = opt_usize(cfg.json, "n_group")?.unwrap_or(1);
            let topk_group = opt_usize(cfg.json, "topk_group")?.unwrap_or(n_group);
            let scaling = opt_f64(cfg.json, "routed_scaling_factor")?.unwrap_or(1.0);
            let s: Vec<f64> = logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect();
            let mut choice: Vec<f64> = s.iter().zip(bias).map(|(s, &b)| s + f64::from(b)).collect();
            let group_size = s.len() / n_group;
            let group_scores: Vec<f64> = choice
                .chunks(group_size)
                .map(|g| top_k(g, 2).iter().map(|&e| g[e]).sum())
                .collect();
            let keep = top_k(&group_scores, topk_group);
            for (e, c) in choice.iter_mut().enumerate() {
                if !keep.contains(&(e / group_size)) {
                    *c = f64::NEG_INFINITY;
                }
            }
            let top = top_k(&choice, k);
            let sum: f64 = if norm_topk_prob {
                top.iter().map(|&e| s[e]).sum::<f64>() + 1e-20
            } else {
                1.0
            };
            top.iter().map(|&e| (e, s[e] / sum * scaling)).collect()
        }
        Arch::Llama => bail!("llama has no router"),
    })
}

/// The MLP or MoE block of layer `layer` on every token.
pub(super) fn feed_forward(
    cfg: &Config,
    src: &MemorySource,
    layer: usize,
    x: &[Vec<f32>],
) -> Result<Vec<Vec<f32>>> {
    let p = format!("model.layers.{layer}.");
    let j = cfg.json;
    let is_moe = match cfg.arch {
        Arch::Llama => false,
        Arch::Mixtral => true,
        Arch::Qwen2Moe | Arch::Qwen3Moe => {
            let step = opt_usize(j, "decoder_sparse_step")?.unwrap_or(1);
            let mlp_only: Vec<u64> = field(j, "mlp_only_layers")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            !mlp_only.contains(&(layer as u64)) && (layer + 1).is_multiple_of(step)
        }
        Arch::DeepseekV3 => layer >= opt_usize(j, "first_k_dense_replace")?.unwrap_or(0),
    };
    if !is_moe {
        let mlp = swiglu_named(
            src,
            &format!("{p}mlp."),
            cfg.hidden,
            req_usize(j, "intermediate_size")?,
        )?;
        return Ok(x.iter().map(|r| mlp.forward(r)).collect());
    }
    let (n_experts, experts, gate_name) = match cfg.arch {
        Arch::Mixtral => {
            let n = req_usize(j, "num_local_experts")?;
            let inter = req_usize(j, "intermediate_size")?;
            let experts = (0..n)
                .map(|e| {
                    let names = ["w1", "w3", "w2"]
                        .map(|w| format!("{p}block_sparse_moe.experts.{e}.{w}.weight"));
                    Swiglu::load(src, [&names[0], &names[1], &names[2]], cfg.hidden, inter)
                })
                .collect::<Result<Vec<_>>>()?;
            (n, experts, format!("{p}block_sparse_moe.gate.weight"))
        }
        _ => {
            let key = match cfg.arch {
                Arch::DeepseekV3 => "n_routed_experts",
                _ if field(j, "num_experts").is_some() => "num_experts",
                _ => "num_local_experts",
            };
            let n = req_usize(j, key)?;
            let inter = req_usize(j, "moe_intermediate_size")?;
            let experts = (0..n)
                .map(|e| swiglu_named(src, &format!("{p}mlp.experts.{e}."), cfg.hidden, inter))
                .collect::<Result<Vec<_>>>()?;
            (n, experts, format!("{p}mlp.gate.weight"))
        }
    };
    let gate = mat(src, &gate_name, n_experts, cfg.hidden)?;
    let bias = if cfg.arch == Arch::DeepseekV3 {
        load(
            src,
            &format!("{p}mlp.gate.e_score_correction_bias"),
            &[n_experts],
        )?
    } else {
        Vec::new()
    };
    let n_shared = opt_usize(j, "n_shared_experts")?.unwrap_or(0);
    let shared = if cfg.arch == Arch::DeepseekV3 && n_shared > 0 {
        let inter = req_usize(j, "moe_intermediate_size")? * n_shared;
        Some(swiglu_named(
            src,
            &format!("{p}mlp.shared_experts."),
            cfg.hidden,
            inter,
        )?)
    } else if cfg.arch == Arch::Qwen2Moe {
        let inter = req_usize(j, "shared_expert_intermediate_size")?;
        Some(swiglu_named(
            src,
            &format!("{p}mlp.shared_expert."),
            cfg.hidden,
            inter,
        )?)
    } else {
        None
    };
    // Qwen2-MoE scales the shared expert by sigmoid(shared_expert_gate(x)).
    let shared_gate = if cfg.arch == Arch::Qwen2Moe {
        Some(mat(
            src,
            &format!("{p}mlp.shared_expert_gate.weight"),
            1,
            cfg.hidden,
        )?)
    } else {
        None
    };
    x.iter()
        .map(|row| {
            // Router logits in float32 whatever the weights' dtype (quirk 7).
            let logits: Vec<f64> = (0..n_experts).map(|e| dot(gate.row(e), row)).collect();
            let mut acc = vec![0f64; cfg.hidden];
            for (e, weight) in route(cfg, &logits, &bias)? {
                for (a, y) in acc.iter_mut().zip(experts[e].forward(row)) {
                    *a += weight * f64::from(y);
                }
            }
            // Quirk 2: shared experts are added unweighted (DeepSeek), or
            // weighted by their own gate (Qwen2-MoE).
            if let Some(shared) = &shared {
                let scale = shared_gate
                    .as_ref()
                    .map_or(1.0, |g| 1.0 / (1.0 + (-dot(g.row(0), row)).exp()));
                for (a, y) in acc.iter_mut().zip(shared.forward(row)) {
                    *a += scale * f64::from(y);
                }
            }
            Ok(acc.iter().map(|&a| a as f32).collect())
        })
        .collect()
}
