//! The residual strategy a family chooses for its decoder: what each
//! sub-block (attention, feed-forward, output head) reads from the stream
//! of module outputs. The decoder asks the strategy and never the family;
//! the attention-residual read itself is [`AttnResRead`].

use crate::Result;
use crate::config::{ModelConfig, ResidualKind};
use crate::layers::Loader;
use crate::layers::attn_res::{AttnResRead, LayerAttnRes};
use crate::trace::Trace;

/// A loaded residual strategy.
#[derive(Debug)]
pub enum Residual {
    /// The pre-norm transformer: every sub-block reads the running sum.
    Sum,
    /// Attention residuals (Kimi K3): each sub-block reads over depth, the
    /// sealed block snapshots and the live sum since the last seal.
    AttnRes {
        /// Layers `i` with `i % block_size == 0` seal the live sum.
        block_size: usize,
        /// One pair of reads per decoder layer.
        layers: Vec<LayerAttnRes>,
        /// The read after the last layer.
        output: AttnResRead,
    },
}

impl Residual {
    /// Loads the strategy `c.residual` names, with its weights.
    pub fn load(w: Loader<'_>, c: &ModelConfig) -> Result<Self> {
        let ResidualKind::AttnRes(cfg) = c.residual else {
            return Ok(Self::Sum);
        };
        let (h, eps, names) = (c.hidden_size, c.rms_norm_eps, &c.names);
        let read = |norm: String, proj: String| AttnResRead::load(w, &norm, &proj, h, eps);
        let layers = (0..c.num_hidden_layers)
            .map(|layer| {
                let kind = |k: &str| {
                    read(
                        names.layer(layer, &format!("{k}_res_norm")),
                        names.layer(layer, &format!("{k}_res_proj")),
                    )
                };
                Ok(LayerAttnRes {
                    pre_attn: kind("self_attention")?,
                    pre_mlp: kind("mlp")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let output = read(
            names.model("output_attn_res_norm"),
            names.model("output_attn_res_proj"),
        )?;
        Ok(Self::AttnRes {
            block_size: cfg.block_size,
            layers,
            output,
        })
    }

    /// The input of `layer`'s attention, (n, hidden), from the live sum
    /// `hidden` and `snapshots`; seals the live sum into a snapshot first
    /// where the strategy says so (then `hidden` restarts at zero).
    pub fn before_attention(
        &self,
        layer: usize,
        hidden: &mut Vec<f32>,
        snapshots: &mut Vec<Vec<f32>>,
        n: usize,
        trace: &mut dyn Trace,
    ) -> Vec<f32> {
        let Self::AttnRes {
            block_size, layers, ..
        } = self
        else {
            return hidden.clone();
        };
        // Layer 0 has no snapshot yet: it reads the live sum as it is.
        let x = if snapshots.is_empty() {
            hidden.clone()
        } else {
            let (read, weights) = layers[layer].pre_attn.read(hidden, snapshots, n);
            trace.tensor(layer, "attn_res_pre_attn", &weights);
            read
        };
        if layer.is_multiple_of(*block_size) {
            let zeros = vec![0f32; hidden.len()];
            snapshots.push(std::mem::replace(hidden, zeros));
        }
        x
    }

    /// The input of `layer`'s feed-forward block, (n, hidden).
    pub fn before_ffn(
        &self,
        layer: usize,
        hidden: &[f32],
        snapshots: &[Vec<f32>],
        n: usize,
        trace: &mut dyn Trace,
    ) -> Vec<f32> {
        match self {
            Self::Sum => hidden.to_vec(),
            Self::AttnRes { layers, .. } => {
                let (read, weights) = layers[layer].pre_mlp.read(hidden, snapshots, n);
                trace.tensor(layer, "attn_res_pre_mlp", &weights);
                read
            }
        }
    }

    /// The input of the final norm, (n, hidden), after `n_layers` layers.
    pub fn before_head(
        &self,
        n_layers: usize,
        hidden: &[f32],
        snapshots: &[Vec<f32>],
        n: usize,
        trace: &mut dyn Trace,
    ) -> Vec<f32> {
        match self {
            Self::Sum => hidden.to_vec(),
            Self::AttnRes { output, .. } => {
                let (read, weights) = output.read(hidden, snapshots, n);
                trace.tensor(n_layers, "attn_res_output", &weights);
                trace.tensor(n_layers, "output_attn_res", &read);
                read
            }
        }
    }
}
