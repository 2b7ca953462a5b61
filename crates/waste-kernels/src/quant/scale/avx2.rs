//! The group scale search of [`GroupSearch::run_ref`] with AVX2, bit for bit:
//! the candidate scales are the lanes. Every candidate of the scalar search
//! walks the group's weights in order and sums its error in f32, so one
//! candidate per lane with the weights broadcast one at a time keeps each
//! sum's order (and no FMA: the scalar code rounds `d·g` before the
//! subtraction), and the result is the same scale byte, codes and error.
//!
//! Two passes of 8 lanes per group: the window of both signs (up to 4 steps
//! each), then the least-squares steps of both signs (up to 3 each), which
//! depend on the first pass. The scalar search visits the same candidates in
//! the order (sign +: window, least squares; sign −: window, least squares)
//! and keeps the first strictly better one; [`run`] takes the same ordered
//! minimum. The codes of the winner come from the scalar assignment.

use std::arch::x86_64::*;

use super::GroupSearch;

/// Lanes per pass.
const LANES: usize = 8;

/// Whether [`run`] handles this search: grids of 8 or 16 levels and a window
/// of 1 or 2 steps (at most 4 window steps per sign fit a pass). Window 0
/// (`q3-rtn`) tries a single scale, which the scalar code does faster than
/// a pass of 8 lanes with one in use.
pub(crate) fn supports(s: &GroupSearch<'_>) -> bool {
    (s.grid.len() == 8 || s.grid.len() == 16) && (1..=2).contains(&s.window)
}

/// One pass's candidates: lane `l` tries scale byte `code[l]` when `valid[l]`.
struct Pass {
    code: [u8; LANES],
    valid: [bool; LANES],
}

/// Per-lane sums of one pass: (error, Σ w·g, Σ g²), f32 as the scalar sums.
struct Sums {
    err: [f32; LANES],
    wg: [f32; LANES],
    gg: [f32; LANES],
}

/// [`GroupSearch::run_ref`], same result bit for bit (see the module docs).
///
/// # Safety
/// AVX2 must be available and [`supports`] must hold for `s`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn run(s: &GroupSearch<'_>, w: &[f32], idx: &mut [u8]) -> (u8, f64) {
    let top = super::largest(w);
    if top == 0.0 || !top.is_finite() {
        return s.run_ref(w, idx);
    }
    let (lo, hi) = (s.grid[0], s.grid[s.grid.len() - 1]);
    let mut mids = [0f32; 15];
    let nm = s.grid.len() - 1;
    for (i, m) in mids[..nm].iter_mut().enumerate() {
        *m = 0.5 * (s.grid[i] + s.grid[i + 1]);
    }
    let signs: &[bool] = if s.window == 0 {
        &[false]
    } else {
        &[false, true]
    };
    // Pass 1: the window of each sign, sign + in lanes 0..4, sign − in 4..8.
    let mut p1 = Pass {
        code: [127; LANES],
        valid: [false; LANES],
    };
    for (si, &neg) in signs.iter().enumerate() {
        let level = if (top > 0.0) != neg { hi } else { lo };
        let k0 = s.nearest_step((top / level).abs());
        let sign_bit = if neg { 128u8 } else { 0 };
        for (j, k) in ((k0 - s.window).max(0)..=(k0 + s.window / 2).min(127)).enumerate() {
            p1.code[4 * si + j] = sign_bit | k as u8;
            p1.valid[4 * si + j] = true;
        }
    }
    // SAFETY: AVX2 is available (this function's contract).
    let s1 = unsafe { eval(s, w, &mids[..nm], &p1, true) };
    // Pass 2: the least-squares step of each sign's best window step and its neighbours.
    let mut p2 = Pass {
        code: [127; LANES],
        valid: [false; LANES],
    };
    for (si, &neg) in signs.iter().enumerate() {
        let mut local = (f32::INFINITY, 0f32, 0f32);
        for l in 4 * si..4 * si + 4 {
            if p1.valid[l] && s1.err[l] < local.0 {
                local = (s1.err[l], s1.wg[l], s1.gg[l]);
            }
        }
        let (wg, gg) = (f64::from(local.1), f64::from(local.2));
        if s.window > 0 && gg > 0.0 {
            let ls = (wg / gg) as f32;
            if ls != 0.0 && (ls < 0.0) == neg {
                let k = s.nearest_step(ls.abs());
                let sign_bit = if neg { 128u8 } else { 0 };
                for (j, k) in [k - 1, k, k + 1].into_iter().enumerate() {
                    if (0..128).contains(&k) {
                        p2.code[4 * si + j] = sign_bit | k as u8;
                        p2.valid[4 * si + j] = true;
                    }
                }
            }
        }
    }
    let s2 = if p2.valid.iter().any(|&v| v) {
        // SAFETY: as above.
        Some(unsafe { eval(s, w, &mids[..nm], &p2, false) })
    } else {
        None
    };
    // The scalar search's visiting order, first strictly better wins.
    let mut best = (127u8, f32::INFINITY, false);
    for si in 0..signs.len() {
        for l in 4 * si..4 * si + 4 {
            if p1.valid[l] && s1.err[l] < best.1 {
                best = (p1.code[l], s1.err[l], true);
            }
        }
        if let Some(s2) = &s2 {
            for l in 4 * si..4 * si + 3 {
                if p2.valid[l] && s2.err[l] < best.1 {
                    best = (p2.code[l], s2.err[l], true);
                }
            }
        }
    }
    if best.2 {
        let d = s.table[usize::from(best.0)];
        s.assign(w, d, &mids[..nm], idx);
        (best.0, f64::from(best.1))
    } else {
        // No finite error (NaN weights): the scalar search leaves `idx` as it was.
        (127, f64::INFINITY)
    }
}

