//! The integer ggml kernels (`waste_kernels::ggml::dot`): the activation
//! quantizers against a scalar transcription of ggml's C rounding; every
//! type's `_ref` dot product against an f64 dot of the ggml-decoded weights
//! and the dequantized activations (an independent truth); every SIMD table
//! this CPU runs against `_ref`; and the products that `Matrix::Ggml` and a
//! `Format::Ggml` packed matrix now compute against the exact f32 product,
//! within the bound the activations' 8-bit rounding allows; and a q8
//! backbone matrix (`Matrix::Q8`, whose blocks are Q8_0's) against ggml's
//! Q8_0 reference and the exact product, ragged widths included.
//!
//! Weights are random blocks (every byte random, f16 scales overwritten
//! with `±2^u`: every such IQ block is valid too, its grid and sign
//! indices being whole bit fields of the grids' and KSIGNS' sizes) and the
//! fixtures of `tests/data/ggml/` (gguf-py's random blocks and, for Q4_0
//! and Q8_0, blocks gguf-py's quantizer wrote).

mod common;

use half::f16;
use waste_kernels::dense::DenseKernels;
use waste_kernels::ggml::act::{
    BlockQ8K, GgmlActs, Pairing, quantize_row_q8_0_ref, quantize_row_q8_k_ref,
};
use waste_kernels::ggml::dot::{self, GgmlKernels, reference};
use waste_kernels::ggml::layout::{self, RowLayout};
use waste_kernels::ggml::legacy::BlockQ8_0;
use waste_kernels::ggml::{self, GgmlType};
use waste_kernels::quant::Isa;
use waste_kernels::{Format, Matrix, PackedMatrix, Q8Products};

/// The types with an integer kernel, in the priority order.
const TYPES: [GgmlType; 20] = [
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q5_K,
    GgmlType::Q3_K,
    GgmlType::Q2_K,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::IQ4_XS,
    GgmlType::IQ4_NL,
    GgmlType::IQ3_XXS,
    GgmlType::IQ2_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ2_XS,
    GgmlType::Q5_0,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::IQ2_S,
    GgmlType::MXFP4,
];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn normal_ish(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() - 2.0
    }
}

/// Byte offsets of the f16 scale fields in a block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::IQ1_M => &[], // its scale lies in four nibbles
        GgmlType::MXFP4 => &[], // an E8M0 exponent, set apart
        _ => &[0],              // the IQ types, Q8_0, Q4_0, IQ4_NL, Q5_0
    }
}

/// `count` random blocks of `ty`: random bytes, f16 scales `±2^u` (IQ1_M's
/// spread over the top nibbles of its four scale words).
fn random_blocks(ty: GgmlType, count: usize, rng: &mut Rng) -> Vec<u8> {
    let (_, size) = ty.block().unwrap();
    let mut b: Vec<u8> = (0..count * size).map(|_| rng.next() as u8).collect();
    for blk in b.chunks_exact_mut(size) {
        let mut scale = || {
            let sign = if rng.next() & 1 == 0 { 1.0 } else { -1.0 };
            f16::from_f32(sign * 2f32.powf(-12.0 + 10.0 * rng.unit())).to_bits()
        };
        if ty == GgmlType::IQ1_M {
            let d = scale();
            for i in 0..4 {
                let at = 48 + 2 * i;
                let word = u16::from_le_bytes([blk[at], blk[at + 1]]) & 0x0FFF;
                let word = word | ((d >> (4 * i)) & 0xF) << 12;
                blk[at..at + 2].copy_from_slice(&word.to_le_bytes());
            }
            continue;
        }
        if ty == GgmlType::MXFP4 {
            // 2^-12 .. 2^-2 (with the codes' doubling undone): as the f16
            // scales of the other types
            blk[0] = 116 + (rng.next() % 11) as u8;
            continue;
        }
        for &at in f16_fields(ty) {
            blk[at..at + 2].copy_from_slice(&scale().to_le_bytes());
        }
    }
    b
}

/// `count` blocks of `ty` taken cyclically from its fixture (finite ones).
fn fixture_blocks(ty: GgmlType, count: usize, skip: usize) -> Vec<u8> {
    let f = common::fixture(ty);
    let finite: Vec<usize> = (0..f.bytes.len() / f.block)
        .filter(|&b| f.want[b * f.qk..][..f.qk].iter().all(|v| v.is_finite()))
        .collect();
    (0..count)
        .flat_map(|i| {
            let b = finite[(i + skip) % finite.len()];
            f.bytes[b * f.block..][..f.block].to_vec()
        })
        .collect()
}

/// Activations: Gaussian-like, one block per row scaled far down and one
/// all zero, so the quantizers meet tiny and empty blocks too.
fn activations(n: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n * cols).map(|_| rng.normal_ish()).collect();
    if cols >= 512 {
        x[..256].iter_mut().for_each(|v| *v *= 1e-6);
        x[256..512].iter_mut().for_each(|v| *v = 0.0);
    }
    x
}

