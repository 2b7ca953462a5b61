//! Every block format × every ISA this host runs against the scalar `_ref`
//! kernels (STYLE 4.4.6): (a) SIMD equals `_ref` within 1e-6 per block of the
//! summed magnitudes, (b) quantize → dequantize error under a per-format bound,
//! (c) the dot product against an f64 dot of the dequantized weights, (d) one
//! block, many blocks and ragged tails. ISAs the host lacks are printed as skipped.

use waste_kernels::quant::{Isa, Kernels, QuantizedActs, quantize};
use waste_kernels::{Format, PackedMatrix};

/// ggml's deterministic test values.
fn cosine(len: usize, off: f32) -> Vec<f32> {
    (0..len)
        .map(|i| 0.1 + 2.0 * (i as f32 + off).cos())
        .collect()
}

mod common;

use common::seeded;

const SHAPES: [(usize, usize); 9] = [
    (1, 32),
    (3, 1),
    (2, 7),
    (5, 33),
    (4, 64),
    (3, 100),
    (7, 384),
    (2, 576),
    (2, 2048),
];

fn ref_kernels() -> &'static Kernels {
    Kernels::for_isa(Isa::Ref).expect("ref always runs")
}

/// Every SIMD table to test: each one this CPU runs, the others reported skipped.
fn simd_tables() -> Vec<&'static Kernels> {
    for name in ["avx2", "avx2-vnni", "avx512-bw", "avx512-vnni"] {
        if Kernels::by_name(name).is_none() {
            println!("SKIPPED: {name} (this CPU lacks it)");
        }
    }
    Kernels::variants()
        .into_iter()
        .filter(|k| k.isa() != Isa::Ref)
        .collect()
}

#[test]
fn simd_matches_ref_for_every_format_and_shape() {
    for k in simd_tables() {
        for format in Format::ALL {
            for (si, &(rows, cols)) in SHAPES.iter().enumerate() {
                let w = seeded(rows * cols, si as u64, 0.05);
                let q = quantize(format, rows, cols, &w).unwrap();
                let m = q.matrix();
                let deq = m.dequantize();
                for n in [1, 2, 3, 5] {
                    let x = if n == 2 {
                        cosine(n * cols, 0.5)
                    } else {
                        seeded(n * cols, 100 + si as u64, 1.0)
                    };
                    let acts = QuantizedActs::new(&x, n, cols);
                    for r in 0..rows {
                        let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                        ref_kernels().row_dot(format, m.row(r), &acts, &mut want);
                        k.row_dot(format, m.row(r), &acts, &mut got);
                        for t in 0..n {
                            let mag: f64 = (0..cols)
                                .map(|c| {
                                    f64::from(deq[r * cols + c].abs())
                                        * f64::from(x[t * cols + c].abs())
                                })
                                .sum();
                            let tol = 1e-6 * cols.div_ceil(32) as f64 * mag.max(1e-30) + 1e-30;
                            let diff = f64::from((got[t] - want[t]).abs());
                            assert!(
                                diff <= tol,
                                "{} {format} {rows}x{cols} n={n} r={r} t={t}: {} vs {}",
                                k.name(),
                                got[t],
                                want[t]
                            );
                        }
                    }
                }
            }
        }
        println!("checked {}", k.name());
    }
}

/// `got` equals `want` within `1e-6 · blocks` of the summed magnitudes of
/// each product, for the (rows, n) outputs of a packed row · activation row.
#[allow(clippy::too_many_arguments)]
fn assert_close(
    what: &str,
    deq: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    n: usize,
    got: &[f32],
    want: &[f32],
) {
    for r in 0..rows {
        for t in 0..n {
            let mag: f64 = (0..cols)
                .map(|c| f64::from(deq[r * cols + c].abs()) * f64::from(x[t * cols + c].abs()))
                .sum();
            let tol = 1e-6 * cols.div_ceil(32) as f64 * mag.max(1e-30) + 1e-30;
            let (g, w) = (got[r * n + t], want[r * n + t]);
            assert!(
                f64::from((g - w).abs()) <= tol,
                "{what} {rows}x{cols} n={n} r={r} t={t}: {g} vs {w}"
            );
        }
    }
}

