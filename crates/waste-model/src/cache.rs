//! Per-sequence attention state: keys and values for GQA layers, the
//! compressed latent and the shared rotary key for MLA layers, the
//! convolution history and recurrent state for KDA layers.

use half::f16;

use crate::config::{AttentionConfig, LayerAttention, ModelConfig};
use crate::{Error, Result};

/// The value type the attention cache stores keys and values (GQA) or
/// latents (MLA) in. `F32` keeps attention exact (the goldens' path);
/// `F16` halves the cache's bytes, what a decode step reads of it, as
/// llama.cpp's default cache type does. Recurrent (KDA) state stays f32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheType {
    #[default]
    F32,
    F16,
}

impl CacheType {
    /// Bytes per cached value.
    pub fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }

    /// The name the command line takes (`f32`, `f16`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }
}

impl std::str::FromStr for CacheType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            other => Err(format!("unknown cache type {other:?}: f32 or f16")),
        }
    }
}

/// Rows of one cached tensor, in the cache's [`CacheType`].
#[derive(Debug, Clone)]
pub enum CacheRows {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl CacheRows {
    fn new(ty: CacheType) -> Self {
        match ty {
            CacheType::F32 => Self::F32(Vec::new()),
            CacheType::F16 => Self::F16(Vec::new()),
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn bytes(&self) -> usize {
        match self {
            Self::F32(v) => 4 * v.len(),
            Self::F16(v) => 2 * v.len(),
        }
    }

    fn truncate(&mut self, len: usize) {
        match self {
            Self::F32(v) => v.truncate(len),
            Self::F16(v) => v.truncate(len),
        }
    }

    /// Appends `row` (rounded to nearest in f16), then `pad` zeros.
    pub(crate) fn push_row(&mut self, row: &[f32], pad: usize) {
        match self {
            Self::F32(v) => {
                v.extend_from_slice(row);
                v.resize(v.len() + pad, 0.0);
            }
            Self::F16(v) => {
                v.extend(row.iter().map(|&x| f16::from_f32(x)));
                v.resize(v.len() + pad, f16::ZERO);
            }
        }
    }
}

/// The values a GQA cache row of `width` values (num_kv_heads·head_dim)
/// takes in `ty`: a row of a multiple of 256 bytes is padded by one cache line.
/// Attention walks one head's slice of every row, rows a stride apart; at
/// a power-of-two stride those slices fall into a few cache sets and evict
/// each other before the next pass over the rows reads them again
/// (docs/BENCH.md: a 4-head value pass at 600 positions waited on memory).
pub fn kv_row_stride(width: usize, ty: CacheType) -> usize {
    if width > 0 && (ty.bytes() * width).is_multiple_of(256) {
        width + 64 / ty.bytes()
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
        k: CacheRows,
        v: CacheRows,
        width: usize,
        stride: usize,
    },
    /// MLA: normalised latent (len, kv_lora_rank) and (rotated unless NoPE)
    /// k_rope (len, qk_rope_head_dim).
    Latent {
        latent: CacheRows,
        k_rope: CacheRows,
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
        match self {
            Self::Kv { k, v, .. } => k.bytes() + v.bytes(),
            Self::Latent { latent, k_rope, .. } => latent.bytes() + k_rope.bytes(),
            Self::Recurrent { conv, state, .. } => {
                4 * (conv.iter().map(Vec::len).sum::<usize>() + state.len())
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
    /// An empty cache for up to `capacity` positions, its rows in `ty`.
    pub fn new(config: &ModelConfig, capacity: usize, ty: CacheType) -> Self {
        let full = match &config.attention {
            AttentionConfig::Gqa(a) => LayerCache::Kv {
                k: CacheRows::new(ty),
                v: CacheRows::new(ty),
                width: a.num_kv_heads * a.head_dim,
                stride: kv_row_stride(a.num_kv_heads * a.head_dim, ty),
            },
            AttentionConfig::Mla(a) => LayerCache::Latent {
                latent: CacheRows::new(ty),
                k_rope: CacheRows::new(ty),
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