/// (f64 Σ w·a, f64 Σ |w·a|) per (row, t), out (n, rows).
fn f64_products(w: &[f32], a: &[f32], rows: usize, cols: usize, n: usize) -> Vec<(f64, f64)> {
    let mut out = vec![(0.0, 0.0); n * rows];
    for t in 0..n {
        for r in 0..rows {
            let (wr, at) = (&w[r * cols..][..cols], &a[t * cols..][..cols]);
            out[t * rows + r] = wr.iter().zip(at).fold((0.0, 0.0), |(s, m), (&w, &a)| {
                let p = f64::from(w) * f64::from(a);
                (s + p, m + p.abs())
            });
        }
    }
    out
}

fn ref_table() -> &'static GgmlKernels {
    GgmlKernels::by_name("ref").unwrap()
}

/// Every table this CPU runs, with a note for each ISA it lacks.
fn tables() -> Vec<&'static GgmlKernels> {
    let v = GgmlKernels::variants();
    for isa in Isa::ALL {
        if !v.iter().any(|k| k.isa() == isa) {
            println!("SKIPPED: {} (this CPU lacks it)", isa.name());
        }
    }
    if !v.iter().any(|k| k.name() == "avx512-vnni") {
        println!("SKIPPED: avx512-vnni (this CPU lacks VNNI)");
    }
    v
}

