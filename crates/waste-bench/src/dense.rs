//! Dense product throughput behind `waste bench dense` (not a test: nothing
//! here asserts on time). [`Matrix::matmul_with`] on a rayon pool of a chosen
//! size, per ISA this CPU runs, repetitions interleaved across ISAs, medians kept:
//! prefill (n > 1) in GFLOP/s on one cache-resident matrix (compute-bound),
//! decode (n = 1) in GB/s of weights over a set of matrices several times the
//! last-level cache (as decode reads them: from RAM) and on one resident one;
//! beside them the baseline a decode product is judged by, one core's
//! streaming read of a buffer as large ([`stream_read_gbps`]).

use std::hint::black_box;
use std::time::Instant;

use half::bf16;

use waste_kernels::dense::{DenseKernels, Matrix};
use waste_kernels::quant::Isa;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// (rows, cols) shapes.
    pub shapes: Vec<(usize, usize)>,
    /// Activation rows of the prefill figures (decode is n = 1).
    pub n: usize,
    /// bf16, q8 (integer and exact products), q4, q3 and q3-tcq weights too, beside f32.
    pub bf16: bool,
    /// Bytes of the decode streaming set, at least this (4 × LLC).
    pub stream_bytes: usize,
    /// Interleaved repetitions; medians are reported.
    pub repeats: usize,
    /// Least seconds per timed repetition (whole products, at least one).
    pub min_seconds: f64,
    /// Rayon threads of the pool the products run on (0: one per core).
    pub threads: usize,
}

/// One median figure.
#[derive(Debug, Clone)]
pub struct Figure {
    pub dtype: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub n: usize,
    /// true: a set of matrices ≥ `stream_bytes`; false: one matrix, repeated.
    pub streaming: bool,
    pub isa: Isa,
    /// 2·rows·cols·n per product, 1e9 per second.
    pub gflops: f64,
    /// Weight bytes per second, 1e9 units.
    pub gbps: f64,
}

impl Figure {
    /// `"streaming"` or `"resident"`.
    pub fn mode(&self) -> &'static str {
        if self.streaming {
            "streaming"
        } else {
            "resident"
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            out,
            "{} {}x{} n={} {} {}: {:.2} GFLOP/s, {:.2} GB/s",
            self.dtype,
            self.rows,
            self.cols,
            self.n,
            self.mode(),
            self.isa.name(),
            self.gflops,
            self.gbps
        )
    }
}

/// Deterministic values in about ±1 (splitmix64).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = (s ^ (s >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

fn matrix(dtype: &str, rows: usize, cols: usize, seed: u64) -> Matrix {
    let v = values(rows * cols, seed);
    let m = match dtype {
        "bf16" => Matrix::bf16(rows, cols, v.iter().map(|&x| bf16::from_f32(x)).collect()),
        "q8" | "q4" | "q3" | "q3-tcq" => {
            let format: waste_kernels::Format = dtype.parse().expect("a block format's name");
            let q = waste_kernels::quantize(format, rows, cols, &v)
                .expect("block formats quantize any shape");
            Matrix::blocks(format, rows, cols, q.bytes)
        }
        // q8 products on the exact path (every weight widened to f32).
        "q8-exact" => {
            return matrix("q8", rows, cols, seed)
                .with_q8_products(waste_kernels::Q8Products::Exact);
        }
        _ => Matrix::f32(rows, cols, v),
    };
    m.expect("sized by rows × cols")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs every dtype × shape × {prefill resident, decode streaming, decode
/// resident} × each ISA this CPU runs, on a pool of `cfg.threads`; returns
/// its thread count and the figures.
pub fn run(
    cfg: &Config,
    progress: impl FnMut(&Figure) + Send,
) -> Result<(usize, Vec<Figure>), rayon::ThreadPoolBuildError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads)
        .thread_name(|i| format!("bench-{i}"))
        .build()?;
    Ok((
        pool.current_num_threads(),
        pool.install(|| run_here(cfg, progress)),
    ))
}