/// The per-lane sums of `pass` over the weights `w`, in the scalar order.
/// `dot`: also Σ w·g and Σ g² (the least-squares refinement needs them).
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
unsafe fn eval(s: &GroupSearch<'_>, w: &[f32], mids: &[f32], pass: &Pass, dot: bool) -> Sums {
    // An invalid lane computes with a valid scale and is ignored.
    let dv: [f32; LANES] = std::array::from_fn(|l| {
        s.table[usize::from(if pass.valid[l] { pass.code[l] } else { 127 })]
    });
    // SAFETY: the unaligned loads read exactly LANES f32s from local arrays.
    let d = unsafe { _mm256_loadu_ps(dv.as_ptr()) };
    let inv = _mm256_div_ps(_mm256_set1_ps(1.0), d);
    let mut mv = [_mm256_setzero_ps(); 15];
    for (v, &m) in mv.iter_mut().zip(mids) {
        *v = _mm256_set1_ps(m);
    }
    let mut lv = [0f32; 16];
    lv[..s.grid.len()].copy_from_slice(s.grid);
    // SAFETY: `lv` holds 16 f32s.
    let (glo, ghi) = unsafe {
        (
            _mm256_loadu_ps(lv.as_ptr()),
            _mm256_loadu_ps(lv.as_ptr().add(8)),
        )
    };
    let (mut err, mut wg, mut gg) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let nm = mids.len();
    for &x in w {
        let xv = _mm256_set1_ps(x);
        let t = _mm256_mul_ps(xv, inv);
        // The level index is the number of midpoints below t (false for NaN, as in the scalar code).
        let mut i = _mm256_setzero_si256();
        for m in &mv[..nm] {
            let gt = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(t, *m));
            i = _mm256_sub_epi32(i, gt);
        }
        let g = if nm < 8 {
            _mm256_permutevar8x32_ps(glo, i)
        } else {
            let upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(7)));
            _mm256_blendv_ps(
                _mm256_permutevar8x32_ps(glo, i),
                _mm256_permutevar8x32_ps(ghi, i),
                upper,
            )
        };
        let e = _mm256_sub_ps(xv, _mm256_mul_ps(d, g));
        err = _mm256_add_ps(err, _mm256_mul_ps(e, e));
        if dot {
            wg = _mm256_add_ps(wg, _mm256_mul_ps(xv, g));
            gg = _mm256_add_ps(gg, _mm256_mul_ps(g, g));
        }
    }
    let mut out = Sums {
        err: [0.0; LANES],
        wg: [0.0; LANES],
        gg: [0.0; LANES],
    };
    // SAFETY: each store writes LANES f32s into a local array.
    unsafe {
        _mm256_storeu_ps(out.err.as_mut_ptr(), err);
        _mm256_storeu_ps(out.wg.as_mut_ptr(), wg);
        _mm256_storeu_ps(out.gg.as_mut_ptr(), gg);
    }
    out
}
