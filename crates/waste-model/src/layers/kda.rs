//! Kimi Delta Attention (Kimi-Linear, Kimi K3): a gated delta-rule linear
//! attention. Per head, a key-by-value state S decays per key channel, is
//! corrected towards the new value along the new key, and is read by the
//! query: S ← diag(exp g)·S; u = β(v − Sᵀk̂); S ← S + k̂uᵀ; o = Sᵀq̂.
//! q, k and v pass through causal depthwise convolutions with SiLU first;
//! the output is a per-head RMSNorm gated by sigmoid(g_proj(x)).
//!
//! Follows shared/fixtures/kimi_k3_tiny/ARCH.md §3.3 and transformers'
//! `modeling_kimi_linear.py`. The state is kept in f32, as FLA does.

use rayon::prelude::*;

use crate::cache::LayerCache;
use crate::config::{KdaConfig, KdaGate, TensorNames};
use crate::layers::{Linear, Loader};
use crate::ops::delta_rule::{self, HeadInputs};
use crate::ops::norm;
use crate::{Error, Result};

/// eps inside the square root of the q/k L2 normalisation (FLA's `l2norm`).
const L2_EPS: f32 = 1e-6;

/// The output gate: one full-rank projection or a rank-`head_dim` pair.
#[derive(Debug)]
enum OutputGate {
    Full(Linear),
    LowRank(Linear, Linear),
}

#[derive(Debug)]
pub struct KdaAttention {
    cfg: KdaConfig,
    /// q, k, v projections, each (heads·head_dim, hidden).
    proj: [Linear; 3],
    /// Depthwise causal convolution weights of q, k, v, each (heads·head_dim, kernel).
    conv: [Vec<f32>; 3],
    f_a: Linear,       // (head_dim, hidden)
    f_b: Linear,       // (heads·head_dim, head_dim)
    b_proj: Linear,    // (heads, hidden)
    dt_bias: Vec<f32>, // (heads·head_dim)
    a_log: Vec<f32>,   // (heads)
    gate: OutputGate,  // → (heads·head_dim)
    o_norm: Vec<f32>,  // (head_dim)
    o_proj: Linear,    // (hidden, heads·head_dim)
}

impl KdaAttention {
    pub fn load(
        w: Loader<'_>,
        names: &TensorNames,
        layer: usize,
        hidden: usize,
        cfg: &KdaConfig,
    ) -> Result<Self> {
        let p = |s: &str| names.layer(layer, &format!("self_attn.{s}"));
        let (h, k) = (cfg.num_heads, cfg.head_dim);
        let width = h * k;
        let proj = ["q_proj", "k_proj", "v_proj"].map(|n| w.linear(&p(n), hidden, width, false));
        let [q, kp, v] = proj;
        let conv = ["q_conv1d", "k_conv1d", "v_conv1d"]
            .map(|n| w.tensor_f32(&p(&format!("{n}.weight")), &[width, 1, cfg.conv_kernel]));
        let [cq, ck, cv] = conv;
        // The release stores A_log padded with a zero tail; only the first `heads` are read.
        let a_log_name = p("A_log");
        let mut a_log = w.tensor_f32_any(&a_log_name)?;
        if a_log.len() < h {
            return Err(Error::WeightShape {
                name: a_log_name,
                got: vec![a_log.len()],
                expected: vec![h],
            });
        }
        a_log.truncate(h);
        let gate = if cfg.full_rank_output_gate {
            OutputGate::Full(w.linear(&p("g_proj"), hidden, width, false)?)
        } else {
            OutputGate::LowRank(
                w.linear(&p("g_a_proj"), hidden, k, false)?,
                w.linear(&p("g_b_proj"), k, width, false)?,
            )
        };
        Ok(Self {
            proj: [q?, kp?, v?],
            conv: [cq?, ck?, cv?],
            f_a: w.linear(&p("f_a_proj"), hidden, k, false)?,
            f_b: w.linear(&p("f_b_proj"), k, width, false)?,
            b_proj: w.linear(&p("b_proj"), hidden, h, false)?,
            dt_bias: w.tensor_f32(&p("dt_bias"), &[width])?,
            a_log,
            gate,
            o_norm: w.vector(&p("o_norm.weight"), k)?,
            o_proj: w.linear(&p("o_proj"), width, hidden, false)?,
            cfg: cfg.clone(),
        })
    }

