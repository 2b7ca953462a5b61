//! Rotary position embeddings of the reference forward: default, linear,
//! `llama3` and `yarn` inverse frequencies (transformers' `modeling_rope_utils`)
//! and the half-split or interleaved rotation. Owns no config parsing.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::config::{opt_bool, opt_f64};

#[derive(Debug)]
pub(super) struct Rope {
    pub(super) inv_freq: Vec<f64>,
    /// Multiplies cos and sin (yarn's attention_factor; 1 otherwise).
    pub(super) attention_factor: f64,
    /// Pairs (x[2i], x[2i+1]) (DeepSeek `rope_interleave`) instead of (x[i], x[i+d/2]).
    pub(super) interleaved: bool,
}

/// transformers' `get_mscale` / `yarn_get_mscale`.
pub(super) fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl Rope {
    pub(super) fn new(
        rope_type: &str,
        params: &Value,
        theta: f64,
        dim: usize,
        max_pos: Option<usize>,
        interleaved: bool,
    ) -> Result<Self> {
        ensure!(dim.is_multiple_of(2), "rope dim {dim} is odd");
        let base: Vec<f64> = (0..dim / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f64 / dim as f64))
            .collect();
        let factor = opt_f64(params, "factor")?;
        let need_factor = || factor.context("config: rope scaling without `factor`");
        let mut attention_factor = 1.0;
        let inv_freq = match rope_type {
            "default" => base,
            "linear" => {
                let factor = need_factor()?;
                base.iter().map(|f| f / factor).collect()
            }
            "llama3" => {
                let factor = need_factor()?;
                let low = opt_f64(params, "low_freq_factor")?
                    .context("llama3 rope: no low_freq_factor")?;
                let high = opt_f64(params, "high_freq_factor")?
                    .context("llama3 rope: no high_freq_factor")?;
                let old_ctx = opt_f64(params, "original_max_position_embeddings")?
                    .context("llama3 rope: no original_max_position_embeddings")?;
                let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old_ctx / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            "yarn" => {
                // Quirk 4: `_compute_yarn_parameters`.
                let orig = match opt_f64(params, "original_max_position_embeddings")? {
                    Some(v) => v,
                    None => {
                        max_pos.context("yarn rope: no original_max_position_embeddings")? as f64
                    }
                };
                let factor = match factor {
                    Some(f) => f,
                    None => max_pos.context("yarn rope: no factor")? as f64 / orig,
                };
                let mscale = opt_f64(params, "mscale")?.unwrap_or(0.0);
                let mscale_all_dim = opt_f64(params, "mscale_all_dim")?.unwrap_or(0.0);
                attention_factor = match opt_f64(params, "attention_factor")? {
                    Some(a) => a,
                    None if mscale != 0.0 && mscale_all_dim != 0.0 => {
                        yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
                    }
                    None => yarn_get_mscale(factor, 1.0),
                };
                let beta_fast = opt_f64(params, "beta_fast")?
                    .filter(|&b| b != 0.0)
                    .unwrap_or(32.0);
                let beta_slow = opt_f64(params, "beta_slow")?
                    .filter(|&b| b != 0.0)
                    .unwrap_or(1.0);
                let truncate = opt_bool(params, "truncate")?.unwrap_or(true);
                let correction_dim = |rotations: f64| {
                    dim as f64 * (orig / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * theta.ln())
                };
                let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min((dim - 1) as f64));
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(i, &extra)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        (extra / factor) * ramp + extra * (1.0 - ramp)
                    })
                    .collect()
            }
            other => bail!("unsupported rope type `{other}`"),
        };
        Ok(Self {
            inv_freq,
            attention_factor,
            interleaved,
        })
    }

    /// Rotates `x` (one head's rotary part) in place for position `pos`.
    pub(super) fn apply(&self, x: &mut [f32], pos: usize) {
        let half = x.len() / 2;
        for (i, &freq) in self.inv_freq.iter().enumerate() {
            let (a, b) = if self.interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let angle = pos as f64 * freq;
            let (sin, cos) = (
                angle.sin() * self.attention_factor,
                angle.cos() * self.attention_factor,
            );
            let (xa, xb) = (f64::from(x[a]), f64::from(x[b]));
            x[a] = (xa * cos - xb * sin) as f32;
            x[b] = (xb * cos + xa * sin) as f32;
        }
    }
}