#[test]
fn q8_k_quantizer_is_ggml_s_rounding() {
    /// ggml's `nearest_int`, transcribed: add 1.5·2²³, read the mantissa.
    fn nearest_int(f: f32) -> i32 {
        let i = (f + 12_582_912.0).to_bits() as i32;
        (i & 0x007f_ffff) - 0x0040_0000
    }
    let mut rng = Rng(7);
    for case in 0..40 {
        let mut x: Vec<f32> = (0..1024)
            .map(|_| rng.normal_ish() * 10f32.powi(case % 7 - 3))
            .collect();
        x[256..512].iter_mut().for_each(|v| *v = 0.0);
        // +m and -m both present: the first one sets the sign of the scale.
        x[600] = 50.0;
        x[601] = -50.0;
        // values landing on exact halves after scaling (ties to even)
        for (j, v) in x[768..].iter_mut().enumerate() {
            *v = (j as f32 - 127.0) * 0.5;
        }
        let mut got = vec![BlockQ8K::default(); 4];
        quantize_row_q8_k_ref(&x, &mut got);
        for (b, x) in got.iter().zip(x.chunks_exact(256)) {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in x {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            if amax == 0.0 {
                assert_eq!((b.d, b.qs, b.bsums), (0.0, [0; 256], [0; 16]));
                continue;
            }
            let iscale = -127.0 / max;
            let qs: Vec<i8> = x
                .iter()
                .map(|&v| nearest_int(iscale * v).min(127) as i8)
                .collect();
            assert_eq!(b.qs.to_vec(), qs, "case {case}");
            assert_eq!(b.d.to_bits(), (1.0 / iscale).to_bits());
            for (j, s) in b.bsums.iter().enumerate() {
                assert_eq!(
                    i32::from(*s),
                    qs[16 * j..16 * j + 16]
                        .iter()
                        .map(|&q| i32::from(q))
                        .sum::<i32>()
                );
            }
        }
    }
}

#[test]
fn every_table_s_q8_k_quantizer_is_the_ref_bit_for_bit() {
    let mut rng = Rng(9);
    let bits = |b: &[BlockQ8K]| {
        b.iter()
            .map(|b| (b.d.to_bits(), b.qs.to_vec(), b.bsums))
            .collect::<Vec<_>>()
    };
    for case in 0..60 {
        let mut x: Vec<f32> = (0..2048)
            .map(|_| rng.normal_ish() * 10f32.powi(case % 9 - 4))
            .collect();
        // a zero block, a block of NaNs, NaNs among values, a tie of +m
        // and -m (the first sets the scale's sign) in either order, halves,
        // a block whose largest magnitude is its last value, subnormals
        x[256..512].iter_mut().for_each(|v| *v = 0.0);
        x[512..768].iter_mut().for_each(|v| *v = f32::NAN);
        x[770] = f32::NAN;
        x[800 + case as usize] = 1e3;
        x[801 + case as usize] = -1e3 * if case % 2 == 0 { 1.0 } else { -1.0 };
        for (j, v) in x[1024..1280].iter_mut().enumerate() {
            *v = (j as f32 - 127.0) * 0.5;
        }
        x[1535] = -1e4;
        for (j, v) in x[1792..].iter_mut().enumerate() {
            *v = f32::from_bits(j as u32 * 977) * if j % 3 == 0 { -1.0 } else { 1.0 };
        }
        let mut want = vec![BlockQ8K::default(); 8];
        quantize_row_q8_k_ref(&x, &mut want);
        for k in tables() {
            let mut got = vec![BlockQ8K::default(); 8];
            k.quantize_row_q8k(&x, &mut got);
            assert_eq!(bits(&got), bits(&want), "{} case {case}", k.name());
        }
    }
}

#[test]
fn every_table_s_q8_0_quantizer_is_the_ref_bit_for_bit() {
    let mut rng = Rng(10);
    let bits = |b: &[BlockQ8_0]| b.iter().map(|b| (b.d, b.qs)).collect::<Vec<_>>();
    for case in 0..60 {
        let mut x: Vec<f32> = (0..512)
            .map(|_| rng.normal_ish() * 10f32.powi(case % 9 - 4))
            .collect();
        // a zero block, a block of NaNs, NaNs among values, an infinity,
        // halves at a scale of 1, subnormals, magnitudes past f16's range
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
        x[64..96].iter_mut().for_each(|v| *v = f32::NAN);
        x[100] = f32::NAN;
        x[130] = f32::INFINITY * if case % 2 == 0 { 1.0 } else { -1.0 };
        for (j, v) in x[160..192].iter_mut().enumerate() {
            *v = j as f32 - 15.5;
        }
        x[191] = -127.0;
        for (j, v) in x[192..224].iter_mut().enumerate() {
            *v = f32::from_bits(j as u32 * 977 + case as u32) * if j % 3 == 0 { -1.0 } else { 1.0 };
        }
        x[230] = 1e10 * (case as f32 + 1.0);
        let zero = BlockQ8_0 {
            d: [0; 2],
            qs: [0; 32],
        };
        let mut want = vec![zero; 16];
        quantize_row_q8_0_ref(&x, &mut want);
        for k in tables() {
            let mut got = vec![zero; 16];
            k.quantize_row_q8_0(&x, &mut got);
            assert_eq!(bits(&got), bits(&want), "{} case {case}", k.name());
        }
    }
}

#[test]
fn q8_0_quantizer_is_ggml_s_rounding() {
    let mut rng = Rng(8);
    for case in 0..40 {
        let mut x: Vec<f32> = (0..256)
            .map(|_| rng.normal_ish() * 10f32.powi(case % 7 - 3))
            .collect();
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
        for (j, v) in x[64..96].iter_mut().enumerate() {
            *v = (j as f32 - 16.0) * 0.5;
        }
        // amax 127: every value is its own scaled value, halves included
        for (j, v) in x[96..128].iter_mut().enumerate() {
            *v = j as f32 - 15.5;
        }
        x[127] = -127.0;
        let mut got = vec![
            BlockQ8_0 {
                d: [0; 2],
                qs: [0; 32]
            };
            8
        ];
        quantize_row_q8_0_ref(&x, &mut got);
        for (b, x) in got.iter().zip(x.chunks_exact(32)) {
            let amax = x.iter().map(|v| v.abs()).fold(0f32, f32::max);
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            assert_eq!(b.d, f16::from_f32(d).to_bits().to_le_bytes());
            for (&q, &v) in b.qs.iter().zip(x) {
                // C's roundf: halves away from zero, computed in f64.
                let p = f64::from(v * id);
                let want = p.signum() * (p.abs() + 0.5).floor();
                assert_eq!(f64::from(q as i8), want, "case {case}: {v}");
            }
        }
    }
}

/// For one type and weight bytes (rows, cols): `_ref` against the f64 truth,
/// every table against `_ref`, for n = 1 and 3 (one row at a time) and
/// 5 and 21 (the batched micro-kernel: a partial tile, a tile and a part).
fn check_type(ty: GgmlType, w: &[u8], rows: usize, cols: usize, rng: &mut Rng, what: &str) {
    for n in [1, 3, 5, 21] {
        let x = activations(n, cols, rng);
        check_products(ty, w, rows, cols, &x, n, what);
    }
}

/// `_ref` against the f64 truth and every table against `_ref` on the
/// activation rows `x` (n rows of `cols`).
fn check_products(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    what: &str,
) {
    check_products_laid(ty, RowLayout::RowMajor, w, rows, cols, x, n, what);
}

/// [`check_products`] with every table reading the rows `w` laid as
/// `layout`.
#[allow(clippy::too_many_arguments)]
fn check_products_laid(
    ty: GgmlType,
    layout: RowLayout,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    what: &str,
) {
    let (_, bs) = ty.block().unwrap();
    let laid = match layout {
        RowLayout::RowMajor => w.to_vec(),
        _ => layout::lay_out(layout, w, rows, w.len() / rows.max(1), bs),
    };
    let pairing = dot::pairing(ty).unwrap();
    let decoded = ggml::dequantize(ty, w).unwrap();
    let mut acts = GgmlActs::default();
    acts.quantize(pairing, x, n, cols);
    let truth = f64_products(
        &decoded,
        &common::dequantized_acts(&acts, pairing),
        rows,
        cols,
        n,
    );
    let mut want = vec![0f32; n * rows];
    dot::matmul_with(ref_table(), ty, rows, cols, w, x, n, &mut want).unwrap();
    for (i, (&got, &(exact, mag))) in want.iter().zip(&truth).enumerate() {
        // f32 roundings of the scales and the block sums: a few ulp of
        // the magnitude; one unit off in a block's integer sum is more.
        let tol = 2e-6 * mag + 1e-30;
        assert!(
            (f64::from(got) - exact).abs() <= tol,
            "{ty} {what} {rows}x{cols} n={n} [{i}]: ref {got} vs f64 {exact} (mag {mag})"
        );
    }
    for k in tables() {
        let mut got = vec![0f32; n * rows];
        dot::matmul_laid(k, ty, layout, rows, cols, &laid, x, n, &mut got).unwrap();
        for (i, ((&g, &r), &(_, mag))) in got.iter().zip(&want).zip(&truth).enumerate() {
            // The same integers; only the order of the f32 adds differs.
            let tol = 1e-6 * mag + 1e-30;
            assert!(
                (f64::from(g) - f64::from(r)).abs() <= tol,
                "{ty} {what} {} {layout:?} {rows}x{cols} n={n} [{i}]: {g} vs ref {r}",
                k.name()
            );
        }
    }
}

/// `rows` rows of `cols` weights of `ty` with every code bit set and every
/// f16 scale (and min) 2^-7: each block at its largest codes.
fn saturated_blocks(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (qk, size) = ty.block().unwrap();
    let mut w = vec![0xFFu8; rows * cols / qk * size];
    for blk in w.chunks_exact_mut(size) {
        for &at in f16_fields(ty) {
            blk[at..at + 2].copy_from_slice(&f16::from_f32(0.0078125).to_bits().to_le_bytes());
        }
    }
    w
}

/// The integer sums at their extremes: every code at its type's maximum
/// against activations all ±127 (one sign per token, both in each tile),
/// the case where sums that a kernel keeps in i16 come closest to overflow.
#[test]
fn batched_products_at_the_integer_extremes_are_exact() {
    for ty in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let (rows, cols, n) = (9, 512, 21);
        let w = saturated_blocks(ty, rows, cols);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| if (i / cols) % 3 == 1 { -1.0 } else { 1.0 })
            .collect();
        check_products(ty, &w, rows, cols, &x, n, "all codes at the maximum");
    }
    // the 32-weight types whose codes meet the activations unsigned: the
    // largest codes, and (Q4_1, Q5_1) their mins, against ±127, the sign
    // flipping by block (so that the f32 sums of many blocks do not grow
    // past what their rounding allows), rows long enough for the
    // four-row decode kernels
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
    ] {
        let (rows, cols, n) = (9, 8192, 21);
        let w = saturated_blocks(ty, rows, cols);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| {
                if (i / cols + i / 32) % 3 == 1 {
                    -1.0
                } else {
                    1.0
                }
            })
            .collect();
        check_products(ty, &w, rows, cols, &x, n, "all codes at the maximum");
        check_products(
            ty,
            &w,
            rows,
            cols,
            &x[..cols],
            1,
            "all codes at the maximum",
        );
    }
    // the word-major sixteen-row kernels: Q4_K's AVX2 one keeps eight
    // products in i16, IQ4_XS's its widest pairs
    for ty in [GgmlType::Q4_K, GgmlType::IQ4_XS] {
        let (rows, cols, n) = (19, 512, 2);
        let w = saturated_blocks(ty, rows, cols);
        for sign in [1.0f32, -1.0] {
            let x = vec![sign; n * cols];
            let laid = RowLayout::Words16;
            check_products_laid(ty, laid, &w, rows, cols, &x[..cols], 1, "extremes");
            check_products_laid(ty, laid, &w, rows, cols, &x, n, "extremes");
        }
    }
}

