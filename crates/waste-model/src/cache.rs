//! Per-sequence attention state: keys and values for GQA layers, the
//! compressed latent and the shared rotary key for MLA layers, the
//! convolution history and recurrent state for KDA layers.

use half::f16;
use waste_kernels::dense::CacheValue;

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
        [Self::F32, Self::F16]
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown cache type {s:?}: f32 or f16"))
    }
}

/// The two tensors a full-attention layer caches (GQA: keys and values;
/// MLA: latents and rope keys), row after row, in one value type.
#[derive(Debug, Clone, Default)]
pub struct Pair<C> {
    pub first: Vec<C>,
    pub second: Vec<C>,
}

impl<C: CacheValue> Pair<C> {
    /// Appends a row to each (rounded to `C`), each followed by `pad` zeros.
    fn push(&mut self, first: &[f32], second: &[f32], pad: usize) {
        for (v, row) in [(&mut self.first, first), (&mut self.second, second)] {
            v.extend(row.iter().map(|&x| C::from_f32(x)));
            v.resize(v.len() + pad, C::from_f32(0.0));
        }
    }

    fn truncate(&mut self, first: usize, second: usize) {
        self.first.truncate(first);
        self.second.truncate(second);
    }

    fn bytes(&self) -> usize {
        size_of::<C>() * (self.first.len() + self.second.len())
    }
}

/// A layer's [`Pair`] in the cache's [`CacheType`].
#[derive(Debug, Clone)]
pub enum CacheRows {
    F32(Pair<f32>),
    F16(Pair<f16>),
}

impl CacheRows {
    fn new(ty: CacheType) -> Self {
        match ty {
            CacheType::F32 => Self::F32(Pair::default()),
            CacheType::F16 => Self::F16(Pair::default()),
        }
    }

    /// Values the first tensor holds.
    fn first_len(&self) -> usize {
        match self {
            Self::F32(p) => p.first.len(),
            Self::F16(p) => p.first.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Self::F32(p) => p.bytes(),
            Self::F16(p) => p.bytes(),
        }
    }

    fn truncate(&mut self, first: usize, second: usize) {
        match self {
            Self::F32(p) => p.truncate(first, second),
            Self::F16(p) => p.truncate(first, second),
        }
    }

    /// Appends a row to each tensor, each followed by `pad` zeros.
    pub(crate) fn push(&mut self, first: &[f32], second: &[f32], pad: usize) {
        match self {
            Self::F32(p) => p.push(first, second, pad),
            Self::F16(p) => p.push(first, second, pad),
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
    /// k and v (`kv.first`, `kv.second`), each (len, stride): a row's first
    /// `width` values (num_kv_heads·head_dim, keys already rotated), then
    /// padding ([`kv_row_stride`]).
    Kv {
        kv: CacheRows,
        width: usize,
        stride: usize,
    },
    /// MLA: normalised latent (len, kv_lora_rank) and (rotated unless NoPE)
    /// k_rope (len, qk_rope_head_dim), `rows.first` and `rows.second`.
    Latent {
        rows: CacheRows,
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
            Self::Kv { kv, stride, .. } => kv.first_len() / stride,
            Self::Latent {
                rows, kv_lora_rank, ..
            } => rows.first_len() / kv_lora_rank,
            Self::Recurrent { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn size_bytes(&self) -> usize {
        match self {
            Self::Kv { kv, .. } => kv.bytes(),
            Self::Latent { rows, .. } => rows.bytes(),
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
            Self::Kv { kv, stride, .. } => kv.truncate(len * *stride, len * *stride),
            Self::Latent {
                rows,
                kv_lora_rank,
                rope_dim,
            } => rows.truncate(len * *kv_lora_rank, len * *rope_dim),
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
                kv: CacheRows::new(ty),
                width: a.num_kv_heads * a.head_dim,
                stride: kv_row_stride(a.num_kv_heads * a.head_dim, ty),
            },
            AttentionConfig::Mla(a) => LayerCache::Latent {
                rows: CacheRows::new(ty),
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