/// One call over many rows (the kernels stream over rows and chunks of 64
/// blocks, copy the next chunks' scales ahead, pair blocks, mask the first
/// and last loads of the slice): block counts 1, 2, 3, odd, 64, 65 and 129,
/// 1..17 rows (the decode kernels' groups of eight and what is left),
/// padded rows, 1..6 activation rows.
#[test]
fn simd_streams_over_many_rows_like_ref() {
    let colss = [32, 33, 64, 96, 416, 2048, 2080, 4100];
    for k in simd_tables() {
        for format in Format::ALL {
            for (ci, &cols) in colss.iter().enumerate() {
                for (rows, pad) in [(1, 0), (3, 0), (9, 0), (4, 5), (17, 3)] {
                    let w = seeded(rows * cols, 31 + ci as u64, 0.05);
                    let q = quantize(format, rows, cols, &w).unwrap();
                    let deq = q.matrix().dequantize();
                    let rb = format.row_bytes(cols);
                    // Rows at a stride of rb + pad, the padding filled with junk.
                    let mut bytes = vec![0x5au8; rows * (rb + pad)];
                    for r in 0..rows {
                        bytes[r * (rb + pad)..][..rb].copy_from_slice(q.matrix().row(r));
                    }
                    for n in [1, 2, 4, 6] {
                        let x = seeded(n * cols, 200 + ci as u64, 1.0);
                        let acts = QuantizedActs::new(&x, n, cols);
                        let (mut want, mut got) = (vec![0f32; rows * n], vec![0f32; rows * n]);
                        ref_kernels().rows_dot(format, &bytes, rb + pad, &acts, &mut want);
                        k.rows_dot(format, &bytes, rb + pad, &acts, &mut got);
                        let what = format!("{} {format} pad {pad}", k.name());
                        assert_close(&what, &deq, &x, rows, cols, n, &got, &want);
                    }
                }
            }
        }
        println!("checked {}", k.name());
    }
}

/// The batched micro-kernel (`quant::tile`) on every table that has one,
/// through the parallel driver and the single-threaded one, against the
/// `_ref` row kernels: odd row counts (one short group of 8 rows, several
/// rayon tasks), ragged and long rows, token counts around the tiles of 16.
#[test]
fn batched_products_match_ref_rows() {
    let tables: Vec<_> = simd_tables()
        .into_iter()
        .filter(|k| k.tile(Format::Q3, 64).is_some())
        .collect();
    if tables.is_empty() {
        println!("SKIPPED: batched block kernels (no table of this CPU has one)");
    }
    for k in tables {
        for format in Format::ALL {
            for (si, &(rows, cols)) in [(1, 32), (9, 33), (8, 100), (17, 384), (70, 2048)]
                .iter()
                .enumerate()
            {
                let w = seeded(rows * cols, 50 + si as u64, 0.05);
                let q = quantize(format, rows, cols, &w).unwrap();
                let m = q.matrix();
                let deq = m.dequantize();
                let min = k
                    .tile(format, usize::MAX)
                    .map_or(waste_kernels::quant::tile::BATCH_MIN, |t| {
                        t.min_rows(format)
                    });
                for n in [min, 9, 16, 17, 33] {
                    assert!(k.tile(format, n).is_some(), "{format} n={n} batched");
                    let x = seeded(n * cols, 300 + si as u64, 1.0);
                    let acts = QuantizedActs::new(&x, n, cols);
                    let mut want = vec![0f32; rows * n];
                    ref_kernels().rows_dot(
                        format,
                        m.bytes(),
                        m.bytes().len() / rows,
                        &acts,
                        &mut want,
                    );
                    let mut got = vec![0f32; rows * n];
                    waste_kernels::par::matmul_rows(k, &m, 0, &acts, &mut got);
                    let what = format!("{} {format} batched", k.name());
                    assert_close(&what, &deq, &x, rows, cols, n, &got, &want);
                    let mut by_token = vec![0f32; n * rows];
                    waste_kernels::par::matmul_par(k, &m, &acts, &mut by_token);
                    let got: Vec<f32> = (0..rows * n)
                        .map(|i| by_token[(i % n) * rows + i / n])
                        .collect();
                    let what = format!("{} {format} batched, parallel", k.name());
                    assert_close(&what, &deq, &x, rows, cols, n, &got, &want);
                }
            }
        }
        println!("checked {}", k.name());
    }
}

#[test]
fn dot_matches_f64_dot_of_dequantized_weights() {
    let k = waste_kernels::kernels();
    println!("dispatched ISA: {}", k.isa().name());
    for format in Format::ALL {
        for (si, &(rows, cols)) in SHAPES.iter().enumerate() {
            let w = seeded(rows * cols, 7 + si as u64, 0.02);
            let q = quantize(format, rows, cols, &w).unwrap();
            let deq = q.matrix().dequantize();
            let n = 3;
            let x = seeded(n * cols, 50 + si as u64, 1.0);
            let mut out = vec![0f32; n * rows];
            q.matrix().matmul(&x, n, &mut out).unwrap();
            for t in 0..n {
                for r in 0..rows {
                    let (mut exact, mut mag) = (0f64, 0f64);
                    for c in 0..cols {
                        let p = f64::from(deq[r * cols + c]) * f64::from(x[t * cols + c]);
                        exact += p;
                        mag += p.abs();
                    }
                    // int8 activations: half a step of 1/127 of each group's max.
                    let tol = 0.01 * mag + 1e-6;
                    let got = f64::from(out[t * rows + r]);
                    assert!(
                        (got - exact).abs() <= tol,
                        "{format} {rows}x{cols} t={t} r={r}: {got} vs {exact}"
                    );
                }
            }
        }
    }
}

