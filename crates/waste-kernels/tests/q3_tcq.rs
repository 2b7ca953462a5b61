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
