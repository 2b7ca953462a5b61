//! The expert FFN interface: one routed expert applied to a few token rows.
//! Dense experts live here; packed quantized records implement the same trait
//! in their format modules, so the model never knows how an expert is stored.

use crate::{Error, Matrix, Result};

/// The gated activation of an expert: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(g) = g · sigmoid(g)` (SwiGLU; Llama, Mixtral, Qwen, DeepSeek).
    Silu,
}

impl Activation {
    #[inline]
    pub fn apply(self, g: f32) -> f32 {
        match self {
            Self::Silu => g / (1.0 + (-g).exp()),
        }
    }
}

/// One expert's feed-forward network.
pub trait ExpertFfn: Send + Sync {
    /// Width of the input and output rows.
    fn d_model(&self) -> usize;
    /// Width of the gated hidden layer.
    fn d_ff(&self) -> usize;
    /// Bytes of weights this expert holds (what a fetch of it moves).
    fn size_bytes(&self) -> usize;
    /// `out = down(act(gate(x)) * up(x))` for `n` rows: x is (n, d_model),
    /// out is (n, d_model), overwritten.
    fn forward(&self, x: &[f32], n: usize, act: Activation, out: &mut [f32]) -> Result<()>;
}

/// An expert held as three dense matrices in Hugging Face layout:
/// gate (d_ff, d_model), up (d_ff, d_model), down (d_model, d_ff).
#[derive(Debug, Clone)]
pub struct DenseExpert {
    gate: Matrix,
    up: Matrix,
    down: Matrix,
}

impl DenseExpert {
    pub fn new(gate: Matrix, up: Matrix, down: Matrix) -> Result<Self> {
        let (d_ff, d_model) = (gate.rows(), gate.cols());
        if up.rows() != d_ff || up.cols() != d_model {
            return Err(Error::DimMismatch {
                what: "up_proj rows",
                expected: d_ff,
                got: up.rows(),
            });
        }
        if down.rows() != d_model || down.cols() != d_ff {
            return Err(Error::DimMismatch {
                what: "down_proj shape",
                expected: d_ff,
                got: down.cols(),
            });
        }
        Ok(Self { gate, up, down })
    }
}

impl ExpertFfn for DenseExpert {
    fn d_model(&self) -> usize {
        self.gate.cols()
    }

    fn d_ff(&self) -> usize {
        self.gate.rows()
    }

    fn size_bytes(&self) -> usize {
        self.gate.size_bytes() + self.up.size_bytes() + self.down.size_bytes()
    }

    fn forward(&self, x: &[f32], n: usize, act: Activation, out: &mut [f32]) -> Result<()> {
        let mut h = self.gate.matmul_alloc(x, n)?; // (n, d_ff)
        let up = self.up.matmul_alloc(x, n)?; // (n, d_ff)
        for (g, u) in h.iter_mut().zip(&up) {
            *g = act.apply(*g) * u;
        }
        self.down.matmul(&h, n, out)
    }
}
