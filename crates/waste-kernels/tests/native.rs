//! The native formats (a release's experts kept as stored): stable ids and
//! names, plane sizes, exact decoding against per-element definitions, the
//! f32 product equal bit for bit to the dense exact path on the decoded
//! weights, records mixing native and block components, and the refusals
//! (no quantizer for scaled natives, no int8 activations).

use half::bf16;
use waste_kernels::native::{self, reference};
use waste_kernels::quant::{QuantizedActs, quantize};
use waste_kernels::{
    Activation, DenseExpert, ExpertFfn, Format, Matrix, PackedExpert, PackedMatrix,
    build_record_raw, record_len,
};

/// SplitMix64 bytes.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    bytes(len, seed)
        .iter()
        .map(|&b| (f32::from(b) - 127.5) / 128.0 * scale)
        .collect()
}

/// A valid random matrix of a native format: finite codes and sane scales.
fn random_matrix(format: Format, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let code_bytes = rows * format.row_bytes(cols);
    let scale_bytes = native::scale_plane_bytes(format, rows, cols).unwrap();
    let mut codes = bytes(code_bytes, seed);
    let scales: Vec<u8> = match format {
        Format::Bf16 => {
            let v = values(rows * cols, seed, 0.1);
            codes = v
                .iter()
                .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
                .collect();
            Vec::new()
        }
        Format::F32 => {
            codes = values(rows * cols, seed, 0.1)
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Vec::new()
        }
        Format::Fp8Block128 => {
            for c in &mut codes {
                if *c & 0x7F == 0x7F {
                    *c &= 0xF0; // no NaN
                }
            }
            values(scale_bytes / 4, seed + 1, 1e-3)
                .iter()
                .flat_map(|x| (x.abs() + 1e-4).to_le_bytes())
                .collect()
        }
        Format::Int4G32 => values(scale_bytes / 2, seed + 1, 0.01)
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
        Format::Mxfp4 => bytes(scale_bytes, seed + 1)
            .iter()
            .map(|b| 118 + b % 8)
            .collect(),
        f => panic!("{f} is not native"),
    };
    native::matrix_bytes(format, rows, cols, &codes, &scales).unwrap()
}

/// The value of element (r, c) from the format definitions, independently
/// of the row decoders.
fn element(format: Format, m: &[u8], rows: usize, cols: usize, r: usize, c: usize) -> f32 {
    let codes = rows * format.row_bytes(cols);
    let rb = format.row_bytes(cols);
    let row = &m[r * rb..(r + 1) * rb];
    let plane = &m[codes..];
    let f32_at = |b: &[u8], i: usize| f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
    match format {
        Format::Bf16 => bf16::from_bits(u16::from_le_bytes([row[2 * c], row[2 * c + 1]])).to_f32(),
        Format::F32 => f32_at(row, c),
        Format::Fp8Block128 => {
            let gc = cols.div_ceil(128);
            reference::E4M3FN_TO_F32[usize::from(row[c])] * f32_at(plane, (r / 128) * gc + c / 128)
        }
        Format::Int4G32 => {
            let word = u32::from_le_bytes(row[4 * (c / 8)..4 * (c / 8) + 4].try_into().unwrap());
            let q = ((word >> (4 * (c % 8))) & 15) as i32 - 8;
            let g = cols.div_ceil(32);
            let s = &plane[2 * (r * g + c / 32)..];
            q as f32 * bf16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32()
        }
        Format::Mxfp4 => {
            let code = (row[c / 2] >> (4 * (c % 2))) & 15;
            let e = plane[r * cols.div_ceil(32) + c / 32];
            reference::e2m1_to_f32(code) * 2f32.powi(i32::from(e) - 127)
        }
        f => panic!("{f} is not native"),
    }
}

const SHAPES: [(usize, usize); 6] = [(1, 2), (3, 8), (5, 34), (130, 40), (7, 300), (129, 258)];

#[test]
fn ids_names_and_sizes_are_stable() {
    let want = [
        (Format::Bf16, 5, "bf16"),
        (Format::F32, 6, "f32"),
        (Format::Fp8Block128, 7, "fp8-b128"),
        (Format::Int4G32, 8, "int4-g32"),
        (Format::Mxfp4, 9, "mxfp4"),
    ];
    for (f, id, name) in want {
        assert_eq!((f.id(), f.name()), (id, name));
        assert_eq!(Format::from_id(id).unwrap(), f);
        assert_eq!(name.parse::<Format>().unwrap(), f);
        assert!(f.is_exact());
    }
    assert!(Format::ALL.iter().all(|f| !f.is_exact()));
    // DeepSeek-V3 expert gate (2048, 7168) in fp8: codes + a 16 x 56 f32 grid.
    assert_eq!(
        Format::Fp8Block128.packed_size(2048, 7168),
        Some(2048 * 7168 + 16 * 56 * 4)
    );
    // Kimi K3 expert (3072, 3584) in MXFP4: 4.25 bits per weight.
    assert_eq!(
        Format::Mxfp4.packed_size(3072, 3584),
        Some(3072 * 1792 + 3072 * 112)
    );
    assert_eq!(Format::Int4G32.packed_size(4, 33), Some(4 * 20 + 4 * 2 * 2));
    assert!(PackedMatrix::new(Format::Mxfp4, 2, 64, &[0u8; 67]).is_err());
    assert!(PackedMatrix::new(Format::Mxfp4, 2, 64, &[0u8; 68]).is_ok());
}