    /// Attends `n` normalised rows `x` (n, hidden), continuing the state in
    /// `cache`. Returns (n, hidden) before the residual.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        cache: &mut LayerCache,
        layer: usize,
    ) -> Result<Vec<f32>> {
        let LayerCache::Recurrent {
            conv: conv_state,
            state,
            len,
        } = cache
        else {
            return Err(Error::Step {
                layer,
                what: "KDA layer given a key/value cache",
            });
        };
        let (heads, hd) = (self.cfg.num_heads, self.cfg.head_dim);
        let width = heads * hd;
        let mut qkv: [Vec<f32>; 3] = Default::default();
        for i in 0..3 {
            let pre = self.proj[i].forward(x, n, layer)?; // (n, width)
            qkv[i] = causal_conv_silu(
                &pre,
                n,
                width,
                &self.conv[i],
                self.cfg.conv_kernel,
                &mut conv_state[i],
            );
        }
        let [q, k, v] = qkv;
        let g_raw = self
            .f_b
            .forward(&self.f_a.forward(x, n, layer)?, n, layer)?; // (n, width)
        let beta_logit = self.b_proj.forward(x, n, layer)?; // (n, heads)
        let gate = match &self.gate {
            OutputGate::Full(g) => g.forward(x, n, layer)?,
            OutputGate::LowRank(a, b) => b.forward(&a.forward(x, n, layer)?, n, layer)?,
        }; // (n, width)

        // Each head runs its own recurrence over the n tokens: parallel over
        // heads. Prefill uses the chunked form, decode the recurrence.
        let mut out_by_head = vec![0f32; heads * n * hd]; // (heads, n, hd)
        state
            .par_chunks_mut(hd * hd)
            .zip(out_by_head.par_chunks_mut(n * hd))
            .enumerate()
            .for_each(|(h, (s, out))| {
                let mut x = HeadInputs {
                    n,
                    dk: hd,
                    dv: hd,
                    ..HeadInputs::default()
                };
                let (mut qh, mut kh) = (vec![0f32; hd], vec![0f32; hd]);
                for t in 0..n {
                    let row = t * width + h * hd;
                    l2_normalise(&q[row..row + hd], &mut qh, (hd as f32).powf(-0.5));
                    l2_normalise(&k[row..row + hd], &mut kh, 1.0);
                    x.q.extend_from_slice(&qh);
                    x.k.extend_from_slice(&kh);
                    x.v.extend_from_slice(&v[row..row + hd]);
                    x.g.extend(
                        (0..hd)
                            .map(|d| self.log_decay(h, g_raw[row + d] + self.dt_bias[h * hd + d])),
                    );
                    x.beta.push(sigmoid(beta_logit[t * heads + h]));
                }
                if n > 1 {
                    delta_rule::chunked(&x, s, out);
                } else {
                    delta_rule::recurrent(&x, s, out);
                }
            });
        *len += n;

        // Per-head RMSNorm times sigmoid(gate), heads concatenated.
        let mut o = vec![0f32; n * width];
        for t in 0..n {
            for h in 0..heads {
                let dst = &mut o[t * width + h * hd..][..hd];
                dst.copy_from_slice(&out_by_head[(h * n + t) * hd..][..hd]);
                norm::rms_norm(dst, &self.o_norm, self.cfg.norm_eps);
                for (x, g) in dst.iter_mut().zip(&gate[t * width + h * hd..]) {
                    *x *= sigmoid(*g);
                }
            }
        }
        self.o_proj.forward(&o, n, layer)
    }

    /// The log decay of one key channel of head `h` from its gate input.
    fn log_decay(&self, h: usize, z: f32) -> f32 {
        let a = self.a_log[h].exp();
        match self.cfg.gate {
            KdaGate::Softplus => -a * softplus(z),
            KdaGate::LowerBound(lb) => lb * sigmoid(a * z),
        }
    }
}

/// Depthwise causal convolution over time followed by SiLU: out[t, c] =
/// silu(Σ_j w[c, j]·in[t − (kernel−1) + j, c]), with `history` holding the
/// previous `kernel − 1` input rows (zeros at the start) and updated to the
/// last ones.
fn causal_conv_silu(
    input: &[f32],
    n: usize,
    width: usize,
    weight: &[f32],
    kernel: usize,
    history: &mut Vec<f32>,
) -> Vec<f32> {
    let mut rows = std::mem::take(history); // (past + n, width)
    rows.extend_from_slice(input);
    let mut out = vec![0f32; n * width];
    for t in 0..n {
        for c in 0..width {
            let acc: f32 = (0..kernel)
                .map(|j| weight[c * kernel + j] * rows[(t + j) * width + c])
                .sum();
            out[t * width + c] = acc / (1.0 + (-acc).exp());
        }
    }
    *history = rows.split_off(n * width);
    out
}

/// `dst = scale · x / sqrt(Σx² + eps)`.
fn l2_normalise(x: &[f32], dst: &mut [f32], scale: f32) {
    let inv = scale / (x.iter().map(|v| v * v).sum::<f32>() + L2_EPS).sqrt();
    for (d, v) in dst.iter_mut().zip(x) {
        *d = v * inv;
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// torch's softplus (beta 1, threshold 20): linear above the threshold.
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_with_history_equals_conv_over_the_whole_sequence() {
        let (width, kernel) = (3, 4);
        let weight: Vec<f32> = (0..width * kernel)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let input: Vec<f32> = (0..10 * width).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut h = vec![0f32; (kernel - 1) * width];
        let whole = causal_conv_silu(&input, 10, width, &weight, kernel, &mut h);
        let mut h2 = vec![0f32; (kernel - 1) * width];
        let mut parts = causal_conv_silu(&input[..4 * width], 4, width, &weight, kernel, &mut h2);
        for t in 4..10 {
            parts.extend(causal_conv_silu(
                &input[t * width..(t + 1) * width],
                1,
                width,
                &weight,
                kernel,
                &mut h2,
            ));
        }
        assert_eq!(whole, parts);
        assert_eq!(h, h2);
    }
}
