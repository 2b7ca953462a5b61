//! The packed expert record: one routed expert's gate, up and down matrices
//! in one contiguous byte record with a 64-byte header, consumed in place by
//! [`PackedExpert`] (an [`ExpertFfn`]). The store writes exactly these bytes,
//! 4 KiB-aligned on disk, one read per expert; docs/FORMAT.md specifies them.
//! Parsing is bounds-checked: bytes from disk or the network never panic.
//! Does not own where records live (waste-format does).

use std::ops::Range;

use crate::ggml::layout::{self, RowLayout};
use crate::quant::{Format, PackedMatrix, Quantized, QuantizedActs, quantize};
use crate::stash::{Reuse, Stash};
use crate::{Activation, Error, ExpertFfn, Result};

/// Record magic, bytes 0..4.
pub const MAGIC: [u8; 4] = *b"WEXP";
/// Major version: a reader refuses any other.
pub const MAJOR: u16 = 1;
/// Minor version: a reader refuses a newer one. 1 adds [`INTERLEAVED`]
/// components of Q4_0 and IQ4_NL, 2 those of Q4_K and IQ4_XS; a record is
/// written with the least minor that reads it ([`minor_for`]).
pub const MINOR: u16 = 2;
/// Flag bit `i` (`INTERLEAVED << i`): component `i`'s rows are laid as
/// its ggml type's [`layout::interleaving`].
pub const INTERLEAVED: u16 = 1;

/// The least record minor whose readers know rows laid as `layout`.
fn minor_for(layout: RowLayout) -> u16 {
    match layout {
        RowLayout::RowMajor => 0,
        RowLayout::Interleaved16 => 1,
        RowLayout::Words16 => 2,
    }
}

/// Header bytes; each matrix starts at a multiple of [`ALIGN`] after it.
pub const HEADER_BYTES: usize = 64;
/// Alignment of each matrix inside the record (a cache line).
pub const ALIGN: usize = 64;

/// The record header, little-endian. Component `i` (0 gate, 1 up, 2 down)
/// is `formats[i]`-packed at `bytes[offsets[i]..offsets[i] + lens[i]]`;
/// gate and up are (d_ff, d_model), down is (d_model, d_ff).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`MAGIC`].
    pub magic: [u8; 4],
    /// [`MAJOR`].
    pub major: u16,
    /// [`MINOR`].
    pub minor: u16,
    /// Width of the expert's input and output rows.
    pub d_model: u32,
    /// Width of its gated hidden layer.
    pub d_ff: u32,
    /// [`Format::id`] of gate, up, down.
    pub formats: [u16; 3],
    /// Bit `i`: component `i` is interleaved ([`INTERLEAVED`]); the
    /// others zero.
    pub flags: u16,
    /// Byte offsets of gate, up, down from the record start; multiples of [`ALIGN`].
    pub offsets: [u32; 3],
    /// Packed byte lengths of gate, up, down.
    pub lens: [u32; 3],
    /// Zero (reserved).
    pub reserved: [u8; 16],
}
const _: () = assert!(size_of::<RecordHeader>() == HEADER_BYTES);

fn bad(what: impl Into<String>, offset: usize) -> Error {
    Error::BadRecord {
        what: what.into(),
        offset,
    }
}