#[test]
fn rows_decode_exactly_to_the_definition() {
    for format in Format::NATIVE {
        for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
            let m = random_matrix(format, rows, cols, i as u64);
            let pm = PackedMatrix::new(format, rows, cols, &m).unwrap();
            let deq = pm.dequantize();
            for r in 0..rows {
                for c in 0..cols {
                    let want = element(format, &m, rows, cols, r, c);
                    assert_eq!(
                        deq[r * cols + c].to_bits(),
                        want.to_bits(),
                        "{format} {rows}x{cols} ({r}, {c})"
                    );
                }
            }
        }
    }
}

#[test]
fn products_equal_the_dense_exact_path_bit_for_bit() {
    for format in Format::NATIVE {
        for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
            let m = random_matrix(format, rows, cols, 40 + i as u64);
            let pm = PackedMatrix::new(format, rows, cols, &m).unwrap();
            let dense = Matrix::f32(rows, cols, pm.dequantize()).unwrap();
            for n in [1, 3] {
                let x = values(n * cols, 90 + i as u64, 2.0);
                let mut got = vec![0f32; n * rows];
                pm.matmul(&x, n, &mut got).unwrap();
                let want = dense.matmul_alloc(&x, n).unwrap();
                assert_eq!(got, want, "{format} {rows}x{cols} n={n}");
            }
            let acts = QuantizedActs::new(&values(cols, 1, 1.0), 1, cols);
            assert!(pm.matmul_acts(&acts, &mut vec![0f32; rows]).is_err());
        }
    }
}

#[test]
fn bf16_and_f32_quantize_exactly_and_scaled_natives_refuse() {
    let (rows, cols) = (5, 70);
    let w = values(rows * cols, 3, 1.0);
    let f = quantize(Format::F32, rows, cols, &w).unwrap();
    assert_eq!(f.matrix().dequantize(), w);
    assert_eq!(f.sq_error, 0.0);
    let b = quantize(Format::Bf16, rows, cols, &w).unwrap();
    let want: Vec<f32> = w.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
    assert_eq!(b.matrix().dequantize(), want);
    assert_eq!(b.bits_per_weight(), 16.0);
    for f in [Format::Fp8Block128, Format::Int4G32, Format::Mxfp4] {
        assert!(quantize(f, rows, cols, &w).is_err(), "{f}");
    }
}

#[test]
fn native_records_compute_what_the_dense_expert_computes() {
    let (d_model, d_ff) = (96, 40);
    let mixes = [
        [Format::Fp8Block128; 3],
        [Format::Int4G32; 3],
        [Format::Mxfp4; 3],
        [Format::Bf16, Format::F32, Format::Bf16],
    ];
    for (i, formats) in mixes.into_iter().enumerate() {
        let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
        let parts: Vec<Vec<u8>> = formats
            .iter()
            .zip(shapes)
            .enumerate()
            .map(|(j, (f, (r, c)))| random_matrix(*f, r, c, (10 * i + j) as u64))
            .collect();
        let rec = build_record_raw(
            d_model,
            d_ff,
            [
                (formats[0], &parts[0]),
                (formats[1], &parts[1]),
                (formats[2], &parts[2]),
            ],
        )
        .unwrap();
        assert_eq!(Some(rec.len()), record_len(formats, d_model, d_ff));
        let e = PackedExpert::parse(&rec[..]).unwrap();
        let dense = DenseExpert::new(
            Matrix::f32(d_ff, d_model, e.gate().dequantize()).unwrap(),
            Matrix::f32(d_ff, d_model, e.up().dequantize()).unwrap(),
            Matrix::f32(d_model, d_ff, e.down().dequantize()).unwrap(),
        )
        .unwrap();
        let act = Activation::Situ {
            beta: 4.0,
            linear_beta: Some(25.0),
        };
        for n in [1, 4] {
            let x = values(n * d_model, 7, 1.0);
            let (mut got, mut want) = (vec![0f32; n * d_model], vec![0f32; n * d_model]);
            e.forward(&x, n, act, &mut got).unwrap();
            dense.forward(&x, n, act, &mut want).unwrap();
            assert_eq!(got, want, "{formats:?} n={n}");
        }
    }
    // A native gate with a q3 down: the q3 part quantizes its activations.
    let w = values(d_model * d_ff, 5, 0.05);
    let down = quantize(Format::Q3, d_model, d_ff, &w).unwrap();
    let bf = random_matrix(Format::Bf16, d_ff, d_model, 1);
    let rec = build_record_raw(
        d_model,
        d_ff,
        [
            (Format::Bf16, &bf),
            (Format::Bf16, &bf),
            (Format::Q3, &down.bytes),
        ],
    )
    .unwrap();
    let e = PackedExpert::parse(&rec[..]).unwrap();
    let mut out = vec![0f32; d_model];
    e.forward(&values(d_model, 2, 1.0), 1, Activation::Silu, &mut out)
        .unwrap();
    assert!(out.iter().all(|v| v.is_finite()));
    // Wrong part lengths are refused.
    assert!(
        build_record_raw(
            d_model,
            d_ff,
            [
                (Format::Bf16, &bf[1..]),
                (Format::Bf16, &bf),
                (Format::Q3, &down.bytes)
            ]
        )
        .is_err()
    );
}

