//! MoE routers: from a token's hidden row to its top-k (expert, weight) pairs.
//! Softmax routers (Mixtral, Qwen3-MoE) and DeepSeek's grouped routers:
//! sigmoid (V3) or softmax (V2) scores, a selection bias, group-limited top-k.

use waste_kernels::Matrix;

use crate::Result;
use crate::config::{GroupScore, RouterConfig, Scoring};
use crate::error::KernelContext;
use crate::ops::softmax::{softmax, top_k};

#[derive(Debug)]
pub struct Router {
    weight: Matrix,                    // (n_experts, hidden)
    correction_bias: Option<Vec<f32>>, // (n_experts), selection only
    cfg: RouterConfig,
    top_k: usize,
}

/// The choices of a router for `n` tokens.
#[derive(Debug, Clone)]
pub struct RouterOutput {
    /// (n, top_k) expert ids, best selection score first.
    pub experts: Vec<u32>,
    /// (n, top_k) combine weights, aligned with `experts`.
    pub weights: Vec<f32>,
    /// (n, n_experts) raw router logits.
    pub logits: Vec<f32>,
}

impl Router {
    pub fn new(
        weight: Matrix,
        correction_bias: Option<Vec<f32>>,
        cfg: RouterConfig,
        top_k: usize,
    ) -> Self {
        Self {
            weight,
            correction_bias,
            cfg,
            top_k,
        }
    }

    pub fn num_experts(&self) -> usize {
        self.weight.rows()
    }

    /// Routes `n` rows of `x` (n, hidden).
    pub fn route(&self, x: &[f32], n: usize, layer: usize) -> Result<RouterOutput> {
        let e = self.num_experts();
        let logits = self.weight.matmul_alloc(x, n).at_layer(layer)?;
        let mut experts = Vec::with_capacity(n * self.top_k);
        let mut weights = Vec::with_capacity(n * self.top_k);
        for row in logits.chunks(e) {
            let (ids, w) = self.route_one(row);
            experts.extend(ids.into_iter().map(|i| i as u32));
            weights.extend(w);
        }
        Ok(RouterOutput {
            experts,
            weights,
            logits,
        })
    }

    fn route_one(&self, logits: &[f32]) -> (Vec<usize>, Vec<f32>) {
        match self.cfg {
            RouterConfig::Softmax { norm_topk_prob } => {
                let mut p = logits.to_vec();
                softmax(&mut p);
                let ids = top_k(&p, self.top_k);
                let mut w: Vec<f32> = ids.iter().map(|&i| p[i]).collect();
                if norm_topk_prob {
                    let sum: f32 = w.iter().sum();
                    w.iter_mut().for_each(|v| *v /= sum);
                }
                (ids, w)
            }
            RouterConfig::Grouped {
                scoring,
                group_score,
                n_group,
                topk_group,
                norm_topk_prob,
                routed_scaling_factor,
            } => {
                let scores: Vec<f32> = match scoring {
                    Scoring::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect(),
                    Scoring::Softmax => {
                        let mut p = logits.to_vec();
                        softmax(&mut p);
                        p
                    }
                };
                let mut choice: Vec<f32> = match &self.correction_bias {
                    Some(b) => scores.iter().zip(b).map(|(s, b)| s + b).collect(),
                    None => scores.clone(),
                };
                mask_groups(&mut choice, group_score, n_group, topk_group);
                let ids = top_k(&choice, self.top_k);
                let mut w: Vec<f32> = ids.iter().map(|&i| scores[i]).collect();
                if norm_topk_prob {
                    let sum = w.iter().sum::<f32>() + 1e-20;
                    w.iter_mut().for_each(|v| *v /= sum);
                }
                w.iter_mut().for_each(|v| *v *= routed_scaling_factor);
                (ids, w)
            }
        }
    }
}

