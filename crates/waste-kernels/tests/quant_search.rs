//! The group scale search on every ISA this host runs against its scalar
//! specification `GroupSearch::run_ref`: the same scale byte, the same codes
//! and the same error bit for bit (the quantizers' output must not depend on
//! the CPU), for every grid the formats and the study use, every window,
//! group lengths 1..=128 and awkward values (zeros, ties, denormals, huge
//! weights, one outlier, NaN). ISAs the host lacks are printed as skipped.

use waste_kernels::quant::Isa;
use waste_kernels::quant::scale::{GroupSearch, SEARCH_WINDOW};
use waste_kernels::{q3, q4};

/// Seeded values from a 64-bit LCG: uniform in [-0.5, 0.5).
fn lcg(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
}

/// Groups of many shapes: Gaussian-ish, heavy-tailed, uniform, quantized
/// (repeated values, ties at midpoints), constant, tiny and huge.
fn groups() -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let mut u = lcg(7);
    for len in [1, 2, 3, 7, 16, 31, 32, 33, 64, 100, 128] {
        for kind in 0..9 {
            for _ in 0..40 {
                let g: Vec<f32> = (0..len)
                    .map(|i| match kind {
                        0 => (u() + u() + u() + u()) * 0.05,
                        1 => {
                            let x = u();
                            x * x * x * 40.0 * if i == 3 { 30.0 } else { 1.0 }
                        }
                        2 => u(),
                        3 => ((u() * 16.0).round() / 16.0) * 0.3,
                        4 => 0.25,
                        5 => u() * 1e-30,
                        6 => u() * 3e4,
                        7 => (u() * 8.0).round() * 0.125 * (1.0 + f32::EPSILON * u()),
                        _ => {
                            if i % 5 == 0 {
                                0.0
                            } else {
                                u() * 0.01
                            }
                        }
                    })
                    .collect();
                out.push(g);
            }
        }
    }
    out.push(vec![0.0; 32]);
    out.push(vec![-0.0; 32]);
    let mut nan = vec![0.1; 32];
    nan[5] = f32::NAN;
    out.push(nan.clone());
    nan[0] = f32::NAN;
    out.push(nan);
    let mut inf = vec![0.1; 32];
    inf[9] = f32::INFINITY;
    out.push(inf);
    out
}

/// Every SIMD ISA this CPU runs; the others reported skipped.
fn simd_isas() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|&i| i != Isa::Ref)
        .filter(|&i| {
            let ok = i.available();
            if !ok {
                println!("SKIPPED: {} (this CPU lacks it)", i.name());
            }
            ok
        })
        .collect()
}

#[test]
fn search_matches_run_ref_on_every_isa() {
    let q3_grid: [f32; 8] = std::array::from_fn(|i| f32::from(q3::GRID_Q3[i]));
    let rtn_grid: [f32; 8] = std::array::from_fn(|i| f32::from(q3::GRID_Q3_RTN[i]));
    let q4_grid: [f32; 16] = q4::GRID_Q4.map(f32::from);
    let lloyd = [
        -2.152f32, -1.344, -0.756, -0.245, 0.245, 0.756, 1.344, 2.152,
    ]
    .map(|v| v * 16.0);
    let grids: [(&str, &[f32], u8, &[f32; 256]); 4] = [
        ("q3", &q3_grid, q3::ZERO_CODE, &q3::SCALES),
        ("q3-rtn", &rtn_grid, q3::ZERO_CODE, &q3::SCALES),
        ("q4", &q4_grid, q4::ZERO_CODE, &q4::SCALES),
        ("lloyd-max", &lloyd, 3, &q3::SCALES),
    ];
    let groups = groups();
    for isa in simd_isas() {
        let mut checked = 0;
        for (name, grid, zero_index, table) in grids {
            for window in [0, 1, SEARCH_WINDOW, 3] {
                let s = GroupSearch {
                    grid,
                    zero_index,
                    table,
                    window,
                };
                for (gi, g) in groups.iter().enumerate() {
                    let (mut a, mut b) = ([0xAAu8; 128], [0xAAu8; 128]);
                    let want = s.run_ref(g, &mut a);
                    let got = s.run_on(isa, g, &mut b);
                    let ctx = format!("{} {name} window {window} group {gi} {g:?}", isa.name());
                    assert_eq!(want.0, got.0, "scale byte, {ctx}");
                    assert_eq!(want.1.to_bits(), got.1.to_bits(), "error, {ctx}");
                    assert_eq!(a, b, "codes, {ctx}");
                    checked += 1;
                }
            }
        }
        println!("{}: {checked} searches equal run_ref", isa.name());
    }
}
