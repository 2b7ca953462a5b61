//! The quantizer study of docs/QUANT.md: every variant measured on real
//! matrices, the stored formats and the ones that lost, as (bits per weight,
//! relative Frobenius error). Variants that are not formats only quantize and
//! measure; nothing here is stored.

use std::time::Instant;

use half::f16;
use rayon::prelude::*;

use waste_kernels::quant::scale::{GroupSearch, SEARCH_WINDOW};
use waste_kernels::quant::trellis::{self, Trellis};
use waste_kernels::quant::{Format, quantize};
use waste_kernels::{Result, hadamard, q3};

/// One variant under study.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// A stored format.
    Format(Format),
    /// The `q3` grid and scale byte at another group size (bpw 3 + 8/group).
    Q3Group(usize),
    /// A uniform {-4..3} grid with the `q3` scale byte and search.
    Q3Uniform,
    /// The symmetric Gaussian Lloyd-Max 8-level grid with the `q3` scale byte and search.
    LloydMax,
    /// The `q3` grid and scale byte per group of the given size, after a
    /// randomized block Hadamard rotation of the input dimension.
    Q3Rotated(usize),
    /// Plain affine round-to-nearest: codes 0..7, f16 scale and f16 minimum per group.
    AffineRtn(usize),
    /// After the Hadamard rotation, a bitshift trellis of `2^l` states and
    /// `k` bits per weight over each row (`trellis.rs`), one `q3` scale
    /// byte per `group`, `passes` rounds of Viterbi + scale refit.
    Trellis {
        l: u32,
        k: u32,
        group: usize,
        passes: usize,
    },
    /// After the Hadamard rotation, classic TCQ (`trellis::Tcq`): `2^nu`
    /// states, 16 Gaussian-quantile levels in 4 subsets, 3 bits per weight,
    /// one `q3` scale byte per `group` (start: RMS × 1.25), 2 rounds of
    /// Viterbi + scale refit.
    Tcq { nu: u32, group: usize },
}

impl Variant {
    /// The variants of the study, in report order.
    pub const ALL: [Variant; 21] = [
        Variant::Format(Format::Q3),
        Variant::Format(Format::Q3Rtn),
        Variant::Format(Format::Q4),
        Variant::Format(Format::Q8),
        Variant::Format(Format::Q3Tcq),
        Variant::Q3Group(16),
        Variant::Q3Group(64),
        Variant::Q3Uniform,
        Variant::LloydMax,
        Variant::Q3Rotated(32),
        Variant::Q3Rotated(64),
        Variant::AffineRtn(32),
        Variant::AffineRtn(64),
        Variant::AffineRtn(128),
        Variant::Trellis {
            l: 6,
            k: 3,
            group: 32,
            passes: 2,
        },
        Variant::Trellis {
            l: 8,
            k: 3,
            group: 32,
            passes: 1,
        },
        Variant::Trellis {
            l: 8,
            k: 3,
            group: 32,
            passes: 2,
        },
        Variant::Trellis {
            l: 8,
            k: 3,
            group: 64,
            passes: 2,
        },
        Variant::Tcq { nu: 6, group: 32 },
        Variant::Tcq { nu: 8, group: 32 },
        Variant::Tcq { nu: 10, group: 32 },
    ];

    /// Name in tables and JSON.
    pub fn name(self) -> String {
        match self {
            Variant::Format(f) => f.name().to_string(),
            Variant::Q3Group(g) => format!("q3-grid-g{g}"),
            Variant::Q3Uniform => "q3-uniform-search".into(),
            Variant::LloydMax => "lloyd-max-search".into(),
            Variant::Q3Rotated(g) => format!("q3-rht-g{g}"),
            Variant::AffineRtn(g) => format!("affine-rtn-g{g}"),
            Variant::Trellis {
                l,
                k,
                group,
                passes,
            } => format!("bitshift-l{l}k{k}-g{group}-p{passes}"),
            Variant::Tcq { nu, group } => format!("tcq-nu{nu}-g{group}"),
        }
    }

