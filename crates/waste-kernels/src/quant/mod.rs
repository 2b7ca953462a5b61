//! Quantized weight formats: the [`Format`] enum with stable names and ids,
//! quantize / dequantize of whole matrices, and products of packed matrices
//! with f32 activations (int8-quantized on the way in). Block layouts live in
//! `q3`, `q4`, `q8`; the byte-level specification is docs/FORMAT.md. The
//! native formats (a release's own bf16 / f32 / fp8 / int4 / MXFP4 experts,
//! `crate::native`) share the enum and [`PackedMatrix`], and take the exact
//! f32 path instead: no activation quantization.
//!
//! A packed matrix of shape (rows, cols) is `rows` rows of `ceil(cols/32)`
//! blocks, nothing else: no header, so `bits_per_weight = 8 · bytes / (rows·cols)`
//! counts every scale. A row whose width is not a multiple of 32 ends in a
//! partial block stored whole (its absent codes are ignored).

pub mod act;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub mod dispatch;
pub mod scale;
pub mod tile;
pub mod trellis;

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

pub use act::QuantizedActs;
pub use dispatch::{Isa, Kernels, kernels};

use crate::ggml::GgmlType;
use crate::ggml::layout::RowLayout;
use crate::{Error, Result, q3, q3tcq, q4, q8};

/// A packed weight format. Names and ids are stable: ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// 3.25 bpw: 3-bit non-uniform grid, signed log scale per 32, scale search.
    Q3,
    /// 3.25 bpw baseline: the `q3` block with a uniform grid, absmax round-to-nearest.
    Q3Rtn,
    /// 4.25 bpw: 4-bit non-uniform grid, signed log scale per 32, scale search.
    Q4,
    /// 8.5 bpw: int8 with an f16 scale per 32 (Q8_0).
    Q8,
    /// Native: bf16 values (16 bpw).
    Bf16,
    /// Native: f32 values (32 bpw): f32 and f16 sources, and GGUF ones decoded exactly.
    F32,
    /// Native: FP8 E4M3FN with an f32 `scale_inv` per 128×128 block (DeepSeek-V3, Kimi K2).
    Fp8Block128,
    /// Native: compressed-tensors symmetric int4, bf16 scale per 32 inputs (Kimi-K2-Thinking).
    Int4G32,
    /// Native: MXFP4, e2m1 codes with an E8M0 scale per 32 inputs (Kimi K3).
    Mxfp4,
    /// 3.25 bpw: trellis-coded (64 states) after a rotation of each row,
    /// mixed 3- and 4-bit steps, a log scale per 192 (`crate::q3tcq`);
    /// products take f32 activations and rotate them.
    Q3Tcq,
    /// Native: a GGUF tensor's ggml blocks as the file stores them, whole
    /// blocks per row (`crate::ggml`). Built only through [`Format::ggml`],
    /// which keeps F32 and BF16 on [`Format::F32`] / [`Format::Bf16`] (the
    /// same bytes) and refuses the types the decoders do not read.
    Ggml(GgmlType),
}

/// Format id of ggml type `t` is `GGML_ID_BASE + t` (ggml's own id, so the
/// scheme never needs a table and never collides with ids 1-9).
pub const GGML_ID_BASE: u16 = 256;

impl Format {
    /// Every quantized (block) format, in id order: the ones [`quantize`]
    /// produces from any weights and the integer kernels multiply.
    pub const ALL: [Format; 4] = [Format::Q3, Format::Q3Rtn, Format::Q4, Format::Q8];

    /// The quantized formats coded in a rotated basis: [`quantize`]
    /// produces them; their products take f32 activations
    /// ([`Format::is_exact`]) and rotate them before the int8 kernels.
    pub const ROTATED: [Format; 1] = [Format::Q3Tcq];

    /// The native formats, in id order: a release's experts kept as stored,
    /// multiplied on the exact f32 path (`crate::native`).
    pub const NATIVE: [Format; 5] = [
        Format::Bf16,
        Format::F32,
        Format::Fp8Block128,
        Format::Int4G32,
        Format::Mxfp4,
    ];

    /// The format that keeps a GGUF tensor of type `t` as stored: F32 and
    /// BF16 are the plain native formats, every other decodable type its
    /// blocks; `None` for a type the decoders do not read.
    pub fn ggml(t: GgmlType) -> Option<Format> {
        match t {
            GgmlType::F32 => Some(Format::F32),
            GgmlType::BF16 => Some(Format::Bf16),
            t if t.is_decodable() => Some(Format::Ggml(t)),
            _ => None,
        }
    }