impl RecordHeader {
    /// Little-endian bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&self.magic);
        b[4..6].copy_from_slice(&self.major.to_le_bytes());
        b[6..8].copy_from_slice(&self.minor.to_le_bytes());
        b[8..12].copy_from_slice(&self.d_model.to_le_bytes());
        b[12..16].copy_from_slice(&self.d_ff.to_le_bytes());
        for i in 0..3 {
            b[16 + 2 * i..18 + 2 * i].copy_from_slice(&self.formats[i].to_le_bytes());
            b[24 + 4 * i..28 + 4 * i].copy_from_slice(&self.offsets[i].to_le_bytes());
            b[36 + 4 * i..40 + 4 * i].copy_from_slice(&self.lens[i].to_le_bytes());
        }
        b[22..24].copy_from_slice(&self.flags.to_le_bytes());
        b[48..64].copy_from_slice(&self.reserved);
        b
    }

    /// Parses the first [`HEADER_BYTES`] of `b`; checks magic and version only.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let h = b
            .get(..HEADER_BYTES)
            .ok_or_else(|| bad(format!("{} bytes, header needs {HEADER_BYTES}", b.len()), 0))?;
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let header = Self {
            magic: [h[0], h[1], h[2], h[3]],
            major: u16_at(4),
            minor: u16_at(6),
            d_model: u32_at(8),
            d_ff: u32_at(12),
            formats: [u16_at(16), u16_at(18), u16_at(20)],
            flags: u16_at(22),
            offsets: [u32_at(24), u32_at(28), u32_at(32)],
            lens: [u32_at(36), u32_at(40), u32_at(44)],
            reserved: h[48..64].try_into().expect("16 bytes"),
        };
        if header.magic != MAGIC {
            return Err(bad(
                format!("magic {:?}, expected {MAGIC:?}", header.magic),
                0,
            ));
        }
        if header.major != MAJOR || header.minor > MINOR {
            return Err(bad(
                format!(
                    "version {}.{}, this reader knows {MAJOR}.{MINOR}",
                    header.major, header.minor
                ),
                4,
            ));
        }
        Ok(header)
    }
}

/// A named choice of formats for an expert's (gate, up, down). A mixed
/// recipe has its own name; `q3` is uniform. Names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// Every matrix `q3` (3.25 bpw).
    Q3,
    /// gate and up `q3`, down_proj `q4` (3.58 bpw): for models whose
    /// down projections are sensitive.
    Q3Q4Down,
    /// gate and up `q3-tcq`, down_proj `q4` (3.58 bpw): the trellis where
    /// it gains most (on SmolLM2's FFN it halves gate's and up's KL and
    /// leaves down's as `q3`'s), `q4` on the down projection, the most
    /// sensitive of the three (docs/QUANT.md).
    Q3TcqQ4Down,
    /// Every matrix `q4` (4.25 bpw).
    Q4,
    /// Every matrix `q8` (8.5 bpw).
    Q8,
}

impl Recipe {
    pub const ALL: [Recipe; 5] = [
        Recipe::Q3,
        Recipe::Q3Q4Down,
        Recipe::Q3TcqQ4Down,
        Recipe::Q4,
        Recipe::Q8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Recipe::Q3 => "q3",
            Recipe::Q3Q4Down => "q3-q4down",
            Recipe::Q3TcqQ4Down => "q3-tcq-q4down",
            Recipe::Q4 => "q4",
            Recipe::Q8 => "q8",
        }
    }

    /// Formats of gate, up, down.
    pub fn formats(self) -> [Format; 3] {
        match self {
            Recipe::Q3 => [Format::Q3; 3],
            Recipe::Q3Q4Down => [Format::Q3, Format::Q3, Format::Q4],
            Recipe::Q3TcqQ4Down => [Format::Q3Tcq, Format::Q3Tcq, Format::Q4],
            Recipe::Q4 => [Format::Q4; 3],
            Recipe::Q8 => [Format::Q8; 3],
        }
    }
}

impl std::str::FromStr for Recipe {
    type Err = Error;

    fn from_str(s: &str) -> Result<Recipe> {
        Recipe::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| Error::UnknownFormat {
                what: format!("expert recipe {s:?}"),
            })
    }
}

/// Per-thread buffers of [`PackedExpert::forward`].
#[derive(Debug, Default)]
struct Scratch {
    acts: QuantizedActs,
    g: Vec<f32>,
    u: Vec<f32>,
}

thread_local! {
    static SCRATCH: Stash<Scratch> = const { Stash::new() };
}

