//! Per-sequence attention state: keys and values for GQA layers, the
//! compressed latent and the shared rotary key for MLA layers, the
//! convolution history and recurrent state for KDA layers.

use crate::config::{AttentionConfig, LayerAttention, ModelConfig};
use crate::{Error, Result};

/// The values a GQA cache row of `width` values (num_kv_heads·head_dim)
/// takes: a row of a multiple of 256 bytes is padded by one cache line.
/// Attention walks one head's slice of every row, rows a stride apart; at
/// a power-of-two stride those slices fall into a few cache sets and evict
/// each other before the next pass over the rows reads them again
/// (docs/BENCH.md: a 4-head value pass at 600 positions waited on memory).
pub fn kv_row_stride(width: usize) -> usize {
    if width > 0 && (4 * width).is_multiple_of(256) {
        width + 16
    } else {
        width
    }
}

/// What one layer keeps per sequence.
#[derive(Debug, Clone)]
pub enum LayerCache {
    /// k and v, each (len, stride): a row's first `width` values
    /// (num_kv_heads·head_dim, keys already rotated), then padding
    /// ([`kv_row_stride`]).
    Kv {
        k: Vec<f32>,
        v: Vec<f32>,
        width: usize,
        stride: usize,
    },
    /// MLA: normalised latent (len, kv_lora_rank) and (rotated unless NoPE)
    /// k_rope (len, qk_rope_head_dim).
    Latent {
        latent: Vec<f32>,
        k_rope: Vec<f32>,
        kv_lora_rank: usize,
        rope_dim: usize,
    },
    /// KDA: the last `kernel - 1` pre-convolution rows of q, k and v, each
    /// (kernel - 1, heads·head_dim), and the state (heads, head_dim, head_dim),
    /// key channel major. Its size does not grow with the sequence.
    Recurrent {
        conv: [Vec<f32>; 3],
        state: Vec<f32>,
        len: usize,
    },
}

impl LayerCache {
    /// Positions this layer has seen.
    pub fn len(&self) -> usize {
        match self {
            Self::Kv { k, stride, .. } => k.len() / stride,
            Self::Latent {
                latent,
                kv_lora_rank,
                ..
            } => latent.len() / kv_lora_rank,
            Self::Recurrent { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn size_bytes(&self) -> usize {
        4 * match self {
            Self::Kv { k, v, .. } => k.len() + v.len(),
            Self::Latent { latent, k_rope, .. } => latent.len() + k_rope.len(),
            Self::Recurrent { conv, state, .. } => {
                conv.iter().map(Vec::len).sum::<usize>() + state.len()
            }
        }
    }

    /// Forgets positions past `len`. A recurrent state cannot rewind: it is
    /// reset when `len` is 0 and left alone otherwise ([`KvCache::truncate`]
    /// refuses that case first).
    fn truncate(&mut self, len: usize) {
        match self {
            Self::Kv { k, v, stride, .. } => {
                k.truncate(len * *stride);
                v.truncate(len * *stride);
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
            Self::Recurrent {
                conv,
                state,
                len: l,
            } => {
                if len == 0 {
                    conv.iter_mut().for_each(|c| c.fill(0.0));
                    state.fill(0.0);
                    *l = 0;
                }
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
        let full = match &config.attention {
            AttentionConfig::Gqa(a) => LayerCache::Kv {
                k: Vec::new(),
                v: Vec::new(),
                width: a.num_kv_heads * a.head_dim,
                stride: kv_row_stride(a.num_kv_heads * a.head_dim),
            },
            AttentionConfig::Mla(a) => LayerCache::Latent {
                latent: Vec::new(),
                k_rope: Vec::new(),
                kv_lora_rank: a.kv_lora_rank,
                rope_dim: a.qk_rope_head_dim,
            },
        };
        let recurrent = config.linear_attention.as_ref().map(|k| {
            let width = k.num_heads * k.head_dim;
            LayerCache::Recurrent {
                conv: std::array::from_fn(|_| vec![0f32; k.conv_kernel.saturating_sub(1) * width]),
                state: vec![0f32; k.num_heads * k.head_dim * k.head_dim],
                len: 0,
            }
        });
        let layers = config
            .layer_attention
            .iter()
            .map(|kind| match (kind, &recurrent) {
                (LayerAttention::Linear, Some(r)) => r.clone(),
                _ => full.clone(),
            })
            .collect();
        Self { layers, capacity }
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
        self.layers.iter().map(LayerCache::size_bytes).sum()
    }

    /// Forgets everything past `len` positions (e.g. to re-run a turn).
    /// Recurrent (KDA) state cannot rewind: with such layers only 0 or the
    /// current length are accepted.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        let recurrent = self
            .layers
            .iter()
            .any(|l| matches!(l, LayerCache::Recurrent { .. }));
        if recurrent && len != 0 && len < self.len() {
            return Err(Error::Step {
                layer: 0,
                what: "a recurrent (KDA) state cannot be rewound",
            });
        }
        for l in &mut self.layers {
            l.truncate(len);
        }
        Ok(())
    }

    pub fn clear(&mut self) {
        for l in &mut self.layers {
            l.truncate(0);
        }
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
