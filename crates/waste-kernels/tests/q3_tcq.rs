//! `q3-tcq`'s Viterbi search: every ISA's forward pass gives the scalar
//! specification's back pointers and final state bit for bit, and the
//! search finds the least-error path (checked by brute force over every
//! branch sequence of short rows).

use waste_kernels::q3tcq::viterbi::Search;
use waste_kernels::q3tcq::{Code, LEVELS_3, LEVELS_4, SCALES, STATES, is_wide, subset};
use waste_kernels::quant::Isa;

fn lcg(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
}

/// One search problem: rotated row, per-step scales, wide steps, live steps.
type Problem = (Vec<f32>, Vec<f32>, Vec<bool>, usize);

/// Seeded search problems: ragged lengths, padding, outliers, zeros,
/// huge values, every scale range.
fn problems() -> Vec<Problem> {
    let mut out = Vec::new();
    let mut r = lcg(7);
    for (case, len) in [1usize, 5, 32, 64, 96, 192, 224, 416, 1000]
        .into_iter()
        .enumerate()
    {
        let k = len.div_ceil(32).clamp(1, 6);
        let scale = 10f32.powi(case as i32 % 5 - 3);
        let x: Vec<f32> = (0..len)
            .map(|i| match (case + i) % 53 {
                0 => 0.0,
                1 => scale * 40.0,
                2 if case == 7 => 1e30,
                _ => scale * (r() + r() + r()),
            })
            .collect();
        let s = case * 37 % 256;
        let d = vec![SCALES[s]; len];
        let wide: Vec<bool> = (0..len).map(|t| is_wide(k, t % (32 * k))).collect();
        for live in [len, len - len / 3] {
            out.push((x.clone(), d.clone(), wide.clone(), live));
        }
    }
    out
}

#[test]
fn forward_matches_forward_ref_on_every_isa() {
    for isa in Isa::ALL.into_iter().filter(|&i| i != Isa::Ref) {
        if !isa.available() {
            println!("SKIPPED: {}", isa.name());
            continue;
        }
        for (n, (x, d, wide, live)) in problems().iter().enumerate() {
            let s = Search {
                x,
                d,
                wide,
                live: *live,
            };
            let (mut want, mut got) = (vec![0u64; x.len()], vec![0u64; x.len()]);
            let end_want = s.forward_ref(&mut want);
            let end_got = s.forward_on(isa, &mut got);
            assert_eq!(end_got, end_want, "{} problem {n}: final state", isa.name());
            assert_eq!(got, want, "{} problem {n}: back pointers", isa.name());
        }
    }
}

fn level(c: Code, wide: bool) -> f32 {
    let i = usize::from(c.level);
    f32::from(if wide { LEVELS_4[i] } else { LEVELS_3[i] })
}

#[test]
fn viterbi_finds_the_least_error_path() {
    let mut r = lcg(11);
    for case in 0..24 {
        let len = 4 + case % 9;
        let x: Vec<f32> = (0..len).map(|_| r() * 0.2).collect();
        let d = vec![SCALES[40 + case * 3]; len];
        let wide: Vec<bool> = (0..len).map(|t| (t + case) % 3 == 0).collect();
        let s = Search {
            x: &x,
            d: &d,
            wide: &wide,
            live: len,
        };
        let mut back = vec![0u64; len];
        let end = s.forward_ref(&mut back);
        let mut codes = vec![Code::default(); len];
        s.traceback(end, &back, &mut codes);
        // The path is a trellis path from state 0 and ends in `end`.
        let mut state = 0u32;
        let mut found = 0f64;
        for (t, c) in codes.iter().enumerate() {
            assert_eq!(u32::from(c.level) % 4, subset(state, u32::from(c.branch)));
            state = ((state << 1) | u32::from(c.branch)) & (STATES as u32 - 1);
            found += f64::from(x[t] - d[t] * level(*c, wide[t])).powi(2);
        }
        assert_eq!(state, end);
        // Brute force: every branch sequence, the nearest level of each
        // step's subset.
        let mut best = f64::INFINITY;
        for bits in 0u32..1 << len {
            let mut state = 0u32;
            let mut e = 0f64;
            for t in 0..len {
                let b = (bits >> t) & 1;
                let j = subset(state, b) as usize;
                let levels: &[i8] = if wide[t] { &LEVELS_4 } else { &LEVELS_3 };
                e += levels
                    .iter()
                    .skip(j)
                    .step_by(4)
                    .map(|&l| f64::from(x[t] - d[t] * f32::from(l)).powi(2))
                    .fold(f64::INFINITY, f64::min);
                state = ((state << 1) | b) & (STATES as u32 - 1);
            }
            best = best.min(e);
        }
        assert!(
            found <= best * (1.0 + 1e-5) + 1e-12,
            "case {case}: the search found {found}, the best path costs {best}"
        );
    }
}

/// Seeded weights with a few large ones, (rows, cols).
fn weights(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut r = lcg(seed);
    (0..rows * cols)
        .map(|i| {
            let v = 0.05 * (r() + r() + r());
            if i % 97 == 5 { 8.0 * v } else { v }
        })
        .collect()
}