/// Bytes of the record [`build_record`] writes for these formats and shape
/// (the store's stride for a layer is this rounded up to its alignment);
/// `None` on overflow.
pub fn record_len(formats: [Format; 3], d_model: usize, d_ff: usize) -> Option<usize> {
    let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
    formats
        .iter()
        .zip(shapes)
        .try_fold(HEADER_BYTES, |len, (f, (r, c))| {
            len.checked_add(f.packed_size(r, c)?)?
                .checked_next_multiple_of(ALIGN)
        })
}

/// Builds a record from three quantized matrices: gate and up (d_ff, d_model),
/// down (d_model, d_ff). Its length is a multiple of [`ALIGN`].
pub fn build_record(gate: &Quantized, up: &Quantized, down: &Quantized) -> Result<Vec<u8>> {
    let (d_ff, d_model) = (gate.rows, gate.cols);
    for (what, q, shape) in [
        ("up_proj", up, (d_ff, d_model)),
        ("down_proj", down, (d_model, d_ff)),
    ] {
        if (q.rows, q.cols) != shape {
            return Err(Error::DimMismatch {
                what,
                expected: shape.0 * shape.1,
                got: q.rows * q.cols,
            });
        }
    }
    build_record_raw(
        d_model,
        d_ff,
        [
            (gate.format, &gate.bytes),
            (up.format, &up.bytes),
            (down.format, &down.bytes),
        ],
    )
}

/// Builds a record from the packed bytes of gate and up (d_ff, d_model) and
/// down (d_model, d_ff) in any formats, e.g. a release's own (native) bytes;
/// each length must be its format's packed size. Its length is a multiple
/// of [`ALIGN`]. Row-major matrices of a ggml type with an
/// [`layout::interleaving`] and a group of rows or more are written so
/// ([`INTERLEAVED`]), what the sixteen-row kernels read as one stream.
pub fn build_record_raw(
    d_model: usize,
    d_ff: usize,
    parts: [(Format, &[u8]); 3],
) -> Result<Vec<u8>> {
    let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
    for ((format, bytes), (rows, cols)) in parts.iter().zip(shapes) {
        PackedMatrix::new(*format, rows, cols, bytes)?;
    }
    let too_big = |v: usize| {
        u32::try_from(v).map_err(|_| bad(format!("{v} does not fit the record's u32 fields"), 0))
    };
    let mut bytes = vec![0u8; HEADER_BYTES];
    let (mut offsets, mut lens, mut formats) = ([0u32; 3], [0u32; 3], [0u16; 3]);
    let (mut flags, mut minor) = (0, 0);
    for (i, (format, part)) in parts.into_iter().enumerate() {
        offsets[i] = too_big(bytes.len())?;
        lens[i] = too_big(part.len())?;
        formats[i] = format.id();
        let rows = shapes[i].0;
        let laid = match format {
            Format::Ggml(t) => layout::for_rows(t, rows),
            _ => RowLayout::RowMajor,
        };
        if laid == RowLayout::RowMajor {
            bytes.extend_from_slice(part);
        } else {
            let (rb, bs) = (format.row_bytes(shapes[i].1), format.block_bytes());
            bytes.extend_from_slice(&layout::lay_out(laid, part, rows, rb, bs));
            flags |= INTERLEAVED << i;
            minor = minor.max(minor_for(laid));
        }
        bytes.resize(bytes.len().next_multiple_of(ALIGN), 0);
    }
    let header = RecordHeader {
        magic: MAGIC,
        major: MAJOR,
        minor,
        d_model: too_big(d_model)?,
        d_ff: too_big(d_ff)?,
        formats,
        flags,
        offsets,
        lens,
        reserved: [0; 16],
    };
    bytes[..HEADER_BYTES].copy_from_slice(&header.to_bytes());
    Ok(bytes)
}