    /// (bits per weight, relative error) of `w`, (rows, cols).
    pub fn measure(self, rows: usize, cols: usize, w: &[f32]) -> Result<(f64, f64)> {
        let norm: f64 = w.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        let groups = |g: usize| (rows * cols.div_ceil(g)) as f64;
        let n = (rows * cols).max(1) as f64;
        let (bits, err) = match self {
            Variant::Format(f) => {
                let q = quantize(f, rows, cols, w)?;
                return Ok((q.bits_per_weight(), q.rel_error()));
            }
            Variant::Q3Group(g) => (
                3.0 * n + 8.0 * groups(g),
                search_err(w, cols, g, &q3_levels(&q3::GRID_Q3)),
            ),
            Variant::Q3Uniform => (
                3.25 * n,
                search_err(w, cols, 32, &q3_levels(&q3::GRID_Q3_RTN)),
            ),
            Variant::LloydMax => {
                let lm = [-2.152, -1.344, -0.756, -0.245, 0.245, 0.756, 1.344, 2.152]
                    .map(|v: f32| v * 16.0);
                (3.25 * n, search_err(w, cols, 32, &lm))
            }
            Variant::Q3Rotated(g) => {
                // The rotation is orthogonal: the error of the rotated weights is the error.
                let signs = hadamard::signs(cols, 0x5eed);
                let mut r = w.to_vec();
                r.par_chunks_mut(cols.max(1))
                    .for_each(|row| hadamard::rotate_row(row, &signs));
                let levels = q3_levels(&q3::GRID_Q3);
                (3.0 * n + 8.0 * groups(g), search_err(&r, cols, g, &levels))
            }
            Variant::AffineRtn(g) => (3.0 * n + 32.0 * groups(g), affine_err(w, cols, g)),
            Variant::Trellis {
                l,
                k,
                group,
                passes,
            } => {
                let signs = hadamard::signs(cols, 0x5eed);
                let tr = Trellis::new(l, k);
                let per_row: Vec<f64> = w
                    .par_chunks(cols.max(1))
                    .map_init(trellis::Scratch::default, |sc, row| {
                        let mut r = row.to_vec();
                        hadamard::rotate_row(&mut r, &signs);
                        trellis::row_error(&tr, &r, group, 1.0, passes, sc)
                    })
                    .collect();
                (f64::from(k) * n + 8.0 * groups(group), per_row.iter().sum())
            }
            Variant::Tcq { nu, group } => {
                // Taps of the subset parities (the newer nu - 1 state bits):
                // chosen by measurement on Gaussian rows.
                let (p, r) = match nu {
                    6 => (0b10011, 0b01010),
                    8 => (0b1101101, 0b1010011),
                    _ => (0b110110101, 0b101001101),
                };
                let tcq = trellis::Tcq::new(nu, p, r, trellis::Tcq::gaussian_levels(1.0));
                let signs = hadamard::signs(cols, 0x5eed);
                let per_row: Vec<f64> = w
                    .par_chunks(cols.max(1))
                    .map(|row| {
                        let mut r = row.to_vec();
                        hadamard::rotate_row(&mut r, &signs);
                        trellis::tcq_row_error(&tcq, &r, group, 1.25, 2)
                    })
                    .collect();
                (3.0 * n + 8.0 * groups(group), per_row.iter().sum())
            }
        };
        Ok((bits / n, if norm > 0.0 { (err / norm).sqrt() } else { 0.0 }))
    }
}

fn q3_levels(grid: &[i8; 16]) -> [f32; 8] {
    std::array::from_fn(|i| f32::from(grid[i]))
}

/// Squared error of the `q3` scale search with `levels` (ascending) per `group`.
fn search_err(w: &[f32], cols: usize, group: usize, levels: &[f32]) -> f64 {
    let zero = levels.iter().position(|&v| v == 0.0).unwrap_or(0) as u8;
    let search = GroupSearch {
        grid: levels,
        zero_index: zero,
        table: &q3::SCALES,
        window: SEARCH_WINDOW,
    };
    let per_row: Vec<f64> = w
        .par_chunks(cols.max(1))
        .map(|row| {
            let mut idx = [0u8; 128];
            row.chunks(group).map(|g| search.run(g, &mut idx).1).sum()
        })
        .collect();
    per_row.iter().sum()
}