/// The group-at-a-time MXFP4 decoder is the reference's bit for bit: every
/// exponent (the subnormal 2^-127 and NaN among them), every code, whole
/// rows and a last group cut short. (A NaN's sign is whatever the compiler
/// makes of `-0 · NaN`: NaNs compare as NaNs.)
/// The bits of each value, every NaN as one (the decoders' NaNs are NaNs,
/// whatever their payload).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
        .collect()
}

#[test]
fn mxfp4_rows_decode_as_the_reference_bit_for_bit() {
    use native::{decode_row_mxfp4_on, reference::decode_row_mxfp4_ref};
    use waste_kernels::quant::Isa;
    for cols in [32usize, 64, 2, 30, 96 + 18] {
        let groups = cols.div_ceil(32);
        for e0 in (0..=255u8).step_by(groups) {
            let scales: Vec<u8> = (0..groups).map(|g| e0.wrapping_add(g as u8)).collect();
            let codes: Vec<u8> = (0..cols / 2)
                .map(|j| (j as u8).wrapping_mul(37).wrapping_add(e0))
                .collect();
            let mut want = vec![0f32; cols];
            decode_row_mxfp4_ref(&codes, &scales, &mut want);
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let mut got = vec![0f32; cols];
                decode_row_mxfp4_on(isa, &codes, &scales, &mut got);
                let what = format!("{} {cols} columns from exponent {e0}", isa.name());
                assert_eq!(bits(&got), bits(&want), "{what}");
            }
        }
    }
}

/// FP8 and int4 rows on every ISA this host runs against the reference
/// decoders: every FP8 byte, every int4 code, ragged widths (a partial
/// scale block or group, a partial vector), bit for bit (NaN as NaN).
#[test]
fn fp8_and_int4_rows_decode_as_the_reference_bit_for_bit() {
    use native::reference::{decode_row_fp8_ref, decode_row_int4_ref};
    use native::{decode_row_fp8_on, decode_row_int4_on};
    use waste_kernels::quant::Isa;
    for cols in [1usize, 7, 8, 128, 136, 256, 300, 512 + 13] {
        let blocks = cols.div_ceil(128);
        let scales: Vec<u8> = (0..blocks)
            .flat_map(|b| {
                (0.37f32 * (b as f32 + 1.0) * if b % 2 == 0 { 1.0 } else { -3e-3 }).to_le_bytes()
            })
            .collect();
        for offset in [0u8, 101, 200] {
            let codes: Vec<u8> = (0..cols).map(|j| (j as u8).wrapping_add(offset)).collect();
            let mut want = vec![0f32; cols];
            decode_row_fp8_ref(&codes, &scales, &mut want);
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let mut got = vec![0f32; cols];
                decode_row_fp8_on(isa, &codes, &scales, &mut got);
                assert_eq!(bits(&got), bits(&want), "fp8 {} {cols} columns", isa.name());
            }
        }
        let groups = cols.div_ceil(32);
        let scales: Vec<u8> = (0..groups)
            .flat_map(|g| {
                bf16::from_f32(0.011 * (g as f32 - 3.5))
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        let codes: Vec<u8> = (0..cols.div_ceil(8) * 4)
            .map(|i| (i as u8).wrapping_mul(73).wrapping_add(5))
            .collect();
        let mut want = vec![0f32; cols];
        decode_row_int4_ref(&codes, &scales, &mut want);
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            let mut got = vec![0f32; cols];
            decode_row_int4_on(isa, &codes, &scales, &mut got);
            assert_eq!(
                bits(&got),
                bits(&want),
                "int4 {} {cols} columns",
                isa.name()
            );
        }
    }
}