/// Quantizes one expert (HF layouts: gate, up (d_ff, d_model), down
/// (d_model, d_ff)) into a record; returns it with the three quantizations'
/// relative errors.
pub fn quantize_expert(
    formats: [Format; 3],
    d_model: usize,
    d_ff: usize,
    gate: &[f32],
    up: &[f32],
    down: &[f32],
) -> Result<(Vec<u8>, [f64; 3])> {
    let g = quantize(formats[0], d_ff, d_model, gate)?;
    let u = quantize(formats[1], d_ff, d_model, up)?;
    let d = quantize(formats[2], d_model, d_ff, down)?;
    Ok((
        build_record(&g, &u, &d)?,
        [g.rel_error(), u.rel_error(), d.rel_error()],
    ))
}

/// One expert applied in place from its record bytes (`B` = `&[u8]`,
/// `Vec<u8>`, `Arc<[u8]>`, an aligned IO buffer…).
#[derive(Debug, Clone)]
pub struct PackedExpert<B> {
    bytes: B,
    header: RecordHeader,
    formats: [Format; 3],
    layouts: [RowLayout; 3],
    ranges: [Range<usize>; 3],
}

impl<B: AsRef<[u8]>> PackedExpert<B> {
    /// Validates the header and every offset and length against `bytes`.
    pub fn parse(bytes: B) -> Result<Self> {
        let b = bytes.as_ref();
        let header = RecordHeader::from_bytes(b)?;
        let (d_model, d_ff) = (header.d_model as usize, header.d_ff as usize);
        if d_model == 0 || d_ff == 0 {
            return Err(bad(format!("empty expert {d_model}x{d_ff}"), 8));
        }
        let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
        if header.flags >> 3 != 0 {
            return Err(bad(
                format!("flags {:#x}: bits above 2 set", header.flags),
                22,
            ));
        }
        let mut formats = [Format::Q3; 3];
        let mut layouts = [RowLayout::RowMajor; 3];
        let mut ranges: [Range<usize>; 3] = Default::default();
        for i in 0..3 {
            formats[i] =
                Format::from_id(header.formats[i]).map_err(|e| bad(e.to_string(), 16 + 2 * i))?;
            if header.flags & (INTERLEAVED << i) != 0 {
                let laid = match formats[i] {
                    Format::Ggml(t) => layout::interleaving(t),
                    _ => None,
                };
                let Some(laid) = laid.filter(|&l| minor_for(l) <= header.minor) else {
                    return Err(bad(
                        format!(
                            "component {i} ({}) flagged interleaved in a record of minor {}",
                            formats[i].name(),
                            header.minor
                        ),
                        22,
                    ));
                };
                layouts[i] = laid;
            }
            let (off, len) = (header.offsets[i] as usize, header.lens[i] as usize);
            let want = formats[i].packed_size(shapes[i].0, shapes[i].1);
            if want != Some(len) {
                return Err(bad(
                    format!("component {i} holds {len} bytes, its shape needs {want:?}"),
                    36 + 4 * i,
                ));
            }
            let end = off
                .checked_add(len)
                .filter(|&e| off >= HEADER_BYTES && e <= b.len());
            let Some(end) = end else {
                return Err(bad(
                    format!(
                        "component {i} at {off}+{len} outside the {}-byte record",
                        b.len()
                    ),
                    24 + 4 * i,
                ));
            };
            ranges[i] = off..end;
        }
        Ok(Self {
            bytes,
            header,
            formats,
            layouts,
            ranges,
        })
    }

    pub fn header(&self) -> &RecordHeader {
        &self.header
    }

    /// What holds the record bytes.
    pub fn storage(&self) -> &B {
        &self.bytes
    }