#[test]
fn every_type_ref_is_the_f64_dot_and_every_isa_is_ref_on_random_blocks() {
    let mut rng = Rng(1);
    for ty in TYPES {
        let (qk, _) = ty.block().unwrap();
        // one block a row, odd row counts (every remainder of the
        // multi-row decode kernels' groups of four), rows wider than a Q8_K
        // block, an odd count of 256-weight blocks (the 512-bit kernels'
        // pairs of 32-weight groups never straddle blocks), rows long
        // enough that AVX2's Q8_0 takes four at a time (4096 bytes)
        for (rows, per_row) in [
            (1, 1),
            (2, 2),
            (7, 3),
            (3, 7 * 256 / qk),
            (37, 2),
            (7, 4096 / qk),
            (5, 8192 / qk),
            (10, 1),
        ] {
            let w = random_blocks(ty, rows * per_row, &mut rng);
            check_type(ty, &w, rows, per_row * qk, &mut rng, "random");
        }
    }
}

#[test]
fn every_type_ref_is_the_f64_dot_and_every_isa_is_ref_on_fixture_blocks() {
    let mut rng = Rng(2);
    for ty in TYPES {
        let (qk, _) = ty.block().unwrap();
        for (rows, per_row) in [(3, 1), (33, 2048 / qk)] {
            let w = fixture_blocks(ty, rows * per_row, rows);
            check_type(ty, &w, rows, per_row * qk, &mut rng, "fixture");
        }
    }
}

