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
        let sigmoid = |x: f32| 1.0 / (1.0 + crate::dense::exp::exp_ref(-x));
        match self {
            // torch computes silu as x / (1 + exp(-x)).
            Self::Silu => crate::dense::exp::silu(g) * u,
            Self::Situ { beta, linear_beta } => {
                let up = linear_beta.map_or(u, |b| b * (u / b).tanh());
                beta * (g / beta).tanh() * sigmoid(g) * up
            }
        }
    }

    /// `g[i] = glu(g[i], u[i])` for rows of gate and up values: SwiGLU on
    /// the dispatched vector kernel (the same bits as [`Self::glu`]).
    /// Panics if the lengths differ.
    pub fn glu_rows(self, g: &mut [f32], u: &[f32]) {
        assert_eq!(g.len(), u.len(), "gate and up of unequal lengths");
        match self {
            Self::Silu => crate::dense::kernels().silu_mul(g, u),
            Self::Situ { .. } => {
                for (g, u) in g.iter_mut().zip(u) {
                    *g = self.glu(*g, *u);
                }
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
        act.glu_rows(&mut h, &up);
        self.down.matmul(&h, n, out)
    }
}

/// One token's use of one expert: row `token` of the input goes through
/// `experts[expert]`, and the result is added to row `token` of the output
/// times `weight`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    pub token: usize,
    pub expert: usize,
    pub weight: f32,
}

/// The routed part of a MoE layer: `out[t] = Σ_{routes of t} weight · expert(x[t])`,
/// (n, width). Each expert runs once on all the rows that use it (in
/// parallel); the sum runs in ascending expert order, as transformers' eager
/// loop does, so every caller (the node, compute-at-store) adds in the same
/// order. Every expert must consume and produce `width`-wide rows.
pub fn weighted_sum(
    x: &[f32],
    n: usize,
    width: usize,
    routes: &[Route],
    experts: &[&dyn ExpertFfn],
    act: Activation,
) -> Result<Vec<f32>> {
    use rayon::prelude::*;
    if x.len() != n * width {
        return Err(Error::DimMismatch {
            what: "expert input",
            expected: n * width,
            got: x.len(),
        });
    }
    if let Some(r) = routes
        .iter()
        .find(|r| r.token >= n || r.expert >= experts.len())
    {
        return Err(Error::DimMismatch {
            what: "route index",
            expected: experts.len(),
            got: r.expert.max(r.token),
        });
    }
    // (rows used, their outputs) per expert.
    let partial: Vec<(Vec<Route>, Vec<f32>)> = experts
        .par_iter()
        .enumerate()
        .map(|(i, e)| {
            if e.d_model() != width {
                return Err(Error::DimMismatch {
                    what: "expert width",
                    expected: width,
                    got: e.d_model(),
                });
            }
            let rows: Vec<Route> = routes.iter().filter(|r| r.expert == i).copied().collect();
            if rows.is_empty() {
                return Ok((rows, Vec::new()));
            }
            let input: Vec<f32> = rows
                .iter()
                .flat_map(|r| x[r.token * width..][..width].iter().copied())
                .collect();
            let mut y = vec![0f32; rows.len() * width];
            e.forward(&input, rows.len(), act, &mut y)?;
            Ok((rows, y))
        })
        .collect::<Result<_>>()?;
    let mut out = vec![0f32; n * width];
    for (rows, y) in &partial {
        for (r, yr) in rows.iter().zip(y.chunks(width)) {
            for (o, v) in out[r.token * width..][..width].iter_mut().zip(yr) {
                *o += v * r.weight;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expert(seed: f32, d: usize, f: usize) -> DenseExpert {
        let m = |rows, cols, off: f32| {
            let v = (0..rows * cols)
                .map(|i| ((i as f32 + off) * 0.37).sin() * 0.3)
                .collect();
            Matrix::f32(rows, cols, v).unwrap()
        };
        DenseExpert::new(m(f, d, seed), m(f, d, seed + 1.0), m(d, f, seed + 2.0)).unwrap()
    }

    #[test]
    fn weighted_sum_equals_the_per_token_sum_of_expert_outputs() {
        let (d, f, n) = (6, 5, 3);
        let experts = [expert(0.0, d, f), expert(10.0, d, f)];
        let refs: Vec<&dyn ExpertFfn> = experts.iter().map(|e| e as &dyn ExpertFfn).collect();
        let x: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.21).cos()).collect();
        let routes = [
            Route {
                token: 0,
                expert: 1,
                weight: 0.25,
            },
            Route {
                token: 2,
                expert: 0,
                weight: 1.5,
            },
            Route {
                token: 0,
                expert: 0,
                weight: -2.0,
            },
        ];
        let got = weighted_sum(&x, n, d, &routes, &refs, Activation::Silu).unwrap();
        let mut want = vec![0f32; n * d];
        for r in &routes {
            let mut y = vec![0f32; d];
            experts[r.expert]
                .forward(&x[r.token * d..][..d], 1, Activation::Silu, &mut y)
                .unwrap();
            for (o, v) in want[r.token * d..][..d].iter_mut().zip(&y) {
                *o += r.weight * v;
            }
        }
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        assert!(
            got[d..2 * d].iter().all(|v| *v == 0.0),
            "token 1 has no routes"
        );
        let bad = [Route {
            token: 3,
            expert: 0,
            weight: 1.0,
        }];
        assert!(weighted_sum(&x, n, d, &bad, &refs, Activation::Silu).is_err());
    }
}