    /// The record bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    fn matrix(&self, i: usize) -> PackedMatrix<'_> {
        let (d_model, d_ff) = (self.header.d_model as usize, self.header.d_ff as usize);
        let (rows, cols) = if i == 2 {
            (d_model, d_ff)
        } else {
            (d_ff, d_model)
        };
        PackedMatrix::with_layout(
            self.formats[i],
            rows,
            cols,
            &self.bytes.as_ref()[self.ranges[i].clone()],
            self.layouts[i],
        )
        .expect("validated by parse")
    }

    /// gate_proj, (d_ff, d_model).
    pub fn gate(&self) -> PackedMatrix<'_> {
        self.matrix(0)
    }

    /// up_proj, (d_ff, d_model).
    pub fn up(&self) -> PackedMatrix<'_> {
        self.matrix(1)
    }

    /// down_proj, (d_model, d_ff).
    pub fn down(&self) -> PackedMatrix<'_> {
        self.matrix(2)
    }
}

impl<B: AsRef<[u8]> + Send + Sync> ExpertFfn for PackedExpert<B> {
    fn d_model(&self) -> usize {
        self.header.d_model as usize
    }

    fn d_ff(&self) -> usize {
        self.header.d_ff as usize
    }

    fn size_bytes(&self) -> usize {
        self.bytes.as_ref().len()
    }

    fn forward(&self, x: &[f32], n: usize, act: Activation, out: &mut [f32]) -> Result<()> {
        let (d_model, d_ff) = (self.d_model(), self.d_ff());
        if x.len() != n * d_model || out.len() != n * d_model {
            return Err(Error::DimMismatch {
                what: "expert input/output",
                expected: n * d_model,
                got: x.len().min(out.len()),
            });
        }
        // Scratch reused across calls on this thread, a nested call (rayon
        // work stealing) its own. Native components (exact formats) take
        // the f32 rows directly.
        let mut s = SCRATCH.take_one();
        let [gate_exact, up_exact, down_exact] = self.formats.map(Format::is_exact);
        s.g.resize(n * d_ff, 0.0); // (n, d_ff)
        s.u.resize(n * d_ff, 0.0); // (n, d_ff)
        let result = (|| {
            if !(gate_exact && up_exact) {
                s.acts.quantize_from(x, n, d_model);
            }
            if gate_exact {
                self.gate().matmul(x, n, &mut s.g)?;
            } else {
                self.gate().matmul_acts(&s.acts, &mut s.g)?;
            }
            if up_exact {
                self.up().matmul(x, n, &mut s.u)?;
            } else {
                self.up().matmul_acts(&s.acts, &mut s.u)?;
            }
            act.glu_rows(&mut s.g, &s.u);
            if down_exact {
                return self.down().matmul(&s.g, n, out);
            }
            s.acts.quantize_from(&s.g, n, d_ff);
            self.down().matmul_acts(&s.acts, out)
        })();
        SCRATCH.give_back(s);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DenseExpert, Matrix};

    fn values(len: usize, off: f32, scale: f32) -> Vec<f32> {
        (0..len)
            .map(|i| scale * ((i as f32 * 0.61 + off).sin() + 0.3 * (i as f32 * 1.7).cos()))
            .collect()
    }

    fn record(
        formats: [Format; 3],
        d_model: usize,
        d_ff: usize,
    ) -> (Vec<u8>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let (g, u, d) = (
            values(d_ff * d_model, 0.1, 0.05),
            values(d_ff * d_model, 0.7, 0.05),
            values(d_model * d_ff, 1.3, 0.05),
        );
        let (rec, _) = quantize_expert(formats, d_model, d_ff, &g, &u, &d).unwrap();
        (rec, g, u, d)
    }

    /// The dense f32 expert of `e`'s dequantized weights.
    fn dense_of(e: &PackedExpert<&[u8]>) -> DenseExpert {
        let f32_of = |m: PackedMatrix<'_>| Matrix::f32(m.rows(), m.cols(), m.dequantize()).unwrap();
        DenseExpert::new(f32_of(e.gate()), f32_of(e.up()), f32_of(e.down())).unwrap()
    }

