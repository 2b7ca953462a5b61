//! `experts/index.json`: the expert format, and for every MoE layer its file,
//! shapes, record length, stride and the checksum of each record. Written
//! atomically once every layer file is complete; its sha256 goes into the
//! manifest.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io};
use crate::manifest::write_atomic;
use crate::{FORMAT_VERSION, Version};

pub const INDEX: &str = "index.json";

/// One MoE layer's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerEntry {
    /// Decoder-layer index, as in the Hugging Face tensor names.
    pub layer: u32,
    /// File name inside `experts/`.
    pub file: String,
    pub n_experts: u32,
    /// Width of the rows an expert consumes and produces.
    pub d_model: u32,
    /// Width of its gated hidden layer.
    pub d_ff: u32,
    pub record_len: u64,
    pub stride: u64,
    pub data_offset: u64,
    /// xxh3-64 of each record's `record_len` bytes, by expert id.
    pub checksums: Vec<u64>,
}

/// The gated activation of the experts, `down(act(gate(x), up(x)))`: what
/// compute-at-store applies (the model's `hidden_act`). Mirrors
/// `waste_kernels::Activation`, which has no serde.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ExpertActivation {
    /// SwiGLU (Llama, Mixtral, Qwen, DeepSeek).
    #[default]
    Silu,
    /// SiTU-GLU (Kimi K3): `activation_situ_beta`, `activation_situ_linear_beta`.
    Situ { beta: f32, linear_beta: Option<f32> },
}

// `load` refuses non-finite betas, so equality is reflexive.
impl Eq for ExpertActivation {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertsIndex {
    pub format_version: Version,
    /// `model_type` of the source, for display and sanity checks.
    pub model_type: String,
    /// Record format name and id (waste-kernels), e.g. `q3` / 3.
    pub expert_format: String,
    pub expert_format_id: u16,
    /// Experts each token uses, for bytes-per-token estimates.
    pub top_k: u32,
    pub checksum: String,
    pub alignment: u32,
    pub layers: Vec<LayerEntry>,
    /// Absent in stores written before compute-at-store: SwiGLU.
    #[serde(default)]
    pub activation: ExpertActivation,
}

impl ExpertsIndex {
    pub fn new(model_type: &str, expert_format: &str, expert_format_id: u16, top_k: u32) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            model_type: model_type.to_string(),
            expert_format: expert_format.to_string(),
            expert_format_id,
            top_k,
            checksum: crate::checksum::ALGORITHM.to_string(),
            alignment: crate::ALIGNMENT as u32,
            layers: Vec::new(),
            activation: ExpertActivation::default(),
        }
    }

    pub fn layer(&self, layer: u32) -> Option<&LayerEntry> {
        self.layers.iter().find(|l| l.layer == layer)
    }

    /// Bytes of one record of every layer summed: what a token reads when it
    /// uses `top_k` experts in every MoE layer.
    pub fn bytes_per_token(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.record_len * u64::from(self.top_k))
            .sum()
    }

    pub fn total_record_bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.record_len * u64::from(l.n_experts))
            .sum()
    }

    /// Reads and checks `dir/index.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(INDEX);
        let bytes = fs_err::read(&path).map_err(io(&path))?;
        let index: Self = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        index.format_version.check_readable(&path)?;
        if index.checksum != crate::checksum::ALGORITHM {
            return Err(Error::Inconsistent {
                path,
                reason: format!("checksum algorithm {:?} is not supported", index.checksum),
            });
        }
        if let ExpertActivation::Situ { beta, linear_beta } = index.activation {
            let ok = |b: f32| b.is_finite() && b != 0.0;
            if !ok(beta) || !linear_beta.is_none_or(ok) {
                return Err(Error::Inconsistent {
                    path,
                    reason: format!(
                        "situ activation betas {beta} / {linear_beta:?} must be finite and non-zero"
                    ),
                });
            }
        }
        for l in &index.layers {
            if l.checksums.len() != l.n_experts as usize {
                return Err(Error::Inconsistent {
                    path,
                    reason: format!(
                        "layer {} lists {} checksums for {} experts",
                        l.layer,
                        l.checksums.len(),
                        l.n_experts
                    ),
                });
            }
        }
        Ok(index)
    }

    /// Writes `dir/index.json` atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(INDEX);
        let json = serde_json::to_vec_pretty(self).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        write_atomic(&path, &json)
    }
}