/// Group-limited selection: experts form `n_group` contiguous groups, each
/// ranked by `by`; all but the `topk_group` best groups are set to -inf.
fn mask_groups(choice: &mut [f32], by: GroupScore, n_group: usize, topk_group: usize) {
    if n_group <= 1 || topk_group >= n_group {
        return;
    }
    let size = choice.len() / n_group;
    let best = match by {
        GroupScore::TopTwoSum => 2,
        GroupScore::Max => 1,
    };
    let group_scores: Vec<f32> = choice
        .chunks(size)
        .map(|g| top_k(g, best.min(g.len())).iter().map(|&i| g[i]).sum())
        .collect();
    let keep = top_k(&group_scores, topk_group);
    for (g, chunk) in choice.chunks_mut(size).enumerate() {
        if !keep.contains(&g) {
            chunk.fill(f32::NEG_INFINITY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_mask_keeps_the_groups_with_the_best_two_scores() {
        // group 0: 0.9 + 0.0, group 1: 0.5 + 0.5, group 2: 0.1 + 0.1
        let mut c = vec![0.9, 0.0, 0.5, 0.5, 0.1, 0.1];
        mask_groups(&mut c, GroupScore::TopTwoSum, 3, 1);
        assert_eq!(c[..2], [f32::NEG_INFINITY; 2]);
        assert_eq!(c[2..4], [0.5, 0.5]);
        assert_eq!(c[4..], [f32::NEG_INFINITY; 2]);
        // By its best score alone, group 0 wins.
        let mut c = vec![0.9, 0.0, 0.5, 0.5, 0.1, 0.1];
        mask_groups(&mut c, GroupScore::Max, 3, 1);
        assert_eq!(c[..2], [0.9, 0.0]);
        assert_eq!(c[2..], [f32::NEG_INFINITY; 4]);
    }

    /// Softmax scores with V2's group max, weighted as llama.cpp's
    /// `deepseek2` does for every generation (normalised when asked, then
    /// scaled): a `deepseek2` GGUF reaches this router through the V3
    /// config. (DeepSeek-V2's own modeling code scales only when it does
    /// not normalise; its released configs do not normalise.)
    #[test]
    fn softmax_grouped_router_scores_selects_and_weights() {
        // Logits ln(1..=4): softmax gives 0.1, 0.2, 0.3, 0.4 exactly in
        // real arithmetic. Groups {0,1} and {2,3}; by max, group 1 wins.
        let logits: Vec<f32> = (1..=4).map(|v| (v as f32).ln()).collect();
        let cfg = |norm_topk_prob, n_group| RouterConfig::Grouped {
            scoring: Scoring::Softmax,
            group_score: GroupScore::Max,
            n_group,
            topk_group: 1,
            norm_topk_prob,
            routed_scaling_factor: 16.0,
        };
        let w = Matrix::f32(4, 1, logits).unwrap();
        let r = Router::new(w.clone(), None, cfg(false, 1), 2);
        let out = r.route(&[1.0], 1, 0).unwrap();
        assert_eq!(out.experts, vec![3, 2]);
        for (got, want) in out.weights.iter().zip([0.4 * 16.0, 0.3 * 16.0]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
        let r = Router::new(w.clone(), None, cfg(true, 1), 2);
        let out = r.route(&[1.0], 1, 0).unwrap();
        for (got, want) in out.weights.iter().zip([16.0 * 4.0 / 7.0, 16.0 * 3.0 / 7.0]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
        // A bias on expert 0 makes group 0 the best group (0.1 + 0.35 >
        // 0.4): the choice is then experts 0 and 1, weighted unbiased.
        let r = Router::new(w, Some(vec![0.35, 0.0, 0.0, 0.0]), cfg(false, 2), 2);
        let out = r.route(&[1.0], 1, 0).unwrap();
        assert_eq!(out.experts, vec![0, 1]);
        for (got, want) in out.weights.iter().zip([0.1 * 16.0, 0.2 * 16.0]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn sigmoid_router_weights_use_unbiased_scores() {
        let cfg = RouterConfig::Grouped {
            scoring: Scoring::Sigmoid,
            group_score: GroupScore::TopTwoSum,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
            routed_scaling_factor: 2.0,
        };
        // Bias flips the choice to expert 1, but weights come from the sigmoids.
        let w = Matrix::f32(2, 1, vec![1.0, 0.0]).unwrap();
        let r = Router::new(w, Some(vec![0.0, 1.0]), cfg, 1);
        let out = r.route(&[1.0], 1, 0).unwrap();
        assert_eq!(out.experts, vec![1]);
        assert!((out.weights[0] - 2.0).abs() < 1e-6); // normalised to 1, times 2
    }
}