    /// `record`'s expert of `formats` and the dense f32 expert of its
    /// dequantized weights run on the same `n` activation rows: (the
    /// record, the activations, its output, the dense expert's).
    fn run_both(
        formats: [Format; 3],
        d_model: usize,
        d_ff: usize,
        n: usize,
    ) -> (Vec<u8>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let (rec, ..) = record(formats, d_model, d_ff);
        assert_eq!(Some(rec.len()), record_len(formats, d_model, d_ff));
        let e = PackedExpert::parse(&rec[..]).unwrap();
        let dense = dense_of(&e);
        let x = values(n * d_model, 2.0, 1.0);
        let (mut got, mut want) = (vec![0f32; n * d_model], vec![0f32; n * d_model]);
        e.forward(&x, n, Activation::Silu, &mut got).unwrap();
        dense.forward(&x, n, Activation::Silu, &mut want).unwrap();
        (rec, x, got, want)
    }

    /// `‖a - b‖ / ‖b‖`.
    fn rel(a: &[f32], b: &[f32]) -> f64 {
        let d: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        (d / b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>()).sqrt()
    }

    #[test]
    fn forward_matches_the_dense_expert_of_its_dequantized_weights() {
        for (formats, d_model, d_ff, n) in [
            ([Format::Q3; 3], 64, 96, 1),
            ([Format::Q3, Format::Q3, Format::Q4], 100, 40, 3),
            ([Format::Q8; 3], 33, 7, 5),
        ] {
            let (rec, x, got, want) = run_both(formats, d_model, d_ff, n);
            assert_eq!(rec.len() % ALIGN, 0);
            let e = PackedExpert::parse(&rec[..]).unwrap();
            // The dense f32 path differs only by the int8 activations.
            assert!(
                rel(&got, &want) <= 0.05,
                "{formats:?}: {} vs dense",
                rel(&got, &want)
            );
            // Exactly: f64 products of the dequantized weights and the
            // int8-dequantized activations at each of the two stages.
            let deq_acts = |v: &[f32], cols: usize| {
                let a = QuantizedActs::new(v, n, cols);
                (0..n * cols)
                    .map(|i| {
                        f64::from(a.qs[(i / cols) * a.blocks * 32 + i % cols])
                            * f64::from(a.d[(i / cols) * a.blocks + (i % cols) / 32])
                    })
                    .collect::<Vec<f64>>()
            };
            let mv = |w: &[f32], rows: usize, cols: usize, v: &[f64]| {
                (0..n * rows)
                    .map(|i| {
                        (0..cols)
                            .map(|c| f64::from(w[(i % rows) * cols + c]) * v[(i / rows) * cols + c])
                            .sum::<f64>()
                    })
                    .collect::<Vec<f64>>()
            };
            let xq = deq_acts(&x, d_model);
            let (g, u) = (
                mv(&e.gate().dequantize(), d_ff, d_model, &xq),
                mv(&e.up().dequantize(), d_ff, d_model, &xq),
            );
            let h: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| Activation::Silu.glu(*g as f32, *u as f32))
                .collect();
            let exact: Vec<f32> = mv(&e.down().dequantize(), d_model, d_ff, &deq_acts(&h, d_ff))
                .iter()
                .map(|v| *v as f32)
                .collect();
            assert!(
                rel(&got, &exact) <= 1e-3,
                "{formats:?}: {} vs exact",
                rel(&got, &exact)
            );
        }
    }

    /// A recipe that mixes a rotated format (gate and up `q3-tcq`, rotated
    /// int8 activations) with a plain one (down `q4`): each component
    /// takes its own activations, and the expert stays within the int8
    /// rounding of the dense expert of its dequantized weights.
    #[test]
    fn a_trellis_recipe_matches_the_dense_expert_of_its_dequantized_weights() {
        let formats = Recipe::Q3TcqQ4Down.formats();
        for (d_model, d_ff, n) in [(96, 64, 1), (576, 160, 3)] {
            let (_, _, got, want) = run_both(formats, d_model, d_ff, n);
            let r = rel(&got, &want);
            assert!(r <= 0.05, "{d_model}x{d_ff} n={n}: {r} vs dense");
        }
    }

    #[test]
    fn recipes_have_stable_names() {
        for r in Recipe::ALL {
            assert_eq!(r.name().parse::<Recipe>().unwrap(), r);
        }
        assert_eq!(Recipe::Q3Q4Down.formats()[2], Format::Q4);
        assert!("q3-q5".parse::<Recipe>().is_err());
    }

    #[test]
    fn header_round_trips_and_versions_are_checked() {
        let (rec, ..) = record([Format::Q3; 3], 64, 32);
        let h = RecordHeader::from_bytes(&rec).unwrap();
        assert_eq!(h.to_bytes()[..], rec[..HEADER_BYTES]);
        assert_eq!((h.d_model, h.d_ff, h.formats), (64, 32, [1, 1, 1]));
        // The DeepSeek-V3 / Kimi K2 example of docs/FORMAT.md.
        assert_eq!(record_len([Format::Q3; 3], 7168, 2048), Some(17_891_392));
        assert_eq!(record_len([Format::Q3; 3], usize::MAX, 2), None);
        let mut newer = rec.clone();
        newer[6..8].copy_from_slice(&(MINOR + 1).to_le_bytes());
        assert!(PackedExpert::parse(&newer[..]).is_err());
        // flags: only the interleaved bits, and only on the types that
        // interleave (these are q3 matrices)
        for flags in [1u16, 4, 8, 0x100] {
            let mut flagged = rec.clone();
            flagged[22..24].copy_from_slice(&flags.to_le_bytes());
            assert!(
                PackedExpert::parse(&flagged[..]).is_err(),
                "flags {flags:#x}"
            );
        }
        let mut other = rec.clone();
        other[4] = 2; // major 2
        assert!(PackedExpert::parse(&other[..]).is_err());
    }

    /// Q4_0 and IQ4_NL matrices of a group of rows or more are written
    /// interleaved and flagged (minor 1), others as given (minor 0); each
    /// reads back as the rows it was built from, and the expert computes
    /// what the same weights in f32 compute, within the activations'
    /// rounding.
    #[test]
    fn nibble_matrices_are_written_interleaved_and_read_back_as_their_rows() {
        use crate::ggml::GgmlType;
        let (d_model, d_ff) = (64, 40);
        let mut seed = 7u64;
        let mut blocks = |ty: GgmlType, rows: usize, cols: usize| -> Vec<u8> {
            let (qk, bs) = ty.block().unwrap();
            let mut b: Vec<u8> = (0..rows * cols / qk * bs)
                .map(|_| {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            for blk in b.chunks_exact_mut(bs) {
                blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
            }
            b
        };
        let (q4_0, iq4_nl) = (Format::Ggml(GgmlType::Q4_0), Format::Ggml(GgmlType::IQ4_NL));
        let gate = blocks(GgmlType::Q4_0, d_ff, d_model);
        let up = blocks(GgmlType::IQ4_NL, d_ff, d_model);
        // d_ff is not whole Q8_0 blocks: down in f32
        let down: Vec<u8> = values(d_model * d_ff, 0.5, 0.1)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let parts = [
            (q4_0, &gate[..]),
            (iq4_nl, &up[..]),
            (Format::F32, &down[..]),
        ];
        let rec = build_record_raw(d_model, d_ff, parts).unwrap();
        let h = RecordHeader::from_bytes(&rec).unwrap();
        assert_eq!((h.flags, h.minor), (0b011, 1));
        let e = PackedExpert::parse(&rec[..]).unwrap();
        assert_ne!(
            &rec[h.offsets[0] as usize..][..gate.len()],
            &gate[..],
            "moved"
        );
        for (m, (f, bytes, rows, cols)) in [e.gate(), e.up(), e.down()].iter().zip([
            (q4_0, &gate, d_ff, d_model),
            (iq4_nl, &up, d_ff, d_model),
            (Format::F32, &down, d_model, d_ff),
        ]) {
            let rows_in_order = PackedMatrix::new(f, rows, cols, bytes)
                .unwrap()
                .dequantize();
            assert_eq!(m.dequantize(), rows_in_order, "{}", f.name());
        }
        let f32_expert = dense_of(&e);
        let x: Vec<f32> = (0..2 * d_model)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let (mut got, mut want) = (vec![0f32; 2 * d_model], vec![0f32; 2 * d_model]);
        e.forward(&x, 2, Activation::Silu, &mut got).unwrap();
        f32_expert
            .forward(&x, 2, Activation::Silu, &mut want)
            .unwrap();
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 0.05 * scale, "{g} vs {w} (scale {scale})");
        }
        // fewer rows than a group: nothing to interleave
        let f32_down = vec![0u8; 32 * 8 * 4];
        let small = build_record_raw(
            32,
            8,
            [
                (q4_0, &blocks(GgmlType::Q4_0, 8, 32)[..]),
                (q4_0, &blocks(GgmlType::Q4_0, 8, 32)[..]),
                (Format::F32, &f32_down[..]),
            ],
        )
        .unwrap();
        let h = RecordHeader::from_bytes(&small).unwrap();
        assert_eq!((h.flags, h.minor), (0, 0));
    }

    /// Q4_K matrices of a group of rows or more are written word-major by
    /// sixteen and flagged in a record of minor 2, read back as the rows
    /// they were built from; the same flag in a record of minor 1 (whose
    /// readers know only Q4_0's and IQ4_NL's layout) is refused.
    #[test]
    fn q4_k_matrices_are_written_word_major_in_a_minor_2_record() {
        use crate::ggml::GgmlType;
        let (d_model, d_ff) = (256, 48);
        let q4_k = Format::Ggml(GgmlType::Q4_K);
        let gate: Vec<u8> = (0..q4_k.packed_size(d_ff, d_model).unwrap())
            .map(|i| (i * 131 % 251) as u8)
            .map(|b| b & 0x3b) // finite f16 scales
            .collect();
        let up: Vec<u8> = values(d_ff * d_model, 0.5, 0.3)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let down: Vec<u8> = values(d_model * d_ff, 0.5, 0.1)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let parts = [
            (q4_k, &gate[..]),
            (Format::F32, &up[..]),
            (Format::F32, &down[..]),
        ];
        let mut rec = build_record_raw(d_model, d_ff, parts).unwrap();
        let h = RecordHeader::from_bytes(&rec).unwrap();
        assert_eq!((h.flags, h.minor), (0b001, 2));
        let e = PackedExpert::parse(&rec[..]).unwrap();
        assert_eq!(e.gate().layout(), RowLayout::Words16);
        assert_ne!(
            &rec[h.offsets[0] as usize..][..gate.len()],
            &gate[..],
            "moved"
        );
        let in_order = PackedMatrix::new(q4_k, d_ff, d_model, &gate).unwrap();
        assert_eq!(e.gate().dequantize(), in_order.dequantize());
        rec[6..8].copy_from_slice(&1u16.to_le_bytes());
        assert!(
            PackedExpert::parse(&rec[..]).is_err(),
            "Q4_K laid out at minor 1"
        );
    }

    #[test]
    fn truncated_or_corrupt_records_are_errors_not_panics() {
        let (rec, ..) = record([Format::Q3, Format::Q3, Format::Q4], 64, 32);
        for len in [0, 3, 63, 64, 100, rec.len() - 1] {
            assert!(PackedExpert::parse(&rec[..len]).is_err(), "len {len}");
        }
        // Every single-byte corruption of the header parses or fails, never panics.
        for i in 0..HEADER_BYTES {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut c = rec.clone();
                c[i] = v;
                if let Ok(e) = PackedExpert::parse(&c[..]) {
                    let x = vec![0.5f32; e.d_model()];
                    let mut out = vec![0f32; e.d_model()];
                    e.forward(&x, 1, Activation::Silu, &mut out).unwrap();
                }
            }
        }
    }
}
