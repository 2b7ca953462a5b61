//! The dense (f32 / bf16) products of every ISA this host runs against the
//! scalar `_ref` kernels and an f64 reference (STYLE 4.4.6): seeded shapes
//! with ragged tails (cols not a multiple of 8 or 16, rows not a multiple of
//! the micro-tile, n = 1, 2, 3, 5, 17, k-blocked widths, split activation
//! blocks), plus the bit-for-bit properties the model relies on: decode equals
//! prefill, bf16 equals its f32 copy, `dot_f32` equals a product entry. ISAs
//! the host lacks are printed as skipped.

use half::bf16;
use waste_kernels::Matrix;
use waste_kernels::dense::{self, DenseKernels};
use waste_kernels::quant::Isa;

/// Seeded Gaussian-ish values (sum of uniforms) from a 64-bit LCG.
fn seeded(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut u = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    (0..len).map(|_| (u() + u() + u() + u()) * scale).collect()
}

/// (rows, cols, n): ragged rows and cols, every n of the brief, widths past
/// the 1024-wide k-block (parked accumulators), and n past one activation block.
fn cases() -> Vec<(usize, usize, usize)> {
    let mut v = Vec::new();
    for (rows, cols) in [
        (1, 1),
        (3, 7),
        (5, 8),
        (4, 9),
        (17, 15),
        (16, 16),
        (9, 17),
        (13, 33),
        (33, 100),
        (7, 576),
        (6, 1025),
        (5, 2100),
    ] {
        for n in [1, 2, 3, 5, 17] {
            v.push((rows, cols, n));
        }
    }
    v.push((9, 1030, 70));
    v
}

/// Every ISA: the kernels, or `None` (printed as skipped).
fn isas() -> Vec<(Isa, Option<&'static DenseKernels>)> {
    Isa::ALL
        .into_iter()
        .map(|i| {
            let k = DenseKernels::for_isa(i);
            if k.is_none() {
                println!("SKIPPED: {} (this CPU lacks it)", i.name());
            }
            (i, k)
        })
        .collect()
}

fn ref_kernels() -> &'static DenseKernels {
    DenseKernels::for_isa(Isa::Ref).expect("ref always runs")
}

/// The f32 matrix and its bf16 rounding, with the f32 values of the latter.
fn matrices(rows: usize, cols: usize, seed: u64) -> (Matrix, Matrix, Vec<f32>, Vec<f32>) {
    let w = seeded(rows * cols, seed, 0.5);
    let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
    let wb_f32: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
    (
        Matrix::f32(rows, cols, w.clone()).unwrap(),
        Matrix::bf16(rows, cols, wb).unwrap(),
        w,
        wb_f32,
    )
}

/// `(Σ w·x in f64, Σ |w·x|)` for every (t, r), laid out (n, rows).
fn reference(w: &[f32], rows: usize, cols: usize, x: &[f32], n: usize) -> Vec<(f64, f64)> {
    let mut out = vec![(0.0, 0.0); n * rows];
    for t in 0..n {
        for r in 0..rows {
            let (mut s, mut mag) = (0f64, 0f64);
            for c in 0..cols {
                let p = f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]);
                s += p;
                mag += p.abs();
            }
            out[t * rows + r] = (s, mag);
        }
    }
    out
}