    /// Every format: [`Format::ALL`], [`Format::NATIVE`], then one
    /// [`Format::Ggml`] per decodable ggml type (in
    /// [`GgmlType::DECODABLE`]'s order). Allocation-free: record parsing
    /// looks ids up here.
    pub fn every() -> impl Iterator<Item = Format> {
        let ggml = GgmlType::DECODABLE
            .into_iter()
            .filter_map(Format::ggml)
            .filter(|f| matches!(f, Format::Ggml(_)));
        Format::ALL
            .into_iter()
            .chain(Format::NATIVE)
            .chain(Format::ROTATED)
            .chain(ggml)
    }

    /// `x` (n, cols) as this block format's int8 products take it:
    /// quantized per 32, and for `q3-tcq` first rotated as its rows are,
    /// with one scale per superblock ([`q3tcq::rotated_acts`]).
    pub fn quantized_acts(self, x: &[f32], n: usize, cols: usize) -> QuantizedActs {
        if self == Format::Q3Tcq {
            q3tcq::rotated_acts(x, n, cols)
        } else {
            QuantizedActs::new(x, n, cols)
        }
    }

    /// Whether products take f32 activations ([`PackedMatrix::matmul`],
    /// never [`PackedMatrix::matmul_acts`]) and rows are laid out by
    /// `crate::native`: the native formats, whose rows decode exactly, and
    /// `q3-tcq`, which rotates the activations itself before quantizing
    /// them to int8.
    pub fn is_exact(self) -> bool {
        matches!(self, Format::Ggml(_) | Format::Q3Tcq) || Format::NATIVE.contains(&self)
    }

