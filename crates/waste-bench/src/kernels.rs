//! Kernel throughput measurement behind `waste bench kernels` (not a test:
//! nothing here asserts on time). GB/s of packed weights consumed by one core,
//! streaming over a set of matrices several times the last-level cache (as
//! decode does: weights come from RAM) and on one cache-resident matrix, with
//! one core's plain read of the same bytes measured in the same run. Block
//! formats run their quantized tables; GGUF types with an integer kernel
//! (`Q4_K` ...) the ggml tables of the same names, on activations quantized
//! once outside the timing, as the quantized formats' are.

use std::hint::black_box;
use std::time::Instant;

use waste_kernels::ggml::GgmlType;
use waste_kernels::ggml::act::GgmlActs;
use waste_kernels::ggml::dot::GgmlKernels;
use waste_kernels::ggml::layout::{self, RowLayout};
use waste_kernels::par::matmul_rows;
use waste_kernels::quant::{Format, Kernels, PackedMatrix, QuantizedActs};

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// (rows, cols) shapes.
    pub shapes: Vec<(usize, usize)>,
    pub formats: Vec<Format>,
    /// Activation rows per product (1 = decode).
    pub n: usize,
    /// Bytes of the streaming set, at least this (4 × LLC).
    pub stream_bytes: usize,
    /// Interleaved repetitions; medians are reported.
    pub repeats: usize,
    /// GGUF types in row-major order even where a store's records
    /// interleave them ([`layout::interleaving`]).
    pub row_major: bool,
}

/// Who consumed the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// One core summing the buffer as u64 words.
    MemRead,
    /// A kernel table, by its name ([`Kernels::name`], or for a GGUF type
    /// [`GgmlKernels::name`]: `ref`, `avx2`, `avx512`, `avx512-vnni`, ...).
    Kernel(&'static str),
}

impl Reader {
    pub fn name(self) -> &'static str {
        match self {
            Reader::MemRead => "read",
            Reader::Kernel(name) => name,
        }
    }
}

/// One median figure.
#[derive(Debug, Clone)]
pub struct Figure {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    pub n: usize,
    /// true: a set of matrices ≥ `stream_bytes`; false: one matrix, repeated.
    pub streaming: bool,
    pub reader: Reader,
    /// Packed bytes per second, median over repeats, 1e9 units.
    pub gbps: f64,
    /// Bytes per pass.
    pub bytes: usize,
}

impl std::fmt::Display for Figure {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = if self.streaming {
            "streaming"
        } else {
            "resident"
        };
        let (f, r, c, who) = (self.format, self.rows, self.cols, self.reader.name());
        write!(
            out,
            "{f} {r}x{c} n={} {mode} {who}: {:.2} GB/s",
            self.n, self.gbps
        )
    }
}

/// Deterministic random bytes of a valid packed matrix (scales kept in range).
fn random_matrix(format: Format, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut next = move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut bytes: Vec<u8> = (0..format.packed_size(rows, cols).unwrap_or(0))
        .map(|_| next() as u8)
        .collect();
    let bb = format.block_bytes();
    for blk in bytes.chunks_exact_mut(bb) {
        match format {
            // MXFP4's E8M0 exponent: 2^-10 (with the codes' doubling
            // undone), as the f16 scales' 1e-3; a random byte would give
            // subnormal and infinite products
            Format::Ggml(GgmlType::MXFP4) => blk[0] = 118,
            Format::Ggml(t) => {
                for &at in waste_kernels::ggml::dot::scale_fields(t) {
                    let d = half::f16::from_f32(1e-3).to_bits().to_le_bytes();
                    blk[at..at + 2].copy_from_slice(&d);
                }
            }
            Format::Q8 => {
                blk[..2].copy_from_slice(&half::f16::from_f32(1e-3).to_bits().to_le_bytes());
            }
            _ => blk[0] = (40 + blk[0] % 16) | (blk[0] & 128),
        }
    }
    bytes
}

/// The ggml type of `format` if it runs on an integer ggml kernel
/// (`waste_kernels::ggml::dot`); other ggml types have no SIMD kernel to measure.
fn ggml_type(format: Format) -> Option<GgmlType> {
    match format {
        Format::Ggml(t) if waste_kernels::ggml::dot::has_kernel(t) => Some(t),
        _ => None,
    }
}

