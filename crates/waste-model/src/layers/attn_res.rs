//! Attention residuals (Kimi K3): a read over depth. The candidates are the
//! sealed block snapshots, oldest first, then the live sum; each is scored
//! by its RMS-normalised value against one learned query, and the read is
//! the softmax-weighted sum of the raw candidates. Per token: no state
//! crosses positions, so decoding needs no extra cache.
//! See shared/fixtures/kimi_k3_tiny/ARCH.md §3.2.

use crate::Result;
use crate::layers::Loader;
use crate::ops::softmax::softmax;

/// One read: `{norm}.weight` ⊙ `{proj}.weight[0]` as the query.
#[derive(Debug)]
pub struct AttnResRead {
    query: Vec<f32>, // (hidden)
    eps: f32,
}

impl AttnResRead {
    pub fn load(w: Loader<'_>, norm: &str, proj: &str, hidden: usize, eps: f32) -> Result<Self> {
        let weight = w.vector(&format!("{norm}.weight"), hidden)?;
        let proj = w.tensor_f32(&format!("{proj}.weight"), &[1, hidden])?;
        Ok(Self {
            query: weight.iter().zip(&proj).map(|(a, b)| a * b).collect(),
            eps,
        })
    }

    /// Reads over `snapshots` (each (n, hidden)) and `live` (n, hidden).
    /// Returns the read (n, hidden) and its softmax weights (n, S+1).
    pub fn read(&self, live: &[f32], snapshots: &[Vec<f32>], n: usize) -> (Vec<f32>, Vec<f32>) {
        let hidden = self.query.len();
        let sources = snapshots.len() + 1;
        let candidate = |s: usize, t: usize| {
            let src = if s < snapshots.len() {
                &snapshots[s]
            } else {
                live
            };
            &src[t * hidden..(t + 1) * hidden]
        };
        let mut out = vec![0f32; n * hidden];
        let mut weights = vec![0f32; n * sources];
        for t in 0..n {
            let w = &mut weights[t * sources..(t + 1) * sources];
            for (s, ws) in w.iter_mut().enumerate() {
                let c = candidate(s, t);
                let inv =
                    1.0 / (c.iter().map(|v| v * v).sum::<f32>() / hidden as f32 + self.eps).sqrt();
                *ws = c.iter().zip(&self.query).map(|(v, q)| (v * inv) * q).sum();
            }
            softmax(w);
            let o = &mut out[t * hidden..(t + 1) * hidden];
            for (s, ws) in w.iter().enumerate() {
                for (ov, cv) in o.iter_mut().zip(candidate(s, t)) {
                    *ov += ws * cv;
                }
            }
        }
        (out, weights)
    }
}

/// The two reads of one decoder layer.
#[derive(Debug)]
pub struct LayerAttnRes {
    /// Before attention (not used by layer 0, which has no snapshot yet).
    pub pre_attn: AttnResRead,
    /// Before the feed-forward block.
    pub pre_mlp: AttnResRead,
}