    /// Whether the format's rows are plain floats (`f32`, `bf16`, a GGUF's
    /// F16), which the dense float kernels multiply as they lie.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            Format::F32 | Format::Bf16 | Format::Ggml(GgmlType::F16)
        )
    }

    /// The kernel products of this format run through, in words (what
    /// `waste inspect` reports): plain floats on the dense float kernels of
    /// `k`'s ISA, the other exact formats' rows decoded into a scratch row
    /// dotted in f32; the block formats go through `k`'s table.
    pub fn kernel(self, k: &Kernels) -> String {
        if self.is_float() && k.isa() != Isa::Ref {
            format!("{} f32 dot, each value widened exactly", k.isa().name())
        } else if let Format::Ggml(t) = self
            && let Some(g) = crate::ggml::dot::GgmlKernels::by_name(k.name())
            && let Some(name) = crate::ggml::dot::kernel_name(t, g)
        {
            name
        } else if self == Format::Q3Tcq {
            format!(
                "{} int8 trellis decode (activations rotated, quantized per 32)",
                k.name()
            )
        } else if self.is_exact() {
            "scalar row decode + f32 dot".to_string()
        } else {
            format!("{} int8 block dot (activations quantized per 32)", k.name())
        }
    }

    /// The stable numeric id (stored in expert records).
    pub fn id(self) -> u16 {
        match self {
            Format::Q3 => 1,
            Format::Q3Rtn => 2,
            Format::Q4 => 3,
            Format::Q8 => 4,
            Format::Bf16 => 5,
            Format::F32 => 6,
            Format::Fp8Block128 => 7,
            Format::Int4G32 => 8,
            Format::Mxfp4 => 9,
            Format::Q3Tcq => 10,
            // Ggml values hold decodable ids only (< 40): no overflow.
            Format::Ggml(t) => GGML_ID_BASE + t.0 as u16,
        }
    }

    /// The format of a stored id.
    pub fn from_id(id: u16) -> Result<Format> {
        Format::every()
            .find(|f| f.id() == id)
            .ok_or_else(|| Error::UnknownFormat {
                what: format!("id {id}"),
            })
    }

    /// The stable name (`--format`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Q3 => "q3",
            Format::Q3Rtn => "q3-rtn",
            Format::Q4 => "q4",
            Format::Q8 => "q8",
            Format::Bf16 => "bf16",
            Format::F32 => "f32",
            Format::Fp8Block128 => "fp8-b128",
            Format::Int4G32 => "int4-g32",
            Format::Mxfp4 => "mxfp4",
            Format::Q3Tcq => "q3-tcq",
            // ggml's own upper-case name (`Q4_K`), apart from waste's
            // lower-case `f32`, `bf16`, `mxfp4` layouts.
            Format::Ggml(t) => t.name().unwrap_or("ggml"),
        }
    }

    /// Bytes per block of 32 weights; for a native format, the bytes of 32
    /// weights' codes (its scales live in a separate plane); for ggml blocks
    /// (of 32 or 256 weights), the bytes of one block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q3 | Format::Q3Rtn => q3::BLOCK_BYTES,
            Format::Q3Tcq => q3tcq::BLOCK_BYTES,
            Format::Q4 => q4::BLOCK_BYTES,
            Format::Q8 => q8::BLOCK_BYTES,
            Format::Bf16 => 64,
            Format::F32 => 128,
            Format::Fp8Block128 => 32,
            Format::Int4G32 | Format::Mxfp4 => 16,
            Format::Ggml(t) => t.block().map_or(0, |(_, bytes)| bytes),
        }
    }

    /// Bytes of one packed row of `cols` weights (for a native format, the
    /// row's codes, without the scale plane).
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            // Rows of partial ggml blocks do not exist: packed_size refuses them.
            Format::Ggml(t) => t.block().map_or(0, |(qk, b)| cols.div_ceil(qk) * b),
            _ => crate::native::code_row_bytes(self, cols)
                .unwrap_or(cols.div_ceil(32) * self.block_bytes()),
        }
    }

    /// Bytes of a packed (rows, cols) matrix; `None` on overflow.
    pub fn packed_size(self, rows: usize, cols: usize) -> Option<usize> {
        if self.is_exact() {
            return crate::native::packed_size(self, rows, cols);
        }
        rows.checked_mul(self.row_bytes(cols))
    }

    /// The byte-shuffle table of grid values the kernels use.
    pub fn grid(self) -> &'static [i8; 16] {
        match self {
            Format::Q3 => &q3::GRID_Q3,
            Format::Q3Rtn => &q3::GRID_Q3_RTN,
            Format::Q4 => &q4::GRID_Q4,
            Format::Q8
            | Format::Bf16
            | Format::F32
            | Format::Fp8Block128
            | Format::Int4G32
            | Format::Mxfp4
            | Format::Q3Tcq
            | Format::Ggml(_) => &[0; 16],
        }
    }

    /// Whether [`quantize`] can produce this format from f32 values: every
    /// block format, and the plain native `bf16` and `f32`. The scaled native
    /// formats exist only as a release stored them.
    pub fn has_quantizer(self) -> bool {
        !matches!(
            self,
            Format::Fp8Block128 | Format::Int4G32 | Format::Mxfp4 | Format::Ggml(_)
        )
    }

    /// Quantizes one row into its blocks; returns the squared error.
    fn quantize_row(self, w: &[f32], out: &mut [u8]) -> f64 {
        match self {
            Format::Q3 => q3::quantize_row(&q3::GRID_Q3, scale::SEARCH_WINDOW, w, out),
            Format::Q3Rtn => q3::quantize_row(&q3::GRID_Q3_RTN, 0, w, out),
            Format::Q4 => q4::quantize_row(w, out),
            Format::Q8 => q8::quantize_row(w, out),
            Format::Q3Tcq => q3tcq::quantize_row(w, out),
            native => crate::native::encode_row(native, w, out),
        }
    }

    /// Dequantizes one row of a block format.
    pub(crate) fn dequantize_row(self, row: &[u8], out: &mut [f32]) {
        match self {
            Format::Q3 | Format::Q3Rtn => q3::dequantize_row(self.grid(), row, out),
            Format::Q4 => q4::dequantize_row(row, out),
            Format::Q8 => q8::dequantize_row(row, out),
            Format::Q3Tcq => q3tcq::dequantize_row(row, out),
            native => unreachable!("{native} rows decode through crate::native"),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Format> {
        Format::every()
            .find(|f| f.name() == s)
            .ok_or_else(|| Error::UnknownFormat {
                what: format!("name {s:?}"),
            })
    }
}

/// A quantized matrix with its reconstruction error.
#[derive(Debug, Clone)]
pub struct Quantized {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    /// The packed form, every byte of it (see [`Format::packed_size`]).
    pub bytes: Vec<u8>,
    /// `||W - Q(W)||²_F`, f64.
    pub sq_error: f64,
    /// `||W||²_F`, f64.
    pub sq_norm: f64,
}

impl Quantized {
    /// `||W - Q(W)||_F / ||W||_F` (0 for an all-zero matrix).
    pub fn rel_error(&self) -> f64 {
        if self.sq_norm > 0.0 {
            (self.sq_error / self.sq_norm).sqrt()
        } else {
            0.0
        }
    }

    /// `8 · packed bytes / elements`.
    pub fn bits_per_weight(&self) -> f64 {
        8.0 * self.bytes.len() as f64 / (self.rows * self.cols).max(1) as f64
    }

    /// A view for products and dequantization.
    pub fn matrix(&self) -> PackedMatrix<'_> {
        PackedMatrix {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            bytes: &self.bytes,
            layout: RowLayout::RowMajor,
        }
    }
}

