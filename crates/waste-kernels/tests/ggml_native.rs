//! GGUF tensors kept as their ggml blocks (`Format::Ggml`, `--experts
//! native` on a GGUF): ids and names derived from ggml's, sizes that refuse
//! partial blocks, rows decoding to gguf-py's values bit for bit (the
//! fixtures of `tests/data/ggml/`), products equal bit for bit to the dense
//! exact path on the decoded weights for one and several tokens, expert
//! records of ggml components computing what the dense expert computes, and
//! backbone matrices kept as ggml blocks (`Matrix::Ggml`, `--backbone
//! native` on a GGUF) computing what their f32 copy computes on every ISA.
//!
//! Types with an integer kernel (`ggml::dot`: the k-quants, Q8_0, Q4_0 and
//! the IQ4s) quantize their activations to 8 bits as llama.cpp does, so
//! their products are held to the exact f32 product within the error that
//! rounding allows ([`close`]); every other type stays bit for bit.

mod common;

use common::{Fixture, fixture};
use waste_kernels::dense::DenseKernels;
use waste_kernels::ggml::{self, GgmlType};
use waste_kernels::quant::{GGML_ID_BASE, Isa, QuantizedActs};
use waste_kernels::{
    Activation, DenseExpert, ExpertFfn, Format, Matrix, PackedExpert, PackedMatrix, Tensor,
    TensorData, build_record_raw, record_len,
};

/// Every decodable type but F32 and BF16 (which are `f32` / `bf16`).
fn ggml_types() -> impl Iterator<Item = GgmlType> {
    GgmlType::DECODABLE
        .into_iter()
        .filter(|t| !matches!(*t, GgmlType::F32 | GgmlType::BF16))
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Whether `got` may stand for the exact product `want` = Σ w·x of the
/// weight row `w` and activation row `x`: bit for bit where `ty` has no
/// integer kernel; else within the most that 8-bit activations can move it
/// (each by 0.6 of its block's step amax / 127: half a step of rounding,
/// plus Q8_0's f16 scale rounding) plus f32 rounding (1e-5 of Σ |w·x|).
fn close(ty: GgmlType, w: &[f32], x: &[f32], got: f32, want: f32) -> bool {
    let Some(pairing) = ggml::dot::pairing(ty) else {
        return same(got, want);
    };
    let block = if pairing == ggml::act::Pairing::Q8K {
        256
    } else {
        32
    };
    let bound: f64 = w
        .chunks(block)
        .zip(x.chunks(block))
        .map(|(w, x)| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let wsum: f64 = w.iter().map(|v| f64::from(v.abs())).sum();
            let mag: f64 = w
                .iter()
                .zip(x)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .map(f64::abs)
                .sum();
            wsum * 0.6 * f64::from(amax) / 127.0 + 1e-5 * mag
        })
        .sum();
    (f64::from(got) - f64::from(want)).abs() <= bound
}

/// Indices of (n, rows) products `got` that are not [`close`] to `want`.
fn far(
    ty: GgmlType,
    w: &[f32],
    x: &[f32],
    cols: usize,
    got: &[f32],
    want: &[f32],
) -> Option<usize> {
    let rows = w.len() / cols;
    (0..got.len()).find(|&i| {
        let (t, r) = (i / rows, i % rows);
        !close(
            ty,
            &w[r * cols..][..cols],
            &x[t * cols..][..cols],
            got[i],
            want[i],
        )
    })
}

/// The activations a product of `ty` sees: x itself, or for a type with an
/// integer kernel the values its 8-bit quantization of x stands for.
fn seen_by(ty: GgmlType, x: &[f32], n: usize, cols: usize) -> Vec<f32> {
    use ggml::act::GgmlActs;
    let Some(pairing) = ggml::dot::pairing(ty) else {
        return x.to_vec();
    };
    let mut acts = GgmlActs::default();
    acts.quantize(pairing, x, n, cols);
    common::dequantized_acts(&acts, pairing)
}

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| 0.1 + 2.0 * ((i as f32) + seed as f32).cos())
        .collect()
}

/// `rows` rows of `per_row` blocks taken cyclically from the fixture's
/// blocks whose reference values are all finite and far enough inside
/// f32's range that a block's products sum without overflow (MXFP4's
/// fixture holds exponents up to 2^122), with those values.
fn matrix_from(f: &Fixture, rows: usize, per_row: usize, skip: usize) -> (Vec<u8>, Vec<f32>) {
    let finite: Vec<usize> = (0..f.bytes.len() / f.block)
        .filter(|&b| f.want[b * f.qk..][..f.qk].iter().all(|v| v.abs() <= 1e30))
        .collect();
    assert!(!finite.is_empty());
    let (mut bytes, mut want) = (Vec::new(), Vec::new());
    for i in 0..rows * per_row {
        let b = finite[(i + skip) % finite.len()];
        bytes.extend_from_slice(&f.bytes[b * f.block..][..f.block]);
        want.extend_from_slice(&f.want[b * f.qk..][..f.qk]);
    }
    (bytes, want)
}