#[test]
fn every_isa_matches_ref_and_the_f64_reference() {
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        let mut checked = 0;
        for (i, (rows, cols, n)) in cases().into_iter().enumerate() {
            let (m32, m16, w, wb) = matrices(rows, cols, i as u64);
            let x = seeded(n * cols, 1000 + i as u64, 1.0);
            for (m, wv, dtype) in [(&m32, &w, "f32"), (&m16, &wb, "bf16")] {
                let mut got = vec![f32::NAN; n * rows];
                m.matmul_with(k, &x, n, &mut got).unwrap();
                let mut want = vec![f32::NAN; n * rows];
                m.matmul_with(ref_kernels(), &x, n, &mut want).unwrap();
                for (j, &(exact, mag)) in reference(wv, rows, cols, &x, n).iter().enumerate() {
                    // 1e-6·cols relative to the summed magnitudes.
                    let tol = 1e-6 * cols as f64 * mag + 1e-30;
                    let what = format!("{} {dtype} {rows}x{cols} n={n} [{j}]", isa.name());
                    let (g, r) = (f64::from(got[j]), f64::from(want[j]));
                    assert!((g - exact).abs() <= tol, "{what}: {g} vs f64 {exact}");
                    assert!((r - exact).abs() <= tol, "{what}: ref {r} vs f64 {exact}");
                    assert!((g - r).abs() <= tol, "{what}: {g} vs ref {r}");
                    checked += 1;
                }
            }
        }
        println!("{}: {checked} products checked", isa.name());
    }
}

#[test]
fn decode_equals_prefill_and_bf16_its_f32_copy_bit_for_bit() {
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        for (i, (rows, cols, n)) in cases().into_iter().enumerate() {
            let (m32, m16, _, wb) = matrices(rows, cols, 50 + i as u64);
            let m16_as_f32 = Matrix::f32(rows, cols, wb).unwrap();
            let x = seeded(n * cols, 2000 + i as u64, 1.0);
            let what = format!("{} {rows}x{cols} n={n}", isa.name());
            for m in [&m32, &m16] {
                let mut all = vec![0f32; n * rows];
                m.matmul_with(k, &x, n, &mut all).unwrap();
                for t in 0..n {
                    let mut one = vec![0f32; rows];
                    m.matmul_with(k, &x[t * cols..(t + 1) * cols], 1, &mut one)
                        .unwrap();
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&one),
                        bits(&all[t * rows..(t + 1) * rows]),
                        "{what} t={t}"
                    );
                }
            }
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            m16.matmul_with(k, &x, n, &mut a).unwrap();
            m16_as_f32.matmul_with(k, &x, n, &mut b).unwrap();
            assert_eq!(a, b, "{what}: bf16 vs its f32 copy");
        }
    }
}

#[test]
fn dot_equals_a_product_entry_and_the_f64_dot() {
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        for (i, len) in [0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 1025, 2100]
            .into_iter()
            .enumerate()
        {
            let a = seeded(len, 3000 + i as u64, 1.0);
            let b = seeded(len, 4000 + i as u64, 1.0);
            let got = k.dot(&a, &b);
            let mut entry = [0f32];
            if len > 0 {
                Matrix::f32(1, len, a.clone())
                    .unwrap()
                    .matmul_with(k, &b, 1, &mut entry)
                    .unwrap();
            }
            assert_eq!(
                got.to_bits(),
                entry[0].to_bits(),
                "{} len {len}",
                isa.name()
            );
            let (exact, mag) = a.iter().zip(&b).fold((0f64, 0f64), |(s, m), (x, y)| {
                let p = f64::from(*x) * f64::from(*y);
                (s + p, m + p.abs())
            });
            let tol = 1e-6 * len as f64 * mag + 1e-30;
            assert!(
                (f64::from(got) - exact).abs() <= tol,
                "{} len {len}",
                isa.name()
            );
        }
    }
}