/// Quantizes `w`, (rows, cols) row-major, to `format`. Parallel over rows;
/// deterministic (bytes and error do not depend on the thread count).
/// Errors for the native formats that have no quantizer
/// ([`Format::has_quantizer`]).
pub fn quantize(format: Format, rows: usize, cols: usize, w: &[f32]) -> Result<Quantized> {
    if !format.has_quantizer() {
        return Err(Error::NoQuantizer {
            format: format.name(),
        });
    }
    if rows.checked_mul(cols) != Some(w.len()) {
        return Err(Error::ShapeMismatch {
            shape: vec![rows, cols],
            len: w.len(),
            expected: rows.saturating_mul(cols),
        });
    }
    let row_bytes = format.row_bytes(cols);
    let mut bytes = vec![0u8; rows * row_bytes];
    if cols == 0 {
        return Ok(Quantized {
            format,
            rows,
            cols,
            bytes,
            sq_error: 0.0,
            sq_norm: 0.0,
        });
    }
    let errs: Vec<(f64, f64)> = bytes
        .par_chunks_mut(row_bytes.max(1))
        .zip(w.par_chunks(cols))
        .map(|(out, row)| {
            let norm = row.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            (format.quantize_row(row, out), norm)
        })
        .collect();
    let (sq_error, sq_norm) = errs
        .iter()
        .fold((0.0, 0.0), |(e, n), (re, rn)| (e + re, n + rn));
    Ok(Quantized {
        format,
        rows,
        cols,
        bytes,
        sq_error,
        sq_norm,
    })
}

/// A packed (rows, cols) matrix borrowed from its bytes, length-checked.
#[derive(Debug, Clone, Copy)]
pub struct PackedMatrix<'a> {
    format: Format,
    rows: usize,
    cols: usize,
    bytes: &'a [u8],
    /// The order of a ggml matrix's rows (row-major for every other format).
    layout: RowLayout,
}