/// Squared error of affine RTN: `w ≈ d·q + m`, q in 0..7, d and m rounded to f16.
fn affine_err(w: &[f32], cols: usize, group: usize) -> f64 {
    let per_row: Vec<f64> = w
        .par_chunks(cols.max(1))
        .map(|row| {
            let mut err = 0f64;
            for g in row.chunks(group) {
                let lo = g.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = g.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = f16::from_f32((hi - lo) / 7.0).to_f32();
                let m = f16::from_f32(lo).to_f32();
                for &x in g {
                    let q = if d > 0.0 {
                        ((x - m) / d).round().clamp(0.0, 7.0)
                    } else {
                        0.0
                    };
                    err += f64::from(x - (d * q + m)).powi(2);
                }
            }
            err
        })
        .collect();
    per_row.iter().sum()
}

/// One (bits per weight, relative error) figure.
#[derive(Debug, Clone)]
pub struct Measured {
    pub name: String,
    pub bits_per_weight: f64,
    pub rel_error: f64,
    /// Wall seconds the measurement took (0 for reference figures).
    pub seconds: f64,
}

/// Every variant on one matrix, beside reference figures (llama.cpp's).
#[derive(Debug, Clone)]
pub struct MatrixReport {
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub waste: Vec<Measured>,
    pub reference: Vec<Measured>,
}

impl MatrixReport {
    /// Measures each of `variants` on `w`, (rows, cols).
    pub fn measure(
        matrix: String,
        rows: usize,
        cols: usize,
        w: &[f32],
        variants: &[Variant],
        reference: Vec<Measured>,
    ) -> Result<Self> {
        let waste = variants
            .iter()
            .map(|v| {
                let start = Instant::now();
                let (bits_per_weight, rel_error) = v.measure(rows, cols, w)?;
                Ok(Measured {
                    name: v.name(),
                    bits_per_weight,
                    rel_error,
                    seconds: start.elapsed().as_secs_f64(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            matrix,
            rows,
            cols,
            waste,
            reference,
        })
    }

    fn error(&self, name: &str) -> f64 {
        self.waste
            .iter()
            .chain(&self.reference)
            .find(|m| m.name == name)
            .map_or(f64::NAN, |m| m.rel_error)
    }
}

/// Per-matrix errors (reference types first), then per variant: bits per
/// weight, mean and max error, the worst ratios to `Q3_K` and `IQ3_XXS`, and
/// the speed (M weights per wall second of the study's threads).
pub fn table(reports: &[MatrixReport]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let names: Vec<&str> = first
        .reference
        .iter()
        .chain(&first.waste)
        .map(|m| m.name.as_str())
        .collect();
    let mut s = format!(
        "{:52} {:>9} {}\n",
        "matrix",
        "shape",
        names
            .iter()
            .map(|n| format!("{n:>w$}", w = n.len().max(7)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for r in reports {
        let errs: Vec<String> = names
            .iter()
            .map(|n| format!("{:>w$.4}", r.error(n), w = n.len().max(7)))
            .collect();
        s += &format!(
            "{:52} {:>9} {}\n",
            r.matrix,
            format!("{}x{}", r.rows, r.cols),
            errs.join(" ")
        );
    }
    s += &format!(
        "\n{:20} {:>7} {:>9} {:>9} {:>9} {:>12} {:>8}\n",
        "variant", "max bpw", "mean err", "max err", "max/Q3_K", "max/IQ3_XXS", "M w/s"
    );
    let weights: f64 = reports.iter().map(|r| (r.rows * r.cols) as f64).sum();
    for m in &first.waste {
        let n = m.name.as_str();
        let worst = |t: &str| {
            reports
                .iter()
                .map(|r| r.error(n) / r.error(t))
                .fold(0.0, f64::max)
        };
        let bpw = reports
            .iter()
            .flat_map(|r| r.waste.iter().filter(|w| w.name == n))
            .map(|w| w.bits_per_weight)
            .fold(0.0, f64::max);
        let mean = reports.iter().map(|r| r.error(n)).sum::<f64>() / reports.len() as f64;
        let max = reports.iter().map(|r| r.error(n)).fold(0.0, f64::max);
        let secs: f64 = reports
            .iter()
            .flat_map(|r| r.waste.iter().filter(|w| w.name == n))
            .map(|w| w.seconds)
            .sum();
        s += &format!(
            "{n:20} {bpw:>7.4} {mean:>9.4} {max:>9.4} {:>9.3} {:>12.3} {:>8.1}\n",
            worst("Q3_K"),
            worst("IQ3_XXS"),
            weights / secs / 1e6
        );
    }
    s
}
