//! The expert FFN interface: one routed expert applied to a few token rows.
//! Dense experts live here; packed quantized records implement the same trait
//! in their format modules, so the model never knows how an expert is stored.

use crate::{Error, Matrix, Result};

/// The gated activation of an expert: `down(glu(gate(x), up(x)))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// SwiGLU, `silu(g) · u` with `silu(g) = g · sigmoid(g)` (Llama, Mixtral, Qwen, DeepSeek).
    Silu,
    /// SiTU-GLU (Kimi K3): both factors soft-capped,
    /// `β·tanh(g/β)·sigmoid(g) · β_lin·tanh(u/β_lin)`; the up factor stays
    /// linear when `linear_beta` is None.
    Situ { beta: f32, linear_beta: Option<f32> },
}

impl Activation {
    /// The gated product of one gate value `g` and its up value `u`.
    #[inline]
    pub fn glu(self, g: f32, u: f32) -> f32 {
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        match self {
            // torch computes silu as x / (1 + exp(-x)).
            Self::Silu => g / (1.0 + (-g).exp()) * u,
            Self::Situ { beta, linear_beta } => {
                let up = linear_beta.map_or(u, |b| b * (u / b).tanh());
                beta * (g / beta).tanh() * sigmoid(g) * up
            }
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
            *g = act.glu(*g, *u);
        }
        self.down.matmul(&h, n, out)
    }
}