#[test]
fn dot4_is_four_dots_and_axpy_rows_the_scalar_loop_bit_for_bit_on_every_isa() {
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        for (i, len) in [0, 1, 7, 8, 9, 15, 16, 17, 31, 128, 130, 1025]
            .into_iter()
            .enumerate()
        {
            let a = seeded(len, 7000 + i as u64, 1.0);
            let rows: Vec<Vec<f32>> = (0..4)
                .map(|r| seeded(len, 7100 + 10 * i as u64 + r, 1.0))
                .collect();
            let got = k.dot4(&a, [&rows[0], &rows[1], &rows[2], &rows[3]]);
            let want: Vec<f32> = rows.iter().map(|b| k.dot(&a, b)).collect();
            assert_eq!(bits(&got), bits(&want), "{} dot4 len {len}", isa.name());
            // four queries against four keys: each pair the ISA's own dot
            let qs: Vec<Vec<f32>> = (0..4)
                .map(|r| seeded(len, 7200 + 10 * i as u64 + r, 1.0))
                .collect();
            let q4 = [&qs[0][..], &qs[1], &qs[2], &qs[3]];
            let k4 = [&rows[0][..], &rows[1], &rows[2], &rows[3]];
            let got = k.dot4x4(q4, k4);
            for (r, q) in qs.iter().enumerate() {
                let want: Vec<f32> = rows.iter().map(|b| k.dot(q, b)).collect();
                assert_eq!(
                    bits(&got[r]),
                    bits(&want),
                    "{} dot4x4 len {len}",
                    isa.name()
                );
                // and the scalar specification within f32 rounding of the length
                for (c, b) in rows.iter().enumerate() {
                    let exact = waste_kernels::dense::dot_f32_ref(q, b);
                    let scale: f32 = q.iter().zip(b).map(|(x, y)| (x * y).abs()).sum();
                    assert!(
                        (got[r][c] - exact).abs() <= 1e-5 * scale.max(1.0),
                        "{} dot4x4 against _ref len {len}",
                        isa.name()
                    );
                }
            }
            // rows of `len` values at a wider stride, as a KV cache holds them
            for n_rows in [0, 1, 5] {
                let stride = len + 3;
                let v = seeded(n_rows * stride, 8000 + i as u64, 1.0);
                let p = seeded(n_rows, 9000 + i as u64, 0.5);
                let o0 = seeded(len, 9500 + i as u64, 3.0);
                let mut got = o0.clone();
                k.axpy_rows(&p, &v, stride, &mut got);
                // the loop attention ran before the kernel: a product, then a sum
                let mut want = o0.clone();
                for (j, pj) in p.iter().enumerate() {
                    for (o, x) in want.iter_mut().zip(&v[j * stride..]) {
                        *o += pj * x;
                    }
                }
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{} axpy_rows len {len}",
                    isa.name()
                );
                // four heads' weights over the same value rows: each the
                // scalar loop's bits too
                let ps: Vec<Vec<f32>> = (0..4)
                    .map(|h| seeded(n_rows, 9100 + 10 * i as u64 + h, 0.5))
                    .collect();
                let mut outs: Vec<Vec<f32>> = (0..4)
                    .map(|h| seeded(len, 9600 + 10 * i as u64 + h, 3.0))
                    .collect();
                let mut wants = outs.clone();
                for (p, w) in ps.iter().zip(&mut wants) {
                    waste_kernels::dense::axpy_rows_f32_ref(p, &v, stride, w);
                }
                let [o0, o1, o2, o3] = &mut outs[..] else {
                    unreachable!()
                };
                k.axpy_rows4(
                    [&ps[0], &ps[1], &ps[2], &ps[3]],
                    &v,
                    stride,
                    [o0, o1, o2, o3],
                );
                for (h, (g, w)) in outs.iter().zip(&wants).enumerate() {
                    assert_eq!(
                        bits(g),
                        bits(w),
                        "{} axpy_rows4 head {h} len {len}",
                        isa.name()
                    );
                }
            }
        }
    }
}

#[test]
fn dispatch_follows_the_quantized_kernels_choice() {
    let k = dense::kernels();
    assert_eq!(k.isa(), waste_kernels::kernels().isa());
    let (a, b) = (seeded(77, 1, 1.0), seeded(77, 2, 1.0));
    assert_eq!(dense::dot_f32(&a, &b).to_bits(), k.dot(&a, &b).to_bits());
    println!("dispatched: {}", k.isa().name());
}
