//! A linear layer (weight + optional bias) and the loader that fetches named,
//! shape-checked weights from a [`TensorSource`].

use std::cell::Cell;

use waste_kernels::{DenseExpert, Matrix, Q8Products, TensorSource};

use crate::error::KernelContext;
use crate::{Error, Result};

/// `y = x·Wᵀ + b`, W of shape (out_features, in_features).
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Matrix,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    pub fn out_features(&self) -> usize {
        self.weight.rows()
    }

    /// Applies the layer to `n` rows of `x` (n, in) → (n, out).
    pub fn forward(&self, x: &[f32], n: usize, layer: usize) -> Result<Vec<f32>> {
        let mut y = self.weight.matmul_alloc(x, n).at_layer(layer)?;
        if let Some(b) = &self.bias {
            for row in y.chunks_mut(b.len()) {
                for (v, bi) in row.iter_mut().zip(b) {
                    *v += bi;
                }
            }
        }
        Ok(y)
    }
}

/// Loads weights by state-dict name, checking each shape against the config.
#[derive(Clone, Copy)]
pub struct Loader<'a> {
    src: &'a dyn TensorSource,
    /// Bytes of every weight loaded so far, as held in RAM.
    loaded: Option<&'a Cell<usize>>,
    /// How the q8 matrices it loads multiply activations.
    q8: Q8Products,
}

impl std::fmt::Debug for Loader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loader")
    }
}

impl<'a> Loader<'a> {
    pub fn new(src: &'a dyn TensorSource) -> Self {
        Self {
            src,
            loaded: None,
            q8: Q8Products::default(),
        }
    }

    /// A loader that adds the RAM size of everything it loads to `loaded`.
    pub fn counting(src: &'a dyn TensorSource, loaded: &'a Cell<usize>) -> Self {
        Self {
            loaded: Some(loaded),
            ..Self::new(src)
        }
    }

    /// The same loader, its q8 matrices multiplying as `q8` says.
    pub fn with_q8(self, q8: Q8Products) -> Self {
        Self { q8, ..self }
    }

    fn count(&self, bytes: usize) {
        if let Some(c) = self.loaded {
            c.set(c.get() + bytes);
        }
    }

    /// Adds `bytes` held in RAM by something not loaded through this
    /// loader (the cache of embeddings read by row).
    pub fn count_bytes(&self, bytes: usize) {
        self.count(bytes);
    }

    pub fn contains(&self, name: &str) -> bool {
        self.src.contains(name)
    }

    fn tensor(&self, name: &str, expected: &[usize]) -> Result<waste_kernels::Tensor> {
        let t = self.src.load(name).map_err(|source| Error::Weight {
            name: name.to_string(),
            source,
        })?;
        if t.shape != expected {
            return Err(Error::WeightShape {
                name: name.to_string(),
                got: t.shape,
                expected: expected.to_vec(),
            });
        }
        self.count(t.size_bytes());
        Ok(t)
    }

    /// A (rows, cols) matrix, kept in its stored precision (a q8 one's
    /// products as this loader's [`Q8Products`]).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        self.tensor(name, &[rows, cols])?
            .into_matrix()
            .map(|m| m.with_q8_products(self.q8))
            .map_err(|e| Error::Weight {
                name: name.to_string(),
                source: Box::new(e),
            })
    }

    /// A vector of `len` values widened to f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        Ok(self.tensor(name, &[len])?.into_f32())
    }

    /// A tensor of exactly `shape`, flattened and widened to f32.
    pub fn tensor_f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        Ok(self.tensor(name, shape)?.into_f32())
    }

    /// A tensor of any shape, flattened and widened to f32 (the caller checks its size).
    pub fn tensor_f32_any(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.src.load(name).map_err(|source| Error::Weight {
            name: name.to_string(),
            source,
        })?;
        let values = t.into_f32();
        self.count(values.len() * 4);
        Ok(values)
    }

    /// `{prefix}.weight` of shape (out, in) and, if `bias`, `{prefix}.bias`.
    pub fn linear(
        &self,
        prefix: &str,
        in_features: usize,
        out_features: usize,
        bias: bool,
    ) -> Result<Linear> {
        let weight = self.matrix(&format!("{prefix}.weight"), out_features, in_features)?;
        let bias = if bias {
            Some(self.vector(&format!("{prefix}.bias"), out_features)?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// A gated MLP from three projections named `{names[0..3]}.weight` (gate, up, down).
    pub fn gated_mlp(
        &self,
        names: [String; 3],
        d_model: usize,
        d_ff: usize,
    ) -> Result<DenseExpert> {
        let [gate, up, down] = names;
        let gate = self.matrix(&gate, d_ff, d_model)?;
        let up = self.matrix(&up, d_ff, d_model)?;
        let down = self.matrix(&down, d_model, d_ff)?;
        DenseExpert::new(gate, up, down).map_err(|e| Error::Weight {
            name: "gated mlp".to_string(),
            source: Box::new(e),
        })
    }
}