#[test]
fn four_bit_q8_0_types_agree_on_rows_longer_than_a_pass_of_activations() {
    // the sixteen-row decode kernels take the activations 256 blocks at a
    // time, carrying each row's sum from pass to pass; 18 rows leave two
    // to the one-row kernel
    let mut rng = Rng(3);
    for ty in [GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4] {
        let (qk, _) = ty.block().unwrap();
        let (rows, per_row) = (18, 300);
        let w = random_blocks(ty, rows * per_row, &mut rng);
        check_type(ty, &w, rows, per_row * qk, &mut rng, "long rows");
    }
}

/// Rows interleaved by sixteen give every table's row-major products:
/// bit for bit where the blocks stay whole (the sixteen-row kernels of
/// Q4_0 and IQ4_NL read either layout with the same sums in the same
/// order), else within [`check_products`]' bound (Q4_K's and IQ4_XS's
/// word-major kernels add in another order), whether a table's kernel
/// reads them so or puts them back in order (the rest, and the tiles from
/// a few tokens on, the word-major types' from 128); the word-major
/// kernels meet up to three or four tokens at once, so the token counts
/// leave runs of one to four; row counts leave whole groups, a ragged
/// group and bands that end mid-matrix; a packed matrix with the layout
/// dequantizes to the rows.
#[test]
fn interleaved_rows_give_the_row_major_products() {
    let mut rng = Rng(5);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
        GgmlType::Q4_K,
        GgmlType::IQ4_XS,
    ] {
        let laid = layout::interleaving(ty).unwrap();
        let (qk, bs) = ty.block().unwrap();
        for (rows, per_row) in [(16, 8), (37, 8), (70, 3), (48, 300 * 32 / qk)] {
            let cols = per_row * qk;
            let w = random_blocks(ty, rows * per_row, &mut rng);
            let il = layout::lay_out(laid, &w, rows, per_row * bs, bs);
            for n in [1, 2, 3, 5, 6, 7, 8, 33, 130] {
                let x = activations(n, cols, &mut rng);
                if laid != RowLayout::Interleaved16 {
                    check_products_laid(ty, laid, &w, rows, cols, &x, n, "laid");
                    continue;
                }
                for k in tables() {
                    let (mut want, mut got) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                    dot::matmul_with(k, ty, rows, cols, &w, &x, n, &mut want).unwrap();
                    dot::matmul_laid(k, ty, laid, rows, cols, &il, &x, n, &mut got).unwrap();
                    assert_eq!(got, want, "{ty} {} {rows}x{cols} n={n}", k.name());
                }
            }
            let m = PackedMatrix::with_layout(Format::Ggml(ty), rows, cols, &il, laid).unwrap();
            assert_eq!(
                m.dequantize(),
                ggml::dequantize(ty, &w).unwrap(),
                "{ty} {rows} rows"
            );
        }
    }
    // each type takes only its own layout
    for (ty, laid) in [
        (GgmlType::Q4_K, RowLayout::Interleaved16),
        (GgmlType::Q4_0, RowLayout::Words16),
        (GgmlType::Q6_K, RowLayout::Words16),
    ] {
        let (qk, _) = ty.block().unwrap();
        let w = random_blocks(ty, 16 * 256 / qk, &mut rng);
        let x = activations(1, 256, &mut rng);
        let mut out = vec![0f32; 16];
        assert!(
            dot::matmul_laid(ref_table(), ty, laid, 16, 256, &w, &x, 1, &mut out).is_err(),
            "{ty} {laid:?}"
        );
        assert!(PackedMatrix::with_layout(Format::Ggml(ty), 16, 256, &w, laid).is_err());
    }
}

/// The worst error 8-bit activations can add to `Σ w·x`: each activation
/// moves by at most 0.6 of its block's step `amax / 127` (half a step of
/// rounding, plus Q8_0's f16 scale rounding, < 0.07 of a step).
fn rounding_bound(w: &[f32], x: &[f32], block: usize) -> f64 {
    w.chunks(block)
        .zip(x.chunks(block))
        .map(|(w, x)| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = f64::from(amax) / 127.0;
            w.iter().map(|v| f64::from(v.abs())).sum::<f64>() * 0.6 * step
        })
        .sum()
}

