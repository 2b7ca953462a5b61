//! The releases synth-store imitates: those whose family declares a store
//! shape (`waste-family`, the `release.rs` of its folder), by `--like`
//! name. This file only adapts that description to the store's types.

use serde_json::Value;
use waste_family::release::{BackboneTensor, ExpertAct, ExpertShape, Like, StoreShape};
use waste_format::experts::ExpertActivation;

/// A release `--like` names that synth-store can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family(Like);

impl std::str::FromStr for Family {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let store = || Like::all().filter(|l| l.release().store.is_some());
        store().find(|l| l.name() == s).map(Family).ok_or_else(|| {
            let names: Vec<&str> = store().map(Like::name).collect();
            format!("unknown family {s:?} ({})", names.join(", "))
        })
    }
}

impl Family {
    fn shape(self) -> &'static StoreShape {
        self.0
            .release()
            .store
            .as_ref()
            .expect("from_str admits only releases with a store shape")
    }

    /// The release, as `waste synth` names it.
    pub fn like(self) -> Like {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn model_type(self) -> &'static str {
        self.0.release().model_type
    }

    /// Expert shapes, as released.
    pub fn experts(self) -> ExpertShape {
        self.shape().experts
    }

    /// The experts' activation, as the experts index records it.
    pub fn activation(self) -> ExpertActivation {
        match self.shape().experts.activation {
            ExpertAct::Silu => ExpertActivation::Silu,
            ExpertAct::Situ { beta, linear_beta } => ExpertActivation::Situ { beta, linear_beta },
        }
    }

    /// Whether this module writes a backbone a node can load (else the
    /// store comes from a synthetic checkpoint and the converter).
    pub fn has_backbone(self) -> bool {
        self.shape().layer_tensors.is_some()
    }

    /// `config.json` for `layers` MoE layers of `n_experts` experts.
    pub fn config(self, layers: u32, n_experts: u32, vocab: usize, eos: usize) -> Value {
        (self.shape().config)(layers, n_experts, vocab, eos)
    }

    /// Backbone tensors of one decoder layer: (name, shape, is f32).
    pub fn layer_tensors(self, i: u32, n_experts: u32) -> Vec<BackboneTensor> {
        self.shape()
            .layer_tensors
            .map_or_else(Vec::new, |layer| layer(i, n_experts))
    }

    pub fn hidden(self) -> usize {
        self.shape().hidden
    }
}
