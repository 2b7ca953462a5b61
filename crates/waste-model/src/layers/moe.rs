//! The mixture-of-experts block, split at the fetch: [`MoeBlock::route`]
//! decides which experts each token needs; [`MoeBlock::combine`] takes those
//! experts from whoever fetched them and forms the weighted sum plus the
//! shared expert (scaled by its sigmoid gate where the family has one). The
//! block never loads a routed expert itself.
//!
//! LatentMoE (Kimi K3): the router reads the full-width input, the experts
//! run on `routed_expert_down_proj(x)`, the weighted sum is RMS-normalised
//! and projected back by `routed_expert_up_proj`; shared experts read x.

use waste_kernels::{Activation, DenseExpert, ExpertFfn, Route, weighted_sum};

use crate::error::KernelContext;
use crate::layers::Linear;
use crate::layers::router::{Router, RouterOutput};
use crate::ops::norm;
use crate::{Error, Result};

/// The projections around a latent expert space.
#[derive(Debug)]
pub struct LatentProj {
    pub down: Linear,           // (latent, hidden)
    pub up: Linear,             // (hidden, latent)
    pub norm: Option<Vec<f32>>, // (latent)
    pub eps: f32,
}

/// The always-on expert(s) of a block, and the gate that scales them.
#[derive(Debug)]
pub struct SharedExpert {
    pub ffn: DenseExpert,
    /// (1, hidden): the shared output of token t is scaled by
    /// `sigmoid(gate · x_t)` (Qwen2-MoE); unscaled when absent (DeepSeek, Kimi).
    pub gate: Option<Linear>,
}

#[derive(Debug)]
pub struct MoeBlock {
    pub router: Router,
    /// Always-on expert(s) applied to every token.
    pub shared: Option<SharedExpert>,
    pub latent: Option<LatentProj>,
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
    /// (n, d_expert) the rows the routed experts are applied to: the
    /// normalised block input, or its latent projection.
    pub input: Vec<f32>,
    /// (n, hidden) the normalised block input (router and shared experts).
    pub block_input: Vec<f32>,
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

    /// Every (token, position in `ids`, weight) of this routing, for
    /// [`weighted_sum`]; `ids` is [`Routing::unique_experts`].
    pub fn routes(&self, ids: &[u32]) -> Vec<Route> {
        (0..self.n)
            .flat_map(|t| {
                self.token_experts(t)
                    .iter()
                    .zip(&self.weights[t * self.top_k..])
                    .map(move |(e, w)| Route {
                        token: t,
                        expert: ids.binary_search(e).expect("ids holds every chosen expert"),
                        weight: *w,
                    })
            })
            .collect()
    }

    /// Width of the rows the routed experts consume.
    pub fn expert_width(&self) -> usize {
        self.input.len() / self.n.max(1)
    }
}

impl MoeBlock {
    pub fn route(&self, x: Vec<f32>, n: usize, layer: usize) -> Result<Routing> {
        let RouterOutput {
            experts,
            weights,
            logits,
        } = self.router.route(&x, n, layer)?;
        let top_k = experts.len() / n.max(1);
        let input = match &self.latent {
            Some(l) => l.down.forward(&x, n, layer)?,
            None => x.clone(),
        };
        Ok(Routing {
            layer,
            n,
            top_k,
            experts,
            weights,
            logits,
            input,
            block_input: x,
        })
    }

    /// The routed experts' weighted sum in the expert space, (n, d_expert).
    /// `experts[i]` must be the expert `routing.unique_experts()[i]`.
    pub fn routed_sum(&self, routing: &Routing, experts: &[&dyn ExpertFfn]) -> Result<Vec<f32>> {
        let layer = routing.layer;
        let ids = routing.unique_experts();
        if experts.len() != ids.len() {
            return Err(Error::ExpertCount {
                layer,
                expected: ids.len(),
                got: experts.len(),
            });
        }
        let width = routing.expert_width();
        if let Some((id, e)) = ids.iter().zip(experts).find(|(_, e)| e.d_model() != width) {
            return Err(Error::ExpertShape {
                layer,
                expert: *id,
                what: format!("input width {} but the layer feeds {width}", e.d_model()),
            });
        }
        let routes = routing.routes(&ids);
        weighted_sum(
            &routing.input,
            routing.n,
            width,
            &routes,
            experts,
            self.activation,
        )
        .at_layer(layer)
    }

    /// The shared experts' output, (n, hidden), from the block's input
    /// alone: it needs no routed expert, so a caller streaming those can
    /// compute it while their records are still arriving.
    pub fn shared_out(&self, routing: &Routing, hidden: usize) -> Result<Option<Vec<f32>>> {
        let Some(shared) = &self.shared else {
            return Ok(None);
        };
        let mut s = vec![0f32; routing.n * hidden];
        shared
            .ffn
            .forward(&routing.block_input, routing.n, self.activation, &mut s)
            .at_layer(routing.layer)?;
        if let Some(gate) = &shared.gate {
            let g = gate.forward(&routing.block_input, routing.n, routing.layer)?; // (n, 1)
            for (row, g) in s.chunks_mut(hidden).zip(g) {
                let scale = 1.0 / (1.0 + (-g).exp());
                for v in row {
                    *v *= scale;
                }
            }
        }
        Ok(Some(s))
    }

    /// The routed contribution, (n, hidden), from the routed sum in the
    /// expert space: the latent norm and up projection when there is one.
    pub fn finish_routed(&self, routing: &Routing, routed: Vec<f32>) -> Result<Vec<f32>> {
        let layer = routing.layer;
        let mut routed = routed;
        if routed.len() != routing.n * routing.expert_width() {
            return Err(Error::Step {
                layer,
                what: "routed sum of the wrong size",
            });
        }
        if let Some(l) = &self.latent {
            if let Some(w) = &l.norm {
                norm::rms_norm_rows(&mut routed, w, l.eps);
            }
            routed = l.up.forward(&routed, routing.n, layer)?;
        }
        Ok(routed)
    }
}