fn run_here(cfg: &Config, mut progress: impl FnMut(&Figure)) -> Vec<Figure> {
    let isas: Vec<(Isa, &DenseKernels)> = Isa::ALL
        .into_iter()
        .filter_map(|i| DenseKernels::for_isa(i).map(|k| (i, k)))
        .collect();
    let dtypes: &[&'static str] = if cfg.bf16 {
        &["f32", "bf16", "q8", "q8-exact", "q4", "q3", "q3-tcq"]
    } else {
        &["f32"]
    };
    let mut figures = Vec::new();
    for &dtype in dtypes {
        for &(rows, cols) in &cfg.shapes {
            let one = matrix(dtype, rows, cols, 1);
            let count = cfg.stream_bytes.div_ceil(one.size_bytes().max(1)).max(1);
            let set: Vec<Matrix> = (0..count)
                .map(|i| matrix(dtype, rows, cols, i as u64 + 1))
                .collect();
            for (n, streaming) in [(cfg.n, false), (1, true), (1, false)] {
                let mats = if streaming { &set[..] } else { &set[..1] };
                let x = values(n * cols, 99);
                let mut out = vec![0f32; n * rows];
                let mut times: Vec<Vec<f64>> = vec![Vec::new(); isas.len()];
                for _ in 0..cfg.repeats.max(1) {
                    for (i, &(_, k)) in isas.iter().enumerate() {
                        let (start, mut products) = (Instant::now(), 0usize);
                        while products == 0 || start.elapsed().as_secs_f64() < cfg.min_seconds {
                            for m in mats {
                                m.matmul_with(k, black_box(&x), n, &mut out)
                                    .expect("shapes agree");
                                black_box(&out);
                            }
                            products += mats.len();
                        }
                        times[i].push(products as f64 / start.elapsed().as_secs_f64());
                    }
                }
                for (i, &(isa, _)) in isas.iter().enumerate() {
                    let per_s = median(times[i].clone());
                    let f = Figure {
                        dtype,
                        rows,
                        cols,
                        n,
                        streaming,
                        isa,
                        gflops: per_s * 2.0 * (rows * cols * n) as f64 / 1e9,
                        gbps: per_s * one.size_bytes() as f64 / 1e9,
                    };
                    progress(&f);
                    figures.push(f);
                }
            }
        }
    }
    figures
}

/// One core's streaming read in GB/s: the median of `repeats` passes (each
/// at least `min_seconds`) summing a buffer of `bytes` (at least 4 × LLC:
/// from RAM) as u64 words on the calling thread. What a single-threaded
/// decode product streaming weights from RAM cannot beat.
pub fn stream_read_gbps(bytes: usize, repeats: usize, min_seconds: f64) -> f64 {
    let words: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let mut rates = Vec::new();
    for _ in 0..repeats.max(1) {
        let (start, mut passes) = (Instant::now(), 0usize);
        while passes == 0 || start.elapsed().as_secs_f64() < min_seconds {
            // Four independent sums so the loop is bound by loads, not adds.
            let mut acc = [0u64; 4];
            for c in black_box(&words[..]).chunks_exact(4) {
                for (a, w) in acc.iter_mut().zip(c) {
                    *a = a.wrapping_add(*w);
                }
            }
            black_box(acc);
            passes += 1;
        }
        rates.push((passes * words.len() * 8) as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    median(rates)
}

/// The `_ref` figure measured beside `f` in the same run.
pub fn ref_of<'a>(figs: &'a [Figure], f: &Figure) -> Option<&'a Figure> {
    figs.iter().find(|g| {
        (g.dtype, g.rows, g.cols, g.n, g.streaming, g.isa)
            == (f.dtype, f.rows, f.cols, f.n, f.streaming, Isa::Ref)
    })
}

/// A plain-text table of `figs` with the ratio to `_ref`.
pub fn table(figs: &[Figure]) -> String {
    let mut s = format!(
        "{:5} {:>10} {:>4} {:9} {:7} {:>9} {:>8} {:>7}\n",
        "dtype", "shape", "n", "mode", "isa", "GFLOP/s", "GB/s", "x ref"
    );
    for f in figs {
        let ratio = ref_of(figs, f).map_or(f64::NAN, |r| f.gflops / r.gflops);
        s += &format!(
            "{:5} {:>10} {:>4} {:9} {:7} {:>9.2} {:>8.2} {:>7.2}\n",
            f.dtype,
            format!("{}x{}", f.rows, f.cols),
            f.n,
            f.mode(),
            f.isa.name(),
            f.gflops,
            f.gbps,
            ratio
        );
    }
    s
}