#[test]
fn packed_and_backbone_products_are_the_exact_product_up_to_activation_rounding() {
    let mut rng = Rng(3);
    for ty in TYPES {
        let (qk, _) = ty.block().unwrap();
        let block = if dot::pairing(ty) == Some(Pairing::Q8K) {
            256
        } else {
            32
        };
        let (rows, cols) = (41, 4 * qk.max(64));
        let w = random_blocks(ty, rows * cols / qk, &mut rng);
        let decoded = ggml::dequantize(ty, &w).unwrap();
        let exact = Matrix::f32(rows, cols, decoded.clone()).unwrap();
        let packed = PackedMatrix::new(Format::ggml(ty).unwrap(), rows, cols, &w).unwrap();
        let backbone = Matrix::ggml(ty, rows, cols, w.clone()).unwrap();
        for n in [1, 4] {
            let x = activations(n, cols, &mut rng);
            let want = exact.matmul_alloc(&x, n).unwrap();
            let mut got = vec![0f32; n * rows];
            packed.matmul(&x, n, &mut got).unwrap();
            let got_b = backbone.matmul_alloc(&x, n).unwrap();
            for t in 0..n {
                for r in 0..rows {
                    let (wr, xt) = (&decoded[r * cols..][..cols], &x[t * cols..][..cols]);
                    let mag: f64 = wr.iter().zip(xt).map(|(a, b)| f64::from(a * b).abs()).sum();
                    let tol = rounding_bound(wr, xt, block) + 1e-5 * mag;
                    let i = t * rows + r;
                    for (who, g) in [("packed", got[i]), ("backbone", got_b[i])] {
                        assert!(
                            (f64::from(g) - f64::from(want[i])).abs() <= tol,
                            "{ty} {who} n={n} [{t},{r}]: {g} vs exact {} (bound {tol})",
                            want[i]
                        );
                    }
                }
            }
        }
        // the backbone holds Q4_0, IQ4_NL, Q4_K and IQ4_XS interleaved by sixteen:
        // its rows, slices and values are still the decoded rows
        let mut row = vec![0f32; cols];
        for r in 0..rows {
            backbone.row_f32_into(r, &mut row);
            assert_eq!(row, decoded[r * cols..][..cols], "{ty} row {r}");
        }
        assert_eq!(backbone.to_f32(), decoded, "{ty}");
        for (start, end) in [(3, 38), (16, 41), (0, 16)] {
            let s = backbone.slice_rows(start, end).unwrap();
            assert_eq!(
                s.to_f32(),
                decoded[start * cols..end * cols],
                "{ty} {start}..{end}"
            );
        }
    }
}

#[test]
fn only_types_with_kernels_are_paired_and_inspect_names_them() {
    for ty in GgmlType::DECODABLE {
        let format = Format::ggml(ty).unwrap();
        let k = waste_kernels::kernels();
        let name = format.kernel(k);
        if TYPES.contains(&ty) {
            assert!(dot::has_kernel(ty));
            assert!(
                name.contains("int8 block dot") && name.contains(&ty.to_string()),
                "{ty}: {name}"
            );
        } else {
            assert!(!dot::has_kernel(ty), "{ty}");
            assert!(name.contains("f32 dot"), "{ty}: {name}");
        }
    }
}

#[test]
fn every_table_unpacks_q8_0_tile_rows_as_the_scalar_unpacker_bit_for_bit() {
    use dot::tile::q8_0::{self, UnpackedQ8_0};
    let mut rng = Rng(6);
    let bits = |u: &[UnpackedQ8_0]| {
        u.iter()
            .flat_map(|u| {
                let mut v: Vec<i64> = u.q.iter().map(|&q| i64::from(q)).collect();
                v.push(i64::from(u.init));
                v.push(i64::from(u.d.to_bits()));
                v
            })
            .collect::<Vec<_>>()
    };
    for ty in TYPES.into_iter().filter(|&t| q8_0::unpacks(t)) {
        let (qk, _) = ty.block().unwrap();
        for w in [random_blocks(ty, 5, &mut rng), fixture_blocks(ty, 5, 1)] {
            let mut want = vec![UnpackedQ8_0::default(); 5 * qk / 32];
            q8_0::unpack_row_of(ty, &w, &mut want);
            for k in tables() {
                let mut got = vec![UnpackedQ8_0::default(); 5 * qk / 32];
                k.unpack_row_q8_0(ty, &w, &mut got);
                assert_eq!(bits(&got), bits(&want), "{ty} {}", k.name());
            }
        }
    }
}