#[test]
fn round_trip_error_is_bounded_and_reported_exactly() {
    // Relative Frobenius error bounds on Gaussian-like and cosine data.
    let bounds = [
        (Format::Q3, 0.20),
        (Format::Q3Rtn, 0.30),
        (Format::Q4, 0.10),
        (Format::Q8, 0.01),
    ];
    for (format, bound) in bounds {
        for (rows, cols, w) in [
            (64, 384, seeded(64 * 384, 3, 0.03)),
            (16, 100, cosine(1600, 0.0)),
            (3, 7, cosine(21, 2.0)),
        ] {
            let q = quantize(format, rows, cols, &w).unwrap();
            assert_eq!(
                q.bytes.len(),
                rows * cols.div_ceil(32) * format.block_bytes()
            );
            let deq = q.matrix().dequantize();
            let sq_err: f64 = w
                .iter()
                .zip(&deq)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum();
            let sq_norm: f64 = w.iter().map(|&a| f64::from(a).powi(2)).sum();
            assert!(
                (sq_err - q.sq_error).abs() <= 1e-6 * sq_err.max(1e-12),
                "{format}: reported error"
            );
            let rel = (sq_err / sq_norm).sqrt();
            assert!(
                rel < bound,
                "{format} {rows}x{cols}: rel error {rel} >= {bound}"
            );
        }
    }
}

#[test]
fn q3_is_better_than_its_rtn_baseline_and_costs_3_25_bits() {
    let (rows, cols) = (32, 2048);
    let w = seeded(rows * cols, 11, 0.02);
    let q3 = quantize(Format::Q3, rows, cols, &w).unwrap();
    let rtn = quantize(Format::Q3Rtn, rows, cols, &w).unwrap();
    assert!(
        q3.rel_error() < rtn.rel_error(),
        "{} vs {}",
        q3.rel_error(),
        rtn.rel_error()
    );
    assert_eq!(q3.bits_per_weight(), 3.25);
}

#[test]
fn quantization_is_deterministic_across_thread_counts() {
    let (rows, cols) = (40, 576);
    let w = seeded(rows * cols, 5, 0.1);
    for format in Format::ALL {
        let many = quantize(format, rows, cols, &w).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let one = pool.install(|| quantize(format, rows, cols, &w).unwrap());
        assert_eq!(many.bytes, one.bytes, "{format}");
        assert_eq!(many.sq_error.to_bits(), one.sq_error.to_bits(), "{format}");
    }
}

#[test]
fn formats_have_stable_names_and_ids_and_check_lengths() {
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
        assert_eq!(Format::from_id(f.id()).unwrap(), f);
    }
    assert_eq!(Format::Q3.id(), 1);
    assert!("q5".parse::<Format>().is_err());
    assert!(Format::from_id(0).is_err());
    assert!(PackedMatrix::new(Format::Q3, 2, 64, &[0u8; 51]).is_err());
    assert!(PackedMatrix::new(Format::Q3, 2, 64, &[0u8; 52]).is_ok());
    assert!(PackedMatrix::new(Format::Q3, usize::MAX, 64, &[0u8; 52]).is_err());
}

#[test]
fn ragged_rows_end_in_a_whole_block_with_zero_level_padding() {
    // 33 columns: one full block and a block holding 1 weight + 31 absent codes.
    let (rows, cols) = (3, 33);
    let w = seeded(rows * cols, 21, 0.1);
    for (format, zero_code) in [(Format::Q3, 4usize), (Format::Q3Rtn, 4)] {
        let q = quantize(format, rows, cols, &w).unwrap();
        assert_eq!(q.bytes.len(), rows * 2 * 13);
        for r in 0..rows {
            let tail = &q.matrix().row(r)[13..26];
            for i in 1..32 {
                assert_eq!(
                    waste_kernels::q3::code(tail, i),
                    zero_code,
                    "{format} row {r} code {i}"
                );
            }
        }
    }
    let q = quantize(Format::Q4, rows, cols, &w).unwrap();
    for r in 0..rows {
        let tail = &q.matrix().row(r)[17..34];
        for i in 1..32 {
            assert_eq!(
                waste_kernels::q4::code(tail, i),
                usize::from(waste_kernels::q4::ZERO_CODE)
            );
        }
    }
    let q = quantize(Format::Q8, rows, cols, &w).unwrap();
    for r in 0..rows {
        assert!(q.matrix().row(r)[34 + 3..68].iter().all(|&b| b == 0));
    }
}
