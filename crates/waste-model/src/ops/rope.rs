//! Rotary position embeddings: the inverse frequencies of every scaling
//! scheme Hugging Face configs name (default, linear, llama3, yarn) and the
//! rotation itself, in the half-split and interleaved layouts.
//!
//! Follows transformers' `modeling_rope_utils.py`; frequencies are computed
//! in f64 and rounded once, so they agree with torch's f32 to an ulp.

use serde_json::Value;

use crate::config::RopeConfig;
use crate::{Error, Result};

/// The rope parameters of a config, in either spelling: transformers 5's
/// `rope_parameters {rope_type, rope_theta, ...}` or the releases'
/// `rope_scaling {type, ...}` plus a top-level `rope_theta`.
#[derive(Debug, Clone)]
pub struct RopeParams {
    pub rope_type: String,
    pub theta: f64,
    params: serde_json::Map<String, Value>,
    /// `max_position_embeddings` of the config (yarn's fallback for the original context).
    max_position_embeddings: Option<f64>,
}

impl RopeParams {
    pub fn from_config(json: &Value, default_theta: f64) -> Result<Self> {
        let mut params = serde_json::Map::new();
        for key in ["rope_scaling", "rope_parameters"] {
            if let Some(Value::Object(m)) = json.get(key) {
                params.extend(m.clone());
            }
        }
        let theta = params
            .get("rope_theta")
            .or_else(|| json.get("rope_theta"))
            .and_then(Value::as_f64)
            .unwrap_or(default_theta);
        let rope_type = params
            .get("rope_type")
            .or_else(|| params.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let max_position_embeddings = json.get("max_position_embeddings").and_then(Value::as_f64);
        Ok(Self {
            rope_type,
            theta,
            params,
            max_position_embeddings,
        })
    }

    fn get(&self, key: &str) -> Option<f64> {
        self.params.get(key).and_then(Value::as_f64)
    }

    fn require(&self, key: &str) -> Result<f64> {
        self.get(key).ok_or_else(|| {
            Error::config(
                "rope_scaling",
                format!("rope type {:?} needs {key:?}", self.rope_type),
            )
        })
    }

    /// YaRN's softmax temperature correction, `mscale(factor, mscale_all_dim)²`,
    /// which DeepSeek-style attention folds into its softmax scale; 1 otherwise.
    pub fn deepseek_softmax_mscale_sq(&self) -> f64 {
        if self.rope_type == "default" {
            return 1.0;
        }
        match (self.get("mscale_all_dim"), self.get("factor")) {
            (Some(all_dim), Some(factor)) if all_dim != 0.0 => {
                let m = yarn_get_mscale(factor, all_dim);
                m * m
            }
            _ => 1.0,
        }
    }

    /// Builds the rotary table parameters for `dim` rotated dimensions.
    pub fn build(&self, dim: usize, interleaved: bool) -> Result<RopeConfig> {
        if dim == 0 || !dim.is_multiple_of(2) {
            return Err(Error::config(
                "head_dim",
                format!("rotary dimension {dim} must be even and positive"),
            ));
        }
        let base: Vec<f64> = (0..dim / 2)
            .map(|i| 1.0 / self.theta.powf((2 * i) as f64 / dim as f64))
            .collect();
        let mut attention_scaling = 1.0;
        let inv_freq: Vec<f64> = match self.rope_type.as_str() {
            "default" => base,
            "linear" => {
                let factor = self.require("factor")?;
                base.iter().map(|f| f / factor).collect()
            }
            "llama3" => self.llama3(&base)?,
            "yarn" => {
                let (freqs, scaling) = self.yarn(&base, dim)?;
                attention_scaling = scaling;
                freqs
            }
            other => {
                return Err(Error::config(
                    "rope_scaling",
                    format!("rope type {other:?} is not supported (default, linear, llama3, yarn)"),
                ));
            }
        };
        Ok(RopeConfig {
            dim,
            inv_freq: inv_freq.into_iter().map(|f| f as f32).collect(),
            attention_scaling: attention_scaling as f32,
            interleaved,
        })
    }

    fn llama3(&self, base: &[f64]) -> Result<Vec<f64>> {
        let factor = self.require("factor")?;
        let low = self.require("low_freq_factor")?;
        let high = self.require("high_freq_factor")?;
        let old_ctx = self.require("original_max_position_embeddings")?;
        let low_wavelen = old_ctx / low;
        let high_wavelen = old_ctx / high;
        Ok(base
            .iter()
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
            .collect())
    }

    fn yarn(&self, base: &[f64], dim: usize) -> Result<(Vec<f64>, f64)> {
        let factor = self.require("factor")?;
        let original = self
            .get("original_max_position_embeddings")
            .or(self.max_position_embeddings)
            .ok_or_else(|| {
                Error::config(
                    "rope_scaling",
                    "yarn needs original_max_position_embeddings",
                )
            })?;
        let beta_fast = self.get("beta_fast").unwrap_or(32.0);
        let beta_slow = self.get("beta_slow").unwrap_or(1.0);
        let truncate = self
            .params
            .get("truncate")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let attention_factor = match self.get("attention_factor") {
            Some(a) => a,
            None => match (self.get("mscale"), self.get("mscale_all_dim")) {
                (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                    yarn_get_mscale(factor, m) / yarn_get_mscale(factor, all)
                }
                _ => yarn_get_mscale(factor, 1.0),
            },
        };
        let correction_dim = |rotations: f64| {
            dim as f64 * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * self.theta.ln())
        };
        let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
        if truncate {
            low = low.floor();
            high = high.ceil();
        }
        let low = low.max(0.0);
        let mut high = high.min(dim as f64 - 1.0);
        if low == high {
            high += 0.001;
        }
        let freqs = base
            .iter()
            .enumerate()
            .map(|(i, &extra)| {
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let extrapolation = 1.0 - ramp;
                (extra / factor) * (1.0 - extrapolation) + extra * extrapolation
            })
            .collect();
        Ok((freqs, attention_factor))
    }
}

