//! The small ops of the reference forward: weights widened to f32, mat-vec
//! with f64 accumulation, RMSNorm, softmax, top-k and the SwiGLU MLP.

use anyhow::{Result, anyhow, ensure};
use waste_kernels::TensorSource;

use crate::MemorySource;

/// A row-major (rows, cols) weight widened to f32, HF `[out, in]` layout.
#[derive(Debug)]
pub(super) struct Mat {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) w: Vec<f32>,
}

impl Mat {
    pub(super) fn row(&self, r: usize) -> &[f32] {
        &self.w[r * self.cols..(r + 1) * self.cols]
    }

    /// `W @ x`, f64 accumulation.
    pub(super) fn matvec(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), self.cols, "matvec: input length");
        (0..self.rows).map(|r| dot(self.row(r), x) as f32).collect()
    }
}

pub(super) fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

pub(super) fn load(src: &MemorySource, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let tensor = src.load(name).map_err(|e| anyhow!(e))?;
    ensure!(
        tensor.shape == shape,
        "tensor `{name}`: shape {:?}, expected {shape:?}",
        tensor.shape
    );
    Ok(tensor.into_f32())
}

pub(super) fn mat(src: &MemorySource, name: &str, rows: usize, cols: usize) -> Result<Mat> {
    Ok(Mat {
        rows,
        cols,
        w: load(src, name, &[rows, cols])?,
    })
}

/// Quirk 12: `w * (x * rsqrt(mean(x^2) + eps))`.
pub(super) fn rms_norm(x: &[f32], w: &[f32], eps: f64) -> Vec<f32> {
    let mean_sq = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (mean_sq + eps).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &g)| (f64::from(g) * f64::from((f64::from(v) * inv) as f32)) as f32)
        .collect()
}

pub(super) fn softmax(x: &[f64]) -> Vec<f64> {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = x.iter().map(|&v| (v - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// Indices of the `k` largest scores, best first (ties: lower index first).
pub(super) fn top_k(scores: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// A SwiGLU MLP `down(silu(gate(x)) * up(x))` (dense MLP, routed or shared expert).
#[derive(Debug)]
pub(super) struct Swiglu {
    pub(super) gate: Mat,
    pub(super) up: Mat,
    pub(super) down: Mat,
}

impl Swiglu {
    /// `names` = the gate, up and down weight names.
    pub(super) fn load(
        src: &MemorySource,
        names: [&str; 3],
        hidden: usize,
        inter: usize,
    ) -> Result<Self> {
        Ok(Self {
            gate: mat(src, names[0], inter, hidden)?,
            up: mat(src, names[1], inter, hidden)?,
            down: mat(src, names[2], hidden, inter)?,
        })
    }

    pub(super) fn forward(&self, x: &[f32]) -> Vec<f32> {
        let (g, u) = (self.gate.matvec(x), self.up.matvec(x));
        let act: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| {
                let g = f64::from(g);
                (g / (1.0 + (-g).exp()) * f64::from(u)) as f32
            })
            .collect();
        self.down.matvec(&act)
    }
}

pub(super) fn swiglu_named(
    src: &MemorySource,
    prefix: &str,
    hidden: usize,
    inter: usize,
) -> Result<Swiglu> {
    let names = ["gate_proj", "up_proj", "down_proj"].map(|m| format!("{prefix}{m}.weight"));
    Swiglu::load(src, [&names[0], &names[1], &names[2]], hidden, inter)
}