/// The contract the paired micro-kernel relies on: where `tile::paired`
/// says so, both 16-weight halves of every 32 carry one scale and min.
#[test]
fn paired_types_share_scales_and_mins_per_32() {
    use dot::tile::{self, Unpacked};
    let mut rng = Rng(5);
    for ty in TYPES.into_iter().filter(|&t| tile::paired(t)) {
        assert!(tile::unpacks(ty), "{ty}");
        for w in [random_blocks(ty, 5, &mut rng), fixture_blocks(ty, 5, 1)] {
            let mut u = vec![Unpacked::default(); 5];
            tile::unpack_row(ty, &w, &mut u);
            for (b, u) in u.iter().enumerate() {
                for j in (0..16).step_by(2) {
                    assert_eq!(
                        u.sc[j].to_bits(),
                        u.sc[j + 1].to_bits(),
                        "{ty} block {b} sc {j}"
                    );
                    assert_eq!(
                        u.m[j].to_bits(),
                        u.m[j + 1].to_bits(),
                        "{ty} block {b} m {j}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_table_unpacks_k_quant_rows_as_the_scalar_unpacker_bit_for_bit() {
    use dot::tile::{self, Unpacked};
    let mut rng = Rng(4);
    let bits = |u: &[Unpacked]| {
        u.iter()
            .flat_map(|u| {
                let f =
                    u.sc.iter()
                        .chain(&u.m)
                        .chain([&u.d])
                        .map(|v| v.to_bits() as i64);
                let i = u.init.iter().chain(&u.isc).map(|&v| i64::from(v));
                let i = i.chain([i64::from(u.off)]);
                u.q.iter()
                    .map(|&q| i64::from(q))
                    .chain(i)
                    .chain(f)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    for ty in TYPES.into_iter().filter(|&t| tile::unpacks(t)) {
        for w in [random_blocks(ty, 5, &mut rng), fixture_blocks(ty, 5, 1)] {
            let mut want = vec![Unpacked::default(); 5];
            tile::unpack_row(ty, &w, &mut want);
            for k in tables() {
                let mut got = vec![Unpacked::default(); 5];
                k.unpack_row(ty, &w, &mut got);
                assert_eq!(bits(&got), bits(&want), "{ty} {}", k.name());
            }
        }
    }
}

#[test]
fn shape_errors_are_reported_not_panics() {
    let k = ref_table();
    let w = vec![0u8; 144 * 2];
    let mut out = vec![0f32; 2];
    let x = vec![0f32; 256];
    assert!(dot::matmul_with(k, GgmlType::Q4_K, 2, 256, &w[..200], &x, 1, &mut out).is_err());
    assert!(dot::matmul_with(k, GgmlType::Q4_K, 2, 256, &w, &x[..255], 1, &mut out).is_err());
    assert!(dot::matmul_with(k, GgmlType::Q4_K, 2, 256, &w, &x, 1, &mut out[..1]).is_err());
    // a type with no integer kernel
    assert!(dot::matmul_with(k, GgmlType::TQ2_0, 2, 256, &w[..132], &x, 1, &mut out).is_err());
    assert!(dot::matmul_with(k, GgmlType::Q4_K, 2, 256, &w, &x, 1, &mut out).is_ok());
}

/// Every dense kernel table this CPU runs (a `Matrix::Q8` product takes the
/// fastest ggml table of the same ISA), with a note for each it lacks.
fn dense_tables() -> Vec<&'static DenseKernels> {
    Isa::ALL
        .into_iter()
        .filter_map(|isa| {
            let k = DenseKernels::for_isa(isa);
            if k.is_none() {
                println!("SKIPPED: {} (this CPU lacks it)", isa.name());
            }
            k
        })
        .collect()
}

/// A (rows, cols) matrix of waste's q8 quantizer, every ragged row's padding
/// codes overwritten with 100 (they must count for nothing), with its bytes
/// and dequantized values.
fn q8_matrix(rows: usize, cols: usize, rng: &mut Rng) -> (Matrix, Vec<u8>, Vec<f32>) {
    let w: Vec<f32> = (0..rows * cols).map(|_| 0.5 * rng.normal_ish()).collect();
    let mut q = waste_kernels::quantize(Format::Q8, rows, cols, &w)
        .unwrap()
        .bytes;
    let rb = Format::Q8.row_bytes(cols);
    let tail = cols % 32;
    if tail != 0 {
        for row in q.chunks_exact_mut(rb) {
            row[rb - 32 + tail..].fill(100);
        }
    }
    let m = Matrix::q8(rows, cols, q.clone()).unwrap();
    let decoded = m.to_f32();
    (m, q, decoded)
}

/// ggml's Q8_0 product on q8 bytes, built from the scalar pieces: each
/// activation row zero-padded to whole blocks and quantized by
/// `quantize_row_q8_0_ref`, each weight row (its blocks as Q8_0 blocks)
/// dotted by `vec_dot_q8_0_q8_0_ref`; out (n, rows).
fn q8_0_reference(q: &[u8], rows: usize, cols: usize, x: &[f32], n: usize) -> Vec<f32> {
    let blocks = cols.div_ceil(32);
    let zero = BlockQ8_0 {
        d: [0; 2],
        qs: [0; 32],
    };
    let w: &[BlockQ8_0] = ggml::blocks(q).unwrap();
    let mut out = vec![0f32; n * rows];
    for t in 0..n {
        let mut padded = vec![0f32; blocks * 32];
        padded[..cols].copy_from_slice(&x[t * cols..][..cols]);
        let mut a = vec![zero; blocks];
        quantize_row_q8_0_ref(&padded, &mut a);
        for r in 0..rows {
            out[t * rows + r] = reference::vec_dot_q8_0_q8_0_ref(&w[r * blocks..][..blocks], &a);
        }
    }
    out
}

/// q8 widths: whole blocks, one past, ragged ones (70, 576 + 5), a model's.
const Q8_SHAPES: [(usize, usize); 8] = [
    (1, 32),
    (3, 33),
    (17, 70),
    (5, 96),
    (9, 581),
    (33, 1100),
    (40, 2048),
    (2, 5),
];

#[test]
fn q8_backbone_products_are_ggmls_q8_0_reference_and_the_exact_product_up_to_activation_rounding() {
    let mut rng = Rng(5);
    let tables = dense_tables();
    let dispatched = waste_kernels::dense::kernels().isa();
    println!("dispatched: {}", dispatched.name());
    for (rows, cols) in Q8_SHAPES {
        let (m, q, decoded) = q8_matrix(rows, cols, &mut rng);
        let exact_m = m.clone().with_q8_products(Q8Products::Exact);
        for n in [1, 2, 5, 17] {
            let x = activations(n, cols, &mut rng);
            let want = q8_0_reference(&q, rows, cols, &x, n);
            let f32_m = Matrix::f32(rows, cols, decoded.clone()).unwrap();
            let default = m.matmul_alloc(&x, n).unwrap();
            for k in &tables {
                let what = format!("{} {rows}x{cols} n={n}", k.isa().name());
                let mut got = vec![f32::NAN; n * rows];
                m.matmul_with(k, &x, n, &mut got).unwrap();
                let mut by_row = vec![f32::NAN; n * rows];
                k.rows(&m, 0, &x, n, &mut by_row);
                let mut got_exact = vec![f32::NAN; n * rows];
                exact_m.matmul_with(k, &x, n, &mut got_exact).unwrap();
                let mut exact = vec![f32::NAN; n * rows];
                f32_m.matmul_with(k, &x, n, &mut exact).unwrap();
                for t in 0..n {
                    for r in 0..rows {
                        let i = t * rows + r;
                        let (wr, xt) = (&decoded[r * cols..][..cols], &x[t * cols..][..cols]);
                        let mag: f64 = wr.iter().zip(xt).map(|(a, b)| f64::from(a * b).abs()).sum();
                        let (g, w) = (f64::from(got[i]), f64::from(want[i]));
                        // The same integers; only the order of the f32 adds
                        // differs (and the activations' rounding moves each
                        // term by under 1 %).
                        assert!(
                            (g - w).abs() <= 2e-6 * mag + 1e-30,
                            "{what} [{t},{r}]: {g} vs ggml ref {w}"
                        );
                        let tol = rounding_bound(wr, xt, 32) + 1e-5 * mag;
                        let e = f64::from(exact[i]);
                        assert!(
                            (g - e).abs() <= tol,
                            "{what} [{t},{r}]: {g} vs exact {e} (bound {tol})"
                        );
                        assert_eq!(
                            by_row[r * n + t].to_bits(),
                            got[i].to_bits(),
                            "{what} [{t},{r}]: single-threaded rows vs matmul"
                        );
                    }
                }
                assert_eq!(got_exact, exact, "{what}: the exact switch");
                if k.isa() == dispatched {
                    assert_eq!(default, got, "{what}: the dispatched kernels");
                }
            }
        }
    }
}

/// Products of one token equal the same token's row of a batch, whichever
/// products ran before on the thread: no product may see another's
/// quantized activations (they are scratch reused per thread). Bit for bit
/// where the batch runs the row kernels too; where it takes the batched
/// Q8_0 micro-kernel the integer sums are the same and only the f32 order
/// of their scaling differs.
#[test]
fn q8_backbone_decode_equals_prefill_and_no_product_sees_anothers_activations() {
    let mut rng = Rng(6);
    let (a, _, _) = q8_matrix(37, 70, &mut rng);
    let (b, _, _) = q8_matrix(21, 576, &mut rng);
    for k in dense_tables() {
        let n = 5;
        let xa = activations(n, 70, &mut rng);
        let xb = activations(n, 576, &mut rng);
        let mut all_a = vec![0f32; n * 37];
        a.matmul_with(k, &xa, n, &mut all_a).unwrap();
        let mut all_b = vec![0f32; n * 21];
        b.matmul_with(k, &xb, n, &mut all_b).unwrap();
        for t in (0..n).rev() {
            let mut one_b = vec![0f32; 21];
            b.matmul_with(k, &xb[t * 576..][..576], 1, &mut one_b)
                .unwrap();
            let mut one_a = vec![0f32; 37];
            a.matmul_with(k, &xa[t * 70..][..70], 1, &mut one_a)
                .unwrap();
            let batched =
                GgmlKernels::for_isa(k.isa()).is_some_and(|g| g.batched(GgmlType::Q8_0, n));
            for (what, one, all) in [
                ("a", &one_a, &all_a[t * 37..][..37]),
                ("b", &one_b, &all_b[t * 21..][..21]),
            ] {
                if !batched {
                    assert_eq!(one[..], all[..], "{} {what} t={t}", k.isa().name());
                    continue;
                }
                for (x, y) in one.iter().zip(all) {
                    assert!(
                        (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                        "{} {what} t={t}: {x} alone, {y} in the batch",
                        k.isa().name()
                    );
                }
            }
        }
    }
}