fn mem_read(bufs: &[Vec<u8>]) -> u64 {
    let mut acc = [0u64; 4];
    for b in bufs {
        let mut chunks = b.chunks_exact(32);
        for c in &mut chunks {
            for (l, a) in acc.iter_mut().enumerate() {
                *a = a.wrapping_add(u64::from_le_bytes(
                    c[l * 8..l * 8 + 8].try_into().expect("8 bytes"),
                ));
            }
        }
        acc[0] = acc[0].wrapping_add(
            chunks
                .remainder()
                .iter()
                .map(|&v| u64::from(v))
                .sum::<u64>(),
        );
    }
    acc.iter().fold(0, |a, &b| a.wrapping_add(b))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs every (format, shape) × {streaming, resident} × {read, each kernel
/// table this CPU runs ([`Kernels::variants`])}, repetitions interleaved
/// across readers; single-threaded.
pub fn run(cfg: &Config, mut progress: impl FnMut(&Figure)) -> Vec<Figure> {
    let mut figures = Vec::new();
    for &format in &cfg.formats {
        // The GGUF types' tables are their own (`GgmlKernels::variants`).
        let tables: Vec<&'static str> = match ggml_type(format) {
            Some(_) => GgmlKernels::variants().iter().map(|k| k.name()).collect(),
            None => Kernels::variants().iter().map(|k| k.name()).collect(),
        };
        let readers: Vec<Reader> = std::iter::once(Reader::MemRead)
            .chain(tables.into_iter().map(Reader::Kernel))
            .collect();
        for &(rows, cols) in &cfg.shapes {
            let one = format.packed_size(rows, cols).unwrap_or(0).max(1);
            let count = cfg.stream_bytes.div_ceil(one).max(1);
            // as a store holds them: Q4_0, IQ4_NL, Q4_K and IQ4_XS interleaved by sixteen
            let layout = ggml_type(format)
                .and_then(layout::interleaving)
                .filter(|_| !cfg.row_major)
                .unwrap_or(RowLayout::RowMajor);
            let set: Vec<Vec<u8>> = (0..count)
                .map(|i| {
                    let m = random_matrix(format, rows, cols, i as u64);
                    if layout == RowLayout::RowMajor {
                        return m;
                    }
                    let (rb, bs) = (format.row_bytes(cols), format.block_bytes());
                    layout::lay_out(layout, &m, rows, rb, bs)
                })
                .collect();
            let x: Vec<f32> = (0..cfg.n * cols)
                .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
                .collect();
            let ggml = ggml_type(format);
            let acts = match ggml {
                // q3-tcq's products take their rotated activations.
                None => format.quantized_acts(&x, cfg.n, cols),
                Some(_) => QuantizedActs::new(&[], 0, 0),
            };
            let mut gacts = GgmlActs::default();
            if let Some(t) = ggml {
                let pairing = waste_kernels::ggml::dot::pairing(t).expect("checked by ggml_type");
                gacts.quantize(pairing, &x, cfg.n, cols);
            }
            let mut out = vec![0f32; rows * cfg.n];
            for streaming in [true, false] {
                let bufs = if streaming { &set[..] } else { &set[..1] };
                // Resident: repeat one matrix to roughly 32 MB of work per pass.
                let passes = if streaming { 1 } else { (32 << 20) / one + 1 };
                let bytes = bufs.iter().map(Vec::len).sum::<usize>() * passes;
                let mut times: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
                for _ in 0..cfg.repeats.max(1) {
                    for (ri, &reader) in readers.iter().enumerate() {
                        let start = Instant::now();
                        for _ in 0..passes {
                            match reader {
                                Reader::MemRead => {
                                    black_box(mem_read(black_box(bufs)));
                                }
                                Reader::Kernel(name) if ggml.is_some() => {
                                    let t = ggml.expect("matched");
                                    let k = GgmlKernels::by_name(name).expect("listed by variants");
                                    let rb = format.row_bytes(cols);
                                    for b in bufs {
                                        waste_kernels::ggml::dot::rows_dot_laid(
                                            k, t, layout, b, rb, &gacts, &mut out,
                                        );
                                        black_box(&out);
                                    }
                                }
                                Reader::Kernel(name) => {
                                    let k = Kernels::by_name(name).expect("listed by variants");
                                    for b in bufs {
                                        let m = PackedMatrix::new(format, rows, cols, b)
                                            .expect("sized by packed_size");
                                        matmul_rows(k, &m, 0, &acts, &mut out);
                                        black_box(&out);
                                    }
                                }
                            }
                        }
                        times[ri].push(bytes as f64 / start.elapsed().as_secs_f64() / 1e9);
                    }
                }
                for (ri, &reader) in readers.iter().enumerate() {
                    let f = Figure {
                        format,
                        rows,
                        cols,
                        n: cfg.n,
                        streaming,
                        reader,
                        gbps: median(times[ri].clone()),
                        bytes,
                    };
                    progress(&f);
                    figures.push(f);
                }
            }
        }
    }
    figures
}

/// A kernel figure with the baselines measured beside it in the same run.
#[derive(Debug, Clone)]
pub struct Ratioed {
    pub fig: Figure,
    /// One core's plain read of the same bytes, GB/s.
    pub read_gbps: f64,
    /// The `_ref` kernel on the same bytes, GB/s.
    pub ref_gbps: f64,
}

impl Ratioed {
    /// `"streaming"` or `"resident"`.
    pub fn mode(&self) -> &'static str {
        if self.fig.streaming {
            "streaming"
        } else {
            "resident"
        }
    }
}

/// The kernel figures of `figs` with their read and `_ref` baselines.
pub fn with_ratios(figs: &[Figure]) -> Vec<Ratioed> {
    let find = |f: &Figure, r: Reader| {
        figs.iter()
            .find(|g| {
                (g.format, g.rows, g.cols, g.streaming, g.reader)
                    == (f.format, f.rows, f.cols, f.streaming, r)
            })
            .map_or(f64::NAN, |g| g.gbps)
    };
    figs.iter()
        .filter(|f| f.reader != Reader::MemRead)
        .map(|f| Ratioed {
            fig: f.clone(),
            read_gbps: find(f, Reader::MemRead),
            ref_gbps: find(f, Reader::Kernel("ref")),
        })
        .collect()
}

/// A plain-text table of `rows`.
pub fn table(rows: &[Ratioed]) -> String {
    let mut s = format!(
        "{:6} {:>11} {:9} {:11} {:>8} {:>8} {:>8} {:>8}\n",
        "format", "shape", "mode", "isa", "GB/s", "read", "x read", "x ref"
    );
    for r in rows {
        let f = &r.fig;
        s += &format!(
            "{:6} {:>11} {:9} {:11} {:>8.2} {:>8.2} {:>8.2} {:>8.1}\n",
            f.format.name(),
            format!("{}x{}", f.rows, f.cols),
            r.mode(),
            f.reader.name(),
            f.gbps,
            r.read_gbps,
            f.gbps / r.read_gbps,
            f.gbps / r.ref_gbps
        );
    }
    s
}