#[test]
fn ids_and_names_follow_ggml_and_plain_floats_stay_f32_and_bf16() {
    assert_eq!(Format::ggml(GgmlType::F32), Some(Format::F32));
    assert_eq!(Format::ggml(GgmlType::BF16), Some(Format::Bf16));
    for t in [GgmlType::Q8_K, GgmlType::Q8_1, GgmlType::I32, GgmlType(4)] {
        assert_eq!(Format::ggml(t), None, "{t}");
    }
    let mut n = 0;
    for t in ggml_types() {
        let f = Format::ggml(t).unwrap();
        assert_eq!(f, Format::Ggml(t));
        assert_eq!(u32::from(f.id()), u32::from(GGML_ID_BASE) + t.0, "{t}");
        assert_eq!(Some(f.name()), t.name());
        assert_eq!(Format::from_id(f.id()).unwrap(), f);
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
        assert!(f.is_exact() && !f.has_quantizer(), "{t}");
        n += 1;
    }
    assert_eq!(n, 23);
    // Retired and activation-only ids are unknown formats.
    for id in [
        GGML_ID_BASE + 4,
        GGML_ID_BASE + 15,
        GGML_ID_BASE,
        GGML_ID_BASE + 30,
    ] {
        assert!(Format::from_id(id).is_err(), "{id}");
    }
    let ids: std::collections::BTreeSet<u16> = Format::every().map(Format::id).collect();
    assert_eq!(ids.len(), Format::every().count());
}

#[test]
fn sizes_are_whole_blocks_per_row() {
    let q4k = Format::ggml(GgmlType::Q4_K).unwrap();
    assert_eq!(q4k.row_bytes(512), 288);
    assert_eq!(q4k.packed_size(3, 512), Some(3 * 288));
    assert_eq!(q4k.packed_size(3, 300), None);
    assert!(PackedMatrix::new(q4k, 3, 300, &[0; 3 * 288]).is_err());
    assert!(PackedMatrix::new(q4k, 3, 512, &[0; 3 * 288 - 1]).is_err());
    let q8 = Format::ggml(GgmlType::Q8_0).unwrap();
    assert_eq!(q8.packed_size(2, 64), Some(2 * 2 * 34));
    let f16 = Format::ggml(GgmlType::F16).unwrap();
    assert_eq!(f16.packed_size(2, 3), Some(12));
}

#[test]
fn rows_decode_to_gguf_py_and_products_equal_the_dense_exact_path() {
    for t in ggml_types() {
        let f = fixture(t);
        let format = Format::ggml(t).unwrap();
        // Several shapes: one block a row, and rows of several blocks, with
        // more rows than the parallel split's chunk.
        for (rows, per_row) in [(1, 1), (3, 2), (37, 3)] {
            let cols = per_row * f.qk;
            let (bytes, want) = matrix_from(&f, rows, per_row, rows);
            let m = PackedMatrix::new(format, rows, cols, &bytes).unwrap();
            let deq = m.dequantize();
            let bad = (0..deq.len()).find(|&i| !same(deq[i], want[i]));
            assert_eq!(bad, None, "{t} {rows}x{cols}: differs from gguf-py");
            let dense = Matrix::f32(rows, cols, want.clone()).unwrap();
            for n in [1, 4] {
                let x = values(n * cols, rows as u32);
                let mut got = vec![0f32; n * rows];
                m.matmul(&x, n, &mut got).unwrap();
                let expect = dense.matmul_alloc(&x, n).unwrap();
                let bad = far(t, &want, &x, cols, &got, &expect);
                assert_eq!(bad, None, "{t} {rows}x{cols} n={n}: product differs");
            }
            let acts = QuantizedActs::new(&values(cols, 1), 1, cols);
            assert!(m.matmul_acts(&acts, &mut vec![0f32; rows]).is_err());
        }
    }
}

