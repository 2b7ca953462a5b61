//! The mixture-of-experts block, split at the fetch: [`MoeBlock::route`]
//! decides which experts each token needs; [`MoeBlock::combine`] takes those
//! experts from whoever fetched them and forms the weighted sum plus the
//! shared expert. The block never loads a routed expert itself.

use rayon::prelude::*;
use waste_kernels::{Activation, DenseExpert, ExpertFfn};

use crate::error::KernelContext;
use crate::layers::router::{Router, RouterOutput};
use crate::{Error, Result};

#[derive(Debug)]
pub struct MoeBlock {
    pub router: Router,
    /// Always-on expert(s) applied to every token, unweighted (DeepSeek).
    pub shared: Option<DenseExpert>,
    pub activation: Activation,
}

/// A layer's routing decision for `n` tokens, and the input the experts consume.
#[derive(Debug, Clone)]
pub struct Routing {
    pub layer: usize,
    pub n: usize,
    pub top_k: usize,
    /// (n, top_k) expert ids per token, best selection score first.
    pub experts: Vec<u32>,
    /// (n, top_k) combine weights aligned with `experts`.
    pub weights: Vec<f32>,
    /// (n, n_experts) raw router logits.
    pub logits: Vec<f32>,
    /// (n, hidden) the normalised rows the experts are applied to.
    pub input: Vec<f32>,
}

impl Routing {
    /// The distinct experts any token chose, ascending: what a source must
    /// fetch, once each, for this layer.
    pub fn unique_experts(&self) -> Vec<u32> {
        let mut ids = self.experts.clone();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Expert ids chosen by token `t`.
    pub fn token_experts(&self, t: usize) -> &[u32] {
        &self.experts[t * self.top_k..(t + 1) * self.top_k]
    }
}

/// The (token, weight) rows one expert served and its (rows, hidden) outputs.
type ExpertRows = (Vec<(usize, f32)>, Vec<f32>);

impl MoeBlock {
    pub fn route(&self, x: Vec<f32>, n: usize, layer: usize) -> Result<Routing> {
        let RouterOutput {
            experts,
            weights,
            logits,
        } = self.router.route(&x, n, layer)?;
        let top_k = experts.len() / n.max(1);
        Ok(Routing {
            layer,
            n,
            top_k,
            experts,
            weights,
            logits,
            input: x,
        })
    }

    /// `Σ_k w_k · expert_k(x)` and `shared(x)` for every token, each (n, hidden).
    /// `experts[i]` must be the expert `routing.unique_experts()[i]`.
    pub fn combine(
        &self,
        routing: &Routing,
        experts: &[&dyn ExpertFfn],
        hidden: usize,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let layer = routing.layer;
        let ids = routing.unique_experts();
        if experts.len() != ids.len() {
            return Err(Error::ExpertCount {
                layer,
                expected: ids.len(),
                got: experts.len(),
            });
        }
        // Each expert runs once on all the tokens that chose it.
        let partial: Vec<ExpertRows> = ids
            .par_iter()
            .zip(experts.par_iter())
            .map(|(&id, &e)| {
                if e.d_model() != hidden {
                    return Err(Error::ExpertShape {
                        layer,
                        expert: id,
                        what: format!(
                            "d_model {} but the model's hidden size is {hidden}",
                            e.d_model()
                        ),
                    });
                }
                let rows: Vec<(usize, f32)> = (0..routing.n)
                    .flat_map(|t| {
                        routing
                            .token_experts(t)
                            .iter()
                            .zip(&routing.weights[t * routing.top_k..])
                            .filter(|(e, _)| **e == id)
                            .map(move |(_, w)| (t, *w))
                    })
                    .collect();
                let x: Vec<f32> = rows
                    .iter()
                    .flat_map(|(t, _)| routing.input[t * hidden..][..hidden].iter().copied())
                    .collect();
                let mut y = vec![0f32; rows.len() * hidden];
                e.forward(&x, rows.len(), self.activation, &mut y)
                    .at_layer(layer)?;
                Ok((rows, y))
            })
            .collect::<Result<_>>()?;
        // Sum in ascending expert order, as transformers' eager loop does.
        let mut out = vec![0f32; routing.n * hidden];
        for (rows, y) in &partial {
            for ((t, w), yr) in rows.iter().zip(y.chunks(hidden)) {
                for (o, v) in out[t * hidden..][..hidden].iter_mut().zip(yr) {
                    *o += v * w;
                }
            }
        }
        let shared = match &self.shared {
            Some(shared) => {
                let mut s = vec![0f32; routing.n * hidden];
                shared
                    .forward(&routing.input, routing.n, self.activation, &mut s)
                    .at_layer(layer)?;
                Some(s)
            }
            None => None,
        };
        Ok((out, shared))
    }
}