#[test]
fn products_on_every_table_are_the_references() {
    use waste_kernels::q3tcq::rotated_acts;
    use waste_kernels::quant::{Format, Kernels, quantize};
    let reference = Kernels::by_name("ref").unwrap();
    for (rows, cols) in [(7, 32), (5, 100), (3, 576), (4, 2048), (2, 416), (3, 224)] {
        let q = quantize(Format::Q3Tcq, rows, cols, &weights(rows, cols, cols as u64)).unwrap();
        let deq = q.matrix().dequantize();
        let row_bytes = Format::Q3Tcq.row_bytes(cols);
        // The products' own activations (one scale per superblock), and
        // activations with a scale per block.
        for (n, shared) in [1, 3, 11].into_iter().flat_map(|n| [(n, true), (n, false)]) {
            let x = weights(n, cols, 99 + n as u64);
            let acts = if shared {
                rotated_acts(&x, n, cols)
            } else {
                waste_kernels::quant::QuantizedActs::new(&x, n, cols)
            };
            let mut want = vec![0f32; rows * n];
            reference.rows_dot(Format::Q3Tcq, &q.bytes, row_bytes, &acts, &mut want);
            for k in Kernels::variants() {
                let mut got = vec![0f32; rows * n];
                k.rows_dot(Format::Q3Tcq, &q.bytes, row_bytes, &acts, &mut got);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // Cauchy-Schwarz bounds the summed magnitudes by the
                    // norms, which the rotation keeps.
                    let norm =
                        |v: &[f32]| v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
                    let (r, t) = (i / n, i % n);
                    let mag =
                        norm(&deq[r * cols..(r + 1) * cols]) * norm(&x[t * cols..(t + 1) * cols]);
                    let tol = 1e-6 * cols.div_ceil(32) as f64 * mag + 1e-30;
                    assert!(
                        f64::from((g - w).abs()) <= tol,
                        "{} {rows}x{cols} n {n} shared {shared} row {r} act {t}: {g} vs {w}",
                        k.name()
                    );
                }
            }
        }
    }
}

#[test]
fn batched_products_on_every_table_are_the_references() {
    use waste_kernels::par::matmul_par;
    use waste_kernels::q3tcq::rotated_acts;
    use waste_kernels::quant::{Format, Kernels, quantize};
    let reference = Kernels::by_name("ref").unwrap();
    let mut batched = 0;
    for (rows, cols) in [(9, 576), (5, 224), (3, 2048)] {
        let q = quantize(Format::Q3Tcq, rows, cols, &weights(rows, cols, cols as u64)).unwrap();
        let row_bytes = Format::Q3Tcq.row_bytes(cols);
        for n in [8, 17] {
            let x = weights(n, cols, 5 + n as u64);
            let acts = rotated_acts(&x, n, cols);
            // (rows, n) from the row reference.
            let mut want = vec![0f32; rows * n];
            reference.rows_dot(Format::Q3Tcq, &q.bytes, row_bytes, &acts, &mut want);
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            for k in Kernels::variants() {
                batched += usize::from(k.tile(Format::Q3Tcq, n).is_some());
                // (n, rows), through the table's batched kernel where it has one.
                let mut got = vec![0f32; n * rows];
                matmul_par(k, &q.matrix(), &acts, &mut got);
                for r in 0..rows {
                    for t in 0..n {
                        let (g, w) = (got[t * rows + r], want[r * n + t]);
                        assert!(
                            (g - w).abs() <= 1e-5 * scale,
                            "{} {rows}x{cols} n {n} row {r} act {t}: {g} vs {w}",
                            k.name()
                        );
                    }
                }
            }
        }
    }
    if cfg!(target_arch = "x86_64") && waste_kernels::quant::Isa::Avx2.available() {
        assert!(batched > 0, "no table took the batched kernel");
    }
}

#[test]
fn product_is_the_decoded_matrix_times_the_activations() {
    use waste_kernels::quant::{Format, quantize};
    for (rows, cols, n) in [(6, 576, 1), (4, 384, 2), (3, 100, 1), (5, 7168, 1)] {
        let q = quantize(
            Format::Q3Tcq,
            rows,
            cols,
            &weights(rows, cols, 3 + cols as u64),
        )
        .unwrap();
        let w = q.matrix().dequantize();
        let x = weights(n, cols, 7);
        let mut got = vec![0f32; n * rows];
        q.matrix().matmul(&x, n, &mut got).unwrap();
        let (mut diff, mut norm) = (0f64, 0f64);
        for t in 0..n {
            for r in 0..rows {
                let want: f64 = (0..cols)
                    .map(|c| f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]))
                    .sum();
                diff += (f64::from(got[t * rows + r]) - want).powi(2);
                norm += want * want;
            }
        }
        // Only the int8 rounding of the rotated activations differs.
        let rel = (diff / norm).sqrt();
        assert!(rel < 0.02, "{rows}x{cols} n {n}: {rel}");
    }
}