impl<'a> PackedMatrix<'a> {
    /// Checks that `bytes` is exactly the packed size of the shape.
    pub fn new(format: Format, rows: usize, cols: usize, bytes: &'a [u8]) -> Result<Self> {
        let expected = format.packed_size(rows, cols);
        if expected != Some(bytes.len()) {
            return Err(Error::PackedSize {
                format: format.name(),
                rows,
                cols,
                expected: expected.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        Ok(Self {
            format,
            rows,
            cols,
            bytes,
            layout: RowLayout::RowMajor,
        })
    }

    /// [`PackedMatrix::new`] on rows laid as `layout`: other than
    /// row-major only as a ggml type's [`crate::ggml::layout::interleaving`].
    pub fn with_layout(
        format: Format,
        rows: usize,
        cols: usize,
        bytes: &'a [u8],
        layout: RowLayout,
    ) -> Result<Self> {
        let m = Self::new(format, rows, cols, bytes)?;
        match (layout, format) {
            (RowLayout::RowMajor, _) => Ok(m),
            (_, Format::Ggml(t)) if crate::ggml::layout::lays(t, layout) => {
                Ok(Self { layout, ..m })
            }
            _ => Err(Error::UnknownFormat {
                what: format!("{} rows laid {layout:?}", format.name()),
            }),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn layout(&self) -> RowLayout {
        self.layout
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The packed bytes of row `r`, gathered into a new buffer where the
    /// rows are interleaved ([`RowLayout`]).
    pub fn row_in_order(&self, r: usize) -> std::borrow::Cow<'a, [u8]> {
        if self.layout == RowLayout::RowMajor {
            return std::borrow::Cow::Borrowed(self.row(r));
        }
        let (rb, bs) = (self.format.row_bytes(self.cols), self.format.block_bytes());
        crate::ggml::layout::row_of(self.layout, self.bytes, r, rb, bs)
    }

    /// The packed bytes of row `r`. Panics on interleaved rows.
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert_eq!(
            self.layout,
            RowLayout::RowMajor,
            "row {r} of interleaved rows"
        );
        let rb = self.format.row_bytes(self.cols);
        &self.bytes[r * rb..(r + 1) * rb]
    }

    /// The f32 values, (rows, cols), into `out`.
    pub fn dequantize_into(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.rows * self.cols {
            return Err(Error::DimMismatch {
                what: "dequantize output",
                expected: self.rows * self.cols,
                got: out.len(),
            });
        }
        if self.layout != RowLayout::RowMajor {
            let (rb, bs) = (self.format.row_bytes(self.cols), self.format.block_bytes());
            let mut in_order = Vec::new();
            crate::ggml::layout::to_row_major_into(self.layout, self.bytes, rb, bs, &mut in_order);
            return PackedMatrix::new(self.format, self.rows, self.cols, &in_order)?
                .dequantize_into(out);
        }
        if self.cols > 0 {
            out.par_chunks_mut(self.cols)
                .enumerate()
                .for_each(|(r, o)| {
                    if self.format.is_exact() {
                        crate::native::decode_row(self, r, o);
                    } else {
                        self.format.dequantize_row(self.row(r), o);
                    }
                });
        }
        Ok(())
    }

    /// The f32 values, (rows, cols).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        self.dequantize_into(&mut out)
            .expect("output sized to the matrix");
        out
    }

    /// `out = x · selfᵀ` for `n` rows: x is (n, cols), out is (n, rows).
    /// Activations are quantized to int8 per 32, except for the native
    /// formats, whose rows decode exactly and meet the f32 activations
    /// (`crate::native`), and ggml types with an integer kernel, which
    /// quantize them as llama.cpp does (`crate::ggml::dot`); rows run in
    /// parallel.
    pub fn matmul(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        if x.len() != n * self.cols {
            return Err(Error::DimMismatch {
                what: "matmul input",
                expected: n * self.cols,
                got: x.len(),
            });
        }
        if self.format.is_exact() {
            if out.len() != n * self.rows {
                return Err(Error::DimMismatch {
                    what: "matmul output",
                    expected: n * self.rows,
                    got: out.len(),
                });
            }
            if self.format == Format::Q3Tcq {
                let acts = self.format.quantized_acts(x, n, self.cols);
                crate::par::matmul_par(kernels(), self, &acts, out);
                return Ok(());
            }
            if let Format::Ggml(t) = self.format
                && crate::ggml::dot::has_kernel(t)
            {
                return crate::ggml::dot::matmul_laid(
                    crate::ggml::dot::kernels(),
                    t,
                    self.layout,
                    self.rows,
                    self.cols,
                    self.bytes,
                    x,
                    n,
                    out,
                );
            }
            crate::par::matmul_exact_par(kernels(), self, x, n, out);
            return Ok(());
        }
        let acts = QuantizedActs::new(x, n, self.cols);
        self.matmul_acts(&acts, out)
    }

    /// Like [`PackedMatrix::matmul`] on activations already quantized.
    /// Errors for a native format: its products take f32 activations.
    pub fn matmul_acts(&self, acts: &QuantizedActs, out: &mut [f32]) -> Result<()> {
        if self.format.is_exact() {
            return Err(Error::ExactFormat {
                format: self.format.name(),
            });
        }
        if acts.cols != self.cols {
            return Err(Error::DimMismatch {
                what: "matmul activation width",
                expected: self.cols,
                got: acts.cols,
            });
        }
        if out.len() != acts.n * self.rows {
            return Err(Error::DimMismatch {
                what: "matmul output",
                expected: acts.n * self.rows,
                got: out.len(),
            });
        }
        crate::par::matmul_par(kernels(), self, acts, out);
        Ok(())
    }
}

/// Dequantizes packed bytes of `format` and shape (rows, cols).
pub fn dequantize(format: Format, rows: usize, cols: usize, bytes: &[u8]) -> Result<Vec<f32>> {
    Ok(PackedMatrix::new(format, rows, cols, bytes)?.dequantize())
}