#[test]
fn records_of_ggml_components_compute_what_the_dense_expert_computes() {
    let (d_model, d_ff) = (512, 256);
    let mixes = [
        [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K],
        [GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::Q8_0],
        [GgmlType::Q3_K, GgmlType::F16, GgmlType::TQ2_0],
    ];
    for (i, types) in mixes.into_iter().enumerate() {
        let formats = types.map(|t| Format::ggml(t).unwrap());
        let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
        let parts: Vec<(Vec<u8>, Vec<f32>)> = types
            .iter()
            .zip(shapes)
            .map(|(&t, (r, c))| {
                let f = fixture(t);
                matrix_from(&f, r, c / f.qk, i)
            })
            .collect();
        let rec = build_record_raw(
            d_model,
            d_ff,
            [
                (formats[0], &parts[0].0),
                (formats[1], &parts[1].0),
                (formats[2], &parts[2].0),
            ],
        )
        .unwrap();
        assert_eq!(Some(rec.len()), record_len(formats, d_model, d_ff));
        let e = PackedExpert::parse(&rec[..]).unwrap();
        let dense = DenseExpert::new(
            Matrix::f32(d_ff, d_model, parts[0].1.clone()).unwrap(),
            Matrix::f32(d_ff, d_model, parts[1].1.clone()).unwrap(),
            Matrix::f32(d_model, d_ff, parts[2].1.clone()).unwrap(),
        )
        .unwrap();
        for n in [1, 3] {
            // Small inputs keep the fixtures' large weights finite end to end.
            let x: Vec<f32> = values(n * d_model, 3).iter().map(|v| v * 1e-3).collect();
            let (mut got, mut want) = (vec![0f32; n * d_model], vec![0f32; n * d_model]);
            e.forward(&x, n, Activation::Silu, &mut got).unwrap();
            dense.forward(&x, n, Activation::Silu, &mut want).unwrap();
            assert!(want.iter().all(|v| v.is_finite()), "{types:?}");
            if types.iter().any(|&t| ggml::dot::has_kernel(t)) {
                // Int8 activations at each stage that has an integer
                // kernel: the truth is the f64 product with the activations
                // that stage quantized (an activation code may flip where
                // f32 and f64 hidden values straddle a rounding edge).
                let w = [&parts[0].1, &parts[1].1, &parts[2].1];
                let stage = |i: usize, x: &[f32], rows: usize, cols: usize| -> Vec<f32> {
                    let x = seen_by(types[i], x, n, cols);
                    (0..n * rows)
                        .map(|o| {
                            let (t, r) = (o / rows, o % rows);
                            let (wr, xt) = (&w[i][r * cols..][..cols], &x[t * cols..][..cols]);
                            wr.iter()
                                .zip(xt)
                                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                                .sum::<f64>() as f32
                        })
                        .collect()
                };
                let (g, u) = (stage(0, &x, d_ff, d_model), stage(1, &x, d_ff, d_model));
                let h: Vec<f32> = g
                    .iter()
                    .zip(&u)
                    .map(|(g, u)| Activation::Silu.glu(*g, *u))
                    .collect();
                let (g_out, out) = (stage(2, &h, d_model, d_ff), &got);
                let rel = |a: &[f32], b: &[f32]| {
                    let d: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
                    (d / b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>()).sqrt()
                };
                assert!(
                    rel(out, &g_out) <= 1e-3,
                    "{types:?} n={n}: {}",
                    rel(out, &g_out)
                );
                // and the f32 expert, within the activations' rounding
                assert!(
                    rel(out, &want) <= 5e-2,
                    "{types:?} n={n}: {}",
                    rel(out, &want)
                );
            } else {
                assert_eq!(got, want, "{types:?} n={n}");
            }
        }
    }
}

#[test]
fn ggml_backbone_matrices_compute_what_their_f32_copy_computes_on_every_isa() {
    for t in ggml_types() {
        let f = fixture(t);
        let (rows, per_row) = (37, 2);
        let cols = per_row * f.qk;
        let (bytes, want) = matrix_from(&f, rows, per_row, 5);
        let tensor = Tensor::new(vec![rows, cols], TensorData::Ggml(t, bytes.clone())).unwrap();
        assert_eq!(tensor.size_bytes(), bytes.len());
        let m = tensor.clone().into_matrix().unwrap();
        assert!(matches!(m, Matrix::Ggml { .. }), "{t}: stays packed");
        assert_eq!(m.size_bytes(), bytes.len());
        let bad = m
            .to_f32()
            .iter()
            .zip(&tensor.into_f32())
            .position(|(a, b)| !same(*a, *b));
        assert_eq!(bad, None, "{t}: to_f32 and into_f32 agree");
        let bad = m
            .to_f32()
            .iter()
            .zip(&want)
            .position(|(a, b)| !same(*a, *b));
        assert_eq!(bad, None, "{t}: to_f32 is gguf-py's decode");
        let mut row = vec![0f32; cols];
        m.row_f32_into(7, &mut row);
        assert!(row.iter().zip(&want[7 * cols..]).all(|(a, b)| same(*a, *b)));
        let slice = m.slice_rows(3, 9).unwrap();
        let bad = slice
            .to_f32()
            .iter()
            .zip(&want[3 * cols..9 * cols])
            .position(|(a, b)| !same(*a, *b));
        assert_eq!(bad, None, "{t}: slice_rows");
        assert!(m.transposed().to_f32().len() == rows * cols);
        let want_f32 = want.clone();
        let f32m = Matrix::f32(rows, cols, want).unwrap();
        let mut ran = 0;
        for isa in Isa::ALL {
            let Some(k) = DenseKernels::for_isa(isa) else {
                println!("SKIPPED: {} (this CPU lacks it)", isa.name());
                continue;
            };
            for n in [1, 3] {
                let x = values(n * cols, 11);
                let (mut got, mut expect) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                m.matmul_with(k, &x, n, &mut got).unwrap();
                f32m.matmul_with(k, &x, n, &mut expect).unwrap();
                let bad = far(t, &want_f32, &x, cols, &got, &expect);
                assert_eq!(bad, None, "{t} {isa:?} n={n}");
            }
            ran += 1;
        }
        assert!(ran >= 1);
    }
    assert!(Tensor::new(vec![2, 300], TensorData::Ggml(GgmlType::Q4_K, vec![0; 288])).is_err());
    assert!(Matrix::ggml(GgmlType::Q8_K, 1, 256, vec![0; 292]).is_err());
}