/// `0.1·mscale·ln(scale) + 1` for scale > 1, else 1 (transformers `get_mscale`).
pub fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// cos and sin of every rotated pair at one position: (dim/2) each.
pub fn cos_sin(rope: &RopeConfig, position: usize) -> (Vec<f32>, Vec<f32>) {
    let pos = position as f32;
    rope.inv_freq
        .iter()
        .map(|&f| {
            // torch forms the angle as an f32 product, then takes cos/sin.
            let angle = f64::from(pos * f);
            (
                angle.cos() as f32 * rope.attention_scaling,
                angle.sin() as f32 * rope.attention_scaling,
            )
        })
        .unzip()
}

/// Rotates the first `rope.dim` values of `x` in place.
pub fn apply(rope: &RopeConfig, x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = rope.dim / 2;
    for i in 0..half {
        let (a, b) = if rope.interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x1, x2) = (x[a], x[b]);
        x[a] = x1 * cos[i] - x2 * sin[i];
        x[b] = x2 * cos[i] + x1 * sin[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_spellings_give_the_same_yarn_frequencies() {
        let v5 = json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
            "original_max_position_embeddings": 128, "beta_fast": 1.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0}});
        let release = json!({"rope_theta": 50000.0, "rope_scaling": {"type": "yarn", "factor": 32.0,
            "original_max_position_embeddings": 128, "beta_fast": 1.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0}});
        let a = RopeParams::from_config(&v5, 10000.0)
            .unwrap()
            .build(8, true)
            .unwrap();
        let b = RopeParams::from_config(&release, 10000.0)
            .unwrap()
            .build(8, true)
            .unwrap();
        assert_eq!(a.inv_freq, b.inv_freq);
        // transformers' values for this config (fixtures/deepseek_v3_tiny goldens.json "rope").
        let want = [1.0, 0.066_874_03, 1.397_542_5e-4, 9.345_93e-6];
        for (g, w) in a.inv_freq.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6 * w, "{g} vs {w}");
        }
        assert_eq!(a.attention_scaling, 1.0);
    }

    #[test]
    fn rotation_preserves_norm_in_both_layouts() {
        for interleaved in [false, true] {
            let rope = RopeParams::from_config(&json!({}), 10000.0)
                .unwrap()
                .build(8, interleaved)
                .unwrap();
            let (c, s) = cos_sin(&rope, 7);
            let mut x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
            let n0: f32 = x.iter().map(|v| v * v).sum();
            apply(&rope, &mut x, &c, &s);
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-4);
        }
    }
}
