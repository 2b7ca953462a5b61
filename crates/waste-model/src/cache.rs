//! Per-sequence attention state: keys and values for GQA layers, the
//! compressed latent and the shared rotary key for MLA layers.

use crate::config::{AttentionConfig, ModelConfig};
use crate::{Error, Result};

/// What one layer keeps per position.
#[derive(Debug, Clone)]
pub enum LayerCache {
    /// k and v, each (len, num_kv_heads·head_dim), keys already rotated.
    Kv {
        k: Vec<f32>,
        v: Vec<f32>,
        width: usize,
    },
    /// MLA: normalised latent (len, kv_lora_rank) and rotated k_rope (len, qk_rope_head_dim).
    Latent {
        latent: Vec<f32>,
        k_rope: Vec<f32>,
        kv_lora_rank: usize,
        rope_dim: usize,
    },
}

impl LayerCache {
    pub fn len(&self) -> usize {
        match self {
            Self::Kv { k, width, .. } => k.len() / width,
            Self::Latent {
                latent,
                kv_lora_rank,
                ..
            } => latent.len() / kv_lora_rank,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn truncate(&mut self, len: usize) {
        match self {
            Self::Kv { k, v, width } => {
                k.truncate(len * *width);
                v.truncate(len * *width);
            }
            Self::Latent {
                latent,
                k_rope,
                kv_lora_rank,
                rope_dim,
            } => {
                latent.truncate(len * *kv_lora_rank);
                k_rope.truncate(len * *rope_dim);
            }
        }
    }
}

/// The attention state of one sequence, for every layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<LayerCache>,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for up to `capacity` positions.
    pub fn new(config: &ModelConfig, capacity: usize) -> Self {
        let layer = match &config.attention {
            AttentionConfig::Gqa(a) => LayerCache::Kv {
                k: Vec::new(),
                v: Vec::new(),
                width: a.num_kv_heads * a.head_dim,
            },
            AttentionConfig::Mla(a) => LayerCache::Latent {
                latent: Vec::new(),
                k_rope: Vec::new(),
                kv_lora_rank: a.kv_lora_rank,
                rope_dim: a.qk_rope_head_dim,
            },
        };
        Self {
            layers: vec![layer; config.num_hidden_layers],
            capacity,
        }
    }

    /// Positions every layer holds (the last layer is the last to be written).
    pub fn len(&self) -> usize {
        self.layers.last().map_or(0, LayerCache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held now.
    pub fn size_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerCache::Kv { k, v, .. } => (k.len() + v.len()) * 4,
                LayerCache::Latent { latent, k_rope, .. } => (latent.len() + k_rope.len()) * 4,
            })
            .sum()
    }

    /// Forgets everything past `len` positions (e.g. to re-run a turn).
    pub fn truncate(&mut self, len: usize) {
        for l in &mut self.layers {
            l.truncate(len);
        }
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Checks that `n` more positions fit.
    pub fn check_room(&self, n: usize) -> Result<()> {
        let needed = self.len() + n;
        if needed > self.capacity {
            return Err(Error::ContextOverflow {
                needed,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// The state of `layer`, checked to hold exactly `pos0` positions (steps
    /// run in order).
    pub(crate) fn layer_at(&mut self, layer: usize, pos0: usize) -> Result<&mut LayerCache> {
        let l = self.layers.get_mut(layer).ok_or(Error::Step {
            layer,
            what: "no such layer in the cache",
        })?;
        if l.len() != pos0 {
            return Err(Error::Step {
                layer,
                what: "cache length differs from the step's start position",
            });
        }
        Ok(l)
    }
}
