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

mod common;

use common::seeded;

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
            // (37: past two of the kernels' blocks of 16 rows)
            for n_rows in [0, 1, 5, 37] {
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

/// The f16 cache kernels of every ISA (and `_ref`) against the same ISA's
/// f32 kernels on the rows widened, bit for bit: an f16 KV cache changes
/// what is stored, never how it is summed. Values past f16's range and
/// subnormals included, rows at a wider stride as the cache holds them.
#[test]
fn f16_cache_rows_give_the_f32_kernels_bits_on_their_widened_values() {
    use half::f16;
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let half = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<f16>>();
    let wide = |v: &[f16]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        for (i, len) in [0, 1, 7, 8, 9, 15, 16, 17, 31, 128, 130, 576]
            .into_iter()
            .enumerate()
        {
            let mut keys: Vec<Vec<f16>> = (0..4)
                .map(|r| half(&seeded(len, 11_000 + 10 * i as u64 + r, 1.0)))
                .collect();
            if len > 3 {
                keys[1][0] = f16::from_f32(3.0e-6); // subnormal
                keys[2][3] = f16::MAX;
            }
            let kw: Vec<Vec<f32>> = keys.iter().map(|k| wide(k)).collect();
            let qs: Vec<Vec<f32>> = (0..4)
                .map(|r| seeded(len, 11_500 + 10 * i as u64 + r, 1.0))
                .collect();
            let k4 = [&keys[0][..], &keys[1], &keys[2], &keys[3]];
            let w4 = [&kw[0][..], &kw[1], &kw[2], &kw[3]];
            let q4 = [&qs[0][..], &qs[1], &qs[2], &qs[3]];
            let name = isa.name();
            assert_eq!(
                k.dot(&qs[0], &keys[0]).to_bits(),
                k.dot(&qs[0], &kw[0]).to_bits(),
                "{name} dot {len}"
            );
            assert_eq!(
                bits(&k.dot4(&qs[1], k4)),
                bits(&k.dot4(&qs[1], w4)),
                "{name} dot4 {len}"
            );
            let (g, w) = (k.dot4x4(q4, k4), k.dot4x4(q4, w4));
            for r in 0..4 {
                assert_eq!(bits(&g[r]), bits(&w[r]), "{name} dot4x4 {len} row {r}");
            }
            for n_rows in [0, 1, 5, 37] {
                let stride = len + 3;
                let v = half(&seeded(n_rows * stride, 12_000 + i as u64, 2.0));
                let vw = wide(&v);
                let ps: Vec<Vec<f32>> = (0..4)
                    .map(|h| seeded(n_rows, 12_100 + 10 * i as u64 + h, 0.5))
                    .collect();
                let o0: Vec<Vec<f32>> = (0..4)
                    .map(|h| seeded(len, 12_600 + 10 * i as u64 + h, 3.0))
                    .collect();
                let (mut got, mut want) = (o0[0].clone(), o0[0].clone());
                k.axpy_rows(&ps[0], &v, stride, &mut got);
                k.axpy_rows(&ps[0], &vw, stride, &mut want);
                assert_eq!(bits(&got), bits(&want), "{name} axpy_rows {len} x {n_rows}");
                let (mut got, mut want) = (o0.clone(), o0.clone());
                let p4 = [&ps[0][..], &ps[1], &ps[2], &ps[3]];
                let [g0, g1, g2, g3] = &mut got[..] else {
                    unreachable!()
                };
                k.axpy_rows4(p4, &v, stride, [g0, g1, g2, g3]);
                let [w0, w1, w2, w3] = &mut want[..] else {
                    unreachable!()
                };
                k.axpy_rows4(p4, &vw, stride, [w0, w1, w2, w3]);
                for h in 0..4 {
                    assert_eq!(
                        bits(&got[h]),
                        bits(&want[h]),
                        "{name} axpy_rows4 {len} x {n_rows} head {h}"
                    );
                }
            }
        }
        println!("checked {}", isa.name());
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

/// `exp_ref` against f64's `exp`: within 1 ulp of the rounded truth for
/// every normal result over its whole range, within a subnormal ulp below,
/// and the limits and specials as libm gives them.
#[test]
fn exp_ref_is_within_one_ulp_of_f64() {
    use waste_kernels::dense::exp::exp_ref;
    let mut worst = 0f64;
    let steps = 400_000;
    for i in 0..=steps {
        let x = -103.9 + (88.72 + 103.9) * i as f32 / steps as f32;
        let got = f64::from(exp_ref(x));
        let want = f64::from(x).exp();
        if want >= f64::from(f32::MIN_POSITIVE) {
            let ulp = f64::from(f32::EPSILON) * f64::from(want as f32).abs();
            let err = (got - want).abs() / ulp;
            worst = worst.max(err);
            assert!(err <= 1.0, "exp({x}) = {got}, f64 {want}: {err} ulp");
        } else {
            let sub_ulp = f64::from(f32::from_bits(1));
            assert!(
                (got - want).abs() <= sub_ulp,
                "exp({x}) = {got}, f64 {want}"
            );
        }
    }
    println!("worst error over the normal range: {worst:.3} ulp");
    assert_eq!(exp_ref(0.0), 1.0);
    assert_eq!(exp_ref(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp_ref(89.0), f32::INFINITY);
    assert_eq!(exp_ref(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_ref(-104.0), 0.0);
    assert!(exp_ref(f32::NAN).is_nan());
    assert!(exp_ref(88.72).is_finite());
}

/// Every ISA's `exp_sub` and `silu_mul` give the reference's bits, over
/// lengths that leave every tail, with specials mixed in; and SiLU is the
/// f64 `g / (1 + e^-g)` within f32 rounding.
#[test]
fn exp_and_silu_are_the_reference_bit_for_bit_on_every_isa() {
    use waste_kernels::dense::exp::{exp_sub_ref, silu_mul_ref};
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        88.7,
        88.8,
        -87.5,
        -103.9,
        -104.5,
        1e-30,
        -1e-30,
    ];
    for (isa, k) in isas() {
        let Some(k) = k else { continue };
        for len in (0..40).chain([255, 256, 1000]) {
            let mut x = seeded(len, 11_000 + len as u64, 60.0);
            for (i, s) in specials.iter().enumerate() {
                if i * 3 < len {
                    x[i * 3] = *s;
                }
            }
            let u = seeded(len, 12_000 + len as u64, 2.0);
            for m in [0.0, 3.5, f32::NEG_INFINITY] {
                let (mut got, mut want) = (x.clone(), x.clone());
                k.exp_sub(&mut got, m);
                exp_sub_ref(&mut want, m);
                assert_eq!(bits(&got), bits(&want), "{} exp_sub len {len}", isa.name());
            }
            let (mut got, mut want) = (x.clone(), x.clone());
            k.silu_mul(&mut got, &u);
            silu_mul_ref(&mut want, &u);
            assert_eq!(bits(&got), bits(&want), "{} silu_mul len {len}", isa.name());
            for ((&g, &u), &w) in x.iter().zip(&u).zip(&want) {
                if !g.is_finite() {
                    continue;
                }
                let (g, u) = (f64::from(g), f64::from(u));
                let exact = g / (1.0 + (-g).exp()) * u;
                assert!(
                    (f64::from(w) - exact).abs() <= 1e-6 * exact.abs() + 1e-37,
                    "silu({g}) * {u} = {w}, f64 {exact}"
                );
            }
        }
    }
}
