//! Backbone matrices held in waste's 4- and 3-bit blocks (`Matrix::Packed`)
//! on every ISA this host runs (STYLE 4.4.6): the product equals the scalar
//! `_ref` row dots over the same int8 activations, and is within a stated
//! bound of the f32 product of the dequantized matrix: the activations'
//! rounding, at most half a step (`d = amax / 127` of each group of 32, or
//! of each superblock for `q3-tcq`) per value, times the weights'
//! magnitudes, `Σ_b d_b/2 · Σ_{k∈b} |w_k|` with `w` the dequantized
//! weights (for `q3-tcq` both in the rotated basis its products run in),
//! plus f32 summation slack. ISAs the host lacks are printed as skipped.

use waste_kernels::dense::DenseKernels;
use waste_kernels::quant::{Isa, Kernels, QuantizedActs};
use waste_kernels::{Format, Matrix, quantize};

mod common;

use common::seeded;

const FORMATS: [Format; 4] = [Format::Q4, Format::Q3, Format::Q3Rtn, Format::Q3Tcq];

/// (rows, cols, n): one block, many blocks, ragged tails, rows past the
/// parallel split, prefill widths.
const CASES: [(usize, usize, usize); 9] = [
    (1, 32, 1),
    (3, 7, 2),
    (17, 33, 1),
    (9, 96, 3),
    (40, 100, 5),
    (33, 576, 1),
    (70, 576, 17),
    (5, 1100, 2),
    (65, 2100, 1),
];

fn packed(format: Format, rows: usize, cols: usize, seed: u64) -> Matrix {
    let w = seeded(rows * cols, seed, 0.5);
    let q = quantize(format, rows, cols, &w).unwrap();
    Matrix::blocks(format, rows, cols, q.bytes).unwrap()
}

/// `v` in the basis `format`'s products take it in: `q3-tcq`'s rotation.
fn basis(format: Format, v: &[f32]) -> Vec<f32> {
    let mut v = v.to_vec();
    if format == Format::Q3Tcq {
        waste_kernels::q3tcq::rotate(&mut v);
    }
    v
}

/// `Σ|w_k x_k|` and the activation-rounding bound of one output.
fn bounds(w: &[f32], x: &[f32], acts: &QuantizedActs, t: usize) -> (f64, f64) {
    let mut abs = 0f64;
    let mut bound = 0f64;
    for (b, (wb, xb)) in w.chunks(32).zip(x.chunks(32)).enumerate() {
        let d = f64::from(acts.d[t * acts.blocks + b]);
        let wsum: f64 = wb.iter().map(|v| f64::from(v.abs())).sum();
        abs += wb
            .iter()
            .zip(xb)
            .map(|(a, c)| f64::from((a * c).abs()))
            .sum::<f64>();
        // Half a step, and a hair for the f32 reciprocal of d.
        bound += 0.501 * d * wsum;
    }
    (abs, bound)
}

#[test]
fn packed_products_equal_ref_row_dots_and_bound_the_dequantized_product() {
    let scalar = Kernels::for_isa(Isa::Ref).expect("ref always runs");
    for isa in Isa::ALL {
        let Some(k) = DenseKernels::for_isa(isa) else {
            println!("SKIPPED: {} (this CPU lacks it)", isa.name());
            continue;
        };
        for format in FORMATS {
            for (i, &(rows, cols, n)) in CASES.iter().enumerate() {
                let m = packed(format, rows, cols, i as u64 + 1);
                let x = seeded(n * cols, 100 + i as u64, 1.0);
                let acts = format.quantized_acts(&x, n, cols);
                let deq = m.to_f32();
                let mut got = vec![0f32; n * rows];
                m.matmul_with(k, &x, n, &mut got).unwrap();
                let Matrix::Packed { data, .. } = &m else {
                    panic!("{format} is held as Matrix::Packed");
                };
                let rb = format.row_bytes(cols);
                let mut want = vec![0f32; n];
                for r in 0..rows {
                    scalar.row_dot(format, &data[r * rb..(r + 1) * rb], &acts, &mut want);
                    let w = &deq[r * cols..(r + 1) * cols];
                    for t in 0..n {
                        let xt = &x[t * cols..(t + 1) * cols];
                        let g = got[t * rows + r];
                        let (abs, bound) = bounds(&basis(format, w), &basis(format, xt), &acts, t);
                        let what = format!("{} {format} {rows}x{cols} n={n} [{t},{r}]", isa.name());
                        let slack = 1e-5 * abs + 1e-6;
                        assert!(
                            f64::from((g - want[t]).abs()) <= slack,
                            "{what}: {g} vs ref {}",
                            want[t]
                        );
                        let exact: f64 = w
                            .iter()
                            .zip(xt)
                            .map(|(a, c)| f64::from(*a) * f64::from(*c))
                            .sum();
                        assert!(
                            (f64::from(g) - exact).abs() <= bound + slack,
                            "{what}: {g} vs dequantized f64 {exact}, bound {bound}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn packed_matrices_keep_their_blocks_through_rows_slices_and_transposes() {
    for format in FORMATS {
        let (rows, cols) = (13, 70);
        let m = packed(format, rows, cols, 7);
        assert_eq!(m.format(), Some(format));
        assert_eq!(
            m.size_bytes(),
            format.packed_size(rows, cols).unwrap(),
            "{format}: held as its blocks"
        );
        let all = m.to_f32();
        let mut row = vec![0f32; cols];
        for r in 0..rows {
            m.row_f32_into(r, &mut row);
            assert_eq!(row, all[r * cols..(r + 1) * cols], "{format} row {r}");
        }
        let s = m.slice_rows(4, 9).unwrap();
        assert!(matches!(s, Matrix::Packed { .. }));
        assert_eq!(s.to_f32(), all[4 * cols..9 * cols]);
        let t = m.transposed();
        assert_eq!((t.rows(), t.cols()), (cols, rows));
        assert_eq!(t.to_f32()[rows + 2], all[2 * cols + 1], "t[1][2] = m[2][1]");
        // A product through one ISA's row call equals the parallel product.
        let x = seeded(3 * cols, 9, 1.0);
        let k = waste_kernels::dense::kernels();
        let whole = m.matmul_alloc(&x, 3).unwrap();
        let mut by_rows = vec![0f32; rows * 3]; // (rows, n)
        k.rows(&m, 0, &x, 3, &mut by_rows);
        for r in 0..rows {
            for t in 0..3 {
                assert_eq!(
                    by_rows[r * 3 + t],
                    whole[t * rows + r],
                    "{format} [{t},{r}]"
                );
            }
        }
    }
}

#[test]
fn blocks_refuse_wrong_sizes_and_formats_without_a_packed_backbone() {
    let q = quantize(Format::Q4, 2, 64, &seeded(128, 1, 0.5)).unwrap();
    assert!(Matrix::blocks(Format::Q4, 2, 64, q.bytes[1..].to_vec()).is_err());
    assert!(Matrix::blocks(Format::Q3, 2, 64, q.bytes.clone()).is_err());
    assert!(Matrix::blocks(Format::Mxfp4, 2, 64, vec![0; 72]).is_err());
    let q8 = quantize(Format::Q8, 2, 64, &seeded(128, 1, 0.5)).unwrap();
    assert!(matches!(
        Matrix::blocks(Format::Q8, 2, 64, q8.bytes).unwrap(),
        Matrix::Q8 { .. }
    ));
}
