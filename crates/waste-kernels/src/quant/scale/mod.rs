//! The one-byte signed logarithmic group scale shared by `q3` and `q4`.
//! Owns the code → scale table and the scale search of a group; knows nothing
//! of bit packing (the block modules do that).
//!
//! A scale byte `c` holds a sign (bit 7) and a magnitude step `k = c & 127`:
//! `d(c) = (-1)^(c >> 7) · 2^(E - k/8)`, eighth-octave steps over 16 octaves.
//! `E` is fixed per format (no per-tensor header), so a packed matrix is its
//! blocks and nothing else. The sign flips the format's asymmetric grid, so a
//! group's largest weight can land on the long end of the grid either way.
//!
//! The search's scalar specification is [`GroupSearch::run_ref`]; `avx2`
//! computes the same bytes with the candidate scales in vector lanes, and
//! [`GroupSearch::run`] picks it when the kernels of this CPU allow
//! (`WASTE_KERNELS=ref` forces the scalar code).

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::dispatch::{Isa, kernels};

/// `2^(-j/8)` for `j = 0..8`, the mantissas of every scale (f32, round to nearest).
const EIGHTH_OCTAVE: [f32; 8] = [
    1.0,
    0.917_004_04,
    0.840_896_4,
    0.771_105_4,
    0.707_106_77,
    0.648_419_8,
    0.594_603_55,
    0.545_253_9,
];

/// Scale steps searched either side of the absmax scale by the stored
/// formats' quantizers (2: within 0.2 % of the error of 4, at 40 % of the time).
pub const SEARCH_WINDOW: i32 = 2;

/// Number of magnitude steps in a scale byte.
pub const SCALE_STEPS: usize = 128;

/// The 256 scales of a format whose largest magnitude is `2^top_exp`:
/// `table[c] = (-1)^(c >> 7) · 2^(top_exp - (c & 127)/8)`, computed exactly
/// (a power of two times an [`EIGHTH_OCTAVE`] mantissa).
pub const fn scale_table(top_exp: i32) -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut c = 0;
    while c < 256 {
        let k = (c & 127) as i32;
        let mut v = EIGHTH_OCTAVE[(k % 8) as usize];
        let mut e = top_exp - k / 8;
        while e > 0 {
            v *= 2.0;
            e -= 1;
        }
        while e < 0 {
            v *= 0.5;
            e += 1;
        }
        t[c] = if c >= 128 { -v } else { v };
        c += 1;
    }
    t
}

/// The f32 bits of `2^top_exp · 2^(-j/8)` for `j = 0..8`: what SIMD kernels
/// compute a scale from without the table, `scale_table(top_exp)[c]` =
/// `bits[k % 8] - (k / 8) << 23` with bit 31 = bit 7 of `c` (`k = c & 127`;
/// exact while every scale is a normal f32, i.e. for `top_exp ≥ -110`).
pub const fn mantissa_bits(top_exp: i32) -> [i32; 8] {
    let mut b = [0i32; 8];
    let mut j = 0;
    while j < 8 {
        b[j] = EIGHTH_OCTAVE[j].to_bits() as i32 + (top_exp << 23);
        j += 1;
    }
    b
}

/// Scale search over one group: the error-minimising (scale byte, level
/// indices) for a grid of ascending levels, with a sign, a window of scale
/// steps around the absmax scale and a least-squares refinement.
#[derive(Debug)]
pub struct GroupSearch<'a> {
    /// Grid levels, ascending, in the units the scale multiplies.
    pub grid: &'a [f32],
    /// Index of the grid level that quantizes a padded (absent) weight.
    pub zero_index: u8,
    /// `table[c]`: the scale of byte `c` (see [`scale_table`]).
    pub table: &'a [f32; 256],
    /// Scale steps tried either side of the absmax scale; 0 = plain
    /// round-to-nearest at the absmax scale of one sign (no search).
    pub window: i32,
}

/// The weight of largest magnitude, the first of equals (0 for an empty
/// group; a leading NaN is returned and stops the search).
fn largest(w: &[f32]) -> f32 {
    let imax = (0..w.len()).fold(0, |b, i| if w[i].abs() > w[b].abs() { i } else { b });
    w.get(imax).copied().unwrap_or(0.0)
}

impl GroupSearch<'_> {
    /// [`GroupSearch::run_ref`] on the fastest code of the chosen kernels'
    /// ISA ([`kernels`]): the same scale byte, codes and error.
    pub fn run(&self, w: &[f32], idx: &mut [u8]) -> (u8, f64) {
        // The chosen table's ISA is one this CPU runs.
        self.run_checked(kernels().isa(), w, idx)
    }

    /// [`GroupSearch::run_ref`] on the code of `isa` (AVX-512 runs the AVX2
    /// search: its 8 lanes are the candidates of a pass); the scalar code
    /// for a search the SIMD code does not cover (a window over 2 steps, a
    /// grid of neither 8 nor 16 levels). Panics if this CPU lacks `isa`.
    pub fn run_on(&self, isa: Isa, w: &[f32], idx: &mut [u8]) -> (u8, f64) {
        assert!(isa.available(), "this CPU lacks {}", isa.name());
        self.run_checked(isa, w, idx)
    }

    /// [`GroupSearch::run_on`] for an `isa` known to be available.
    fn run_checked(&self, isa: Isa, w: &[f32], idx: &mut [u8]) -> (u8, f64) {
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 && avx2::supports(self) {
            // SAFETY: `isa` ≥ AVX2 is available (checked above), and
            // `supports` holds.
            return unsafe { avx2::run(self, w, idx) };
        }
        self.run_ref(w, idx)
    }

    /// Quantizes `w` (at most 128 values) into `idx`; returns the scale byte
    /// and the squared error `Σ (w - d·grid[idx])²` in f64. The scalar
    /// specification of the search.
    pub fn run_ref(&self, w: &[f32], idx: &mut [u8]) -> (u8, f64) {
        let top = largest(w);
        if top == 0.0 || !top.is_finite() {
            idx[..w.len()].fill(self.zero_index);
            let err = w.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            return (127, err);
        }
        let (lo, hi) = (self.grid[0], self.grid[self.grid.len() - 1]);
        let mut mids = [0f32; 15];
        let nm = (self.grid.len() - 1).min(15);
        for (i, m) in mids[..nm].iter_mut().enumerate() {
            *m = 0.5 * (self.grid[i] + self.grid[i + 1]);
        }
        let mids = &mids[..nm];
        let mut best = (127u8, f64::INFINITY);
        let mut tmp = [0u8; 128];
        let signs: &[bool] = if self.window == 0 {
            &[false]
        } else {
            &[false, true]
        };
        for &neg in signs {
            // The largest weight maps to the grid end of its sign under d.
            let level = if (top > 0.0) != neg { hi } else { lo };
            let ideal = top / level; // signed scale, sign = (-1)^neg
            let k0 = self.nearest_step(ideal.abs());
            let sign_bit = if neg { 128u8 } else { 0 };
            let mut local = (k0, f64::INFINITY, 0f64, 0f64);
            for k in (k0 - self.window).max(0)..=(k0 + self.window / 2).min(127) {
                let code = sign_bit | k as u8;
                let (err, wg, gg) = self.assign(w, self.table[usize::from(code)], mids, &mut tmp);
                if err < local.1 {
                    local = (k, err, wg, gg);
                }
                if err < best.1 {
                    best = (code, err);
                    idx[..w.len()].copy_from_slice(&tmp[..w.len()]);
                }
            }
            // Least squares for the best assignment, then its two nearest steps.
            if self.window > 0 && local.3 > 0.0 {
                let ls = (local.2 / local.3) as f32;
                if ls != 0.0 && (ls < 0.0) == neg {
                    let k = self.nearest_step(ls.abs());
                    for k in [k - 1, k, k + 1] {
                        if !(0..128).contains(&k) {
                            continue;
                        }
                        let code = sign_bit | k as u8;
                        let (err, _, _) =
                            self.assign(w, self.table[usize::from(code)], mids, &mut tmp);
                        if err < best.1 {
                            best = (code, err);
                            idx[..w.len()].copy_from_slice(&tmp[..w.len()]);
                        }
                    }
                }
            }
        }
        best
    }

    /// The step `k` whose magnitude is nearest to `s` in log terms.
    fn nearest_step(&self, s: f32) -> i32 {
        let k = ((self.table[0] / s).log2() * 8.0).round();
        if k.is_nan() {
            127
        } else {
            k.clamp(0.0, 127.0) as i32
        }
    }

    /// Nearest level per weight at scale `d` (`mids`: the midpoints between
    /// consecutive levels); returns (error, Σ w·g, Σ g²), summed in f32 over
    /// the group (≤ 128 terms) and widened.
    fn assign(&self, w: &[f32], d: f32, mids: &[f32], idx: &mut [u8]) -> (f64, f64, f64) {
        let inv = 1.0 / d;
        let (mut err, mut wg, mut gg) = (0f32, 0f32, 0f32);
        for (x, o) in w.iter().zip(idx.iter_mut()) {
            let t = x * inv;
            // Branch-free: the level index is the number of midpoints below t.
            let i = mids.iter().map(|&m| u8::from(t > m)).sum::<u8>();
            *o = i;
            let g = self.grid[usize::from(i)];
            let e = x - d * g;
            err += e * e;
            wg += x * g;
            gg += g * g;
        }
        (f64::from(err), f64::from(wg), f64::from(gg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_signed_eighth_octaves() {
        let t = scale_table(0);
        assert_eq!(t[0], 1.0);
        assert_eq!(t[8], 0.5);
        assert_eq!(t[128], -1.0);
        for k in 0..127 {
            let r = t[k + 1] / t[k];
            assert!((f64::from(r) - 2f64.powf(-1.0 / 8.0)).abs() < 1e-6, "{k}");
        }
    }

    #[test]
    fn mantissa_bits_rebuild_the_table() {
        for top in [3, -1, -2] {
            let (t, m) = (scale_table(top), mantissa_bits(top));
            for (c, v) in t.iter().enumerate() {
                let k = (c & 127) as i32;
                let bits = (m[(k % 8) as usize] - ((k / 8) << 23)) as u32 | ((c as u32 >> 7) << 31);
                assert_eq!(bits, v.to_bits(), "top {top} c {c}");
            }
        }
    }

    #[test]
    fn search_is_never_worse_than_absmax_rounding() {
        let table = scale_table(0);
        let grid = [-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0];
        let w: Vec<f32> = (0..32)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.01)
            .collect();
        let mut idx = [0u8; 32];
        let rtn = GroupSearch {
            grid: &grid,
            zero_index: 4,
            table: &table,
            window: 0,
        }
        .run(&w, &mut idx);
        let found = GroupSearch {
            grid: &grid,
            zero_index: 4,
            table: &table,
            window: 4,
        }
        .run(&w, &mut idx);
        assert!(found.1 <= rtn.1);
        let d = table[usize::from(found.0)];
        let err: f64 = w
            .iter()
            .zip(&idx)
            .map(|(x, &i)| f64::from(x - d * grid[usize::from(i)]).powi(2))
            .sum();
        assert!((err - found.1).abs() < 1e-9);
    }
}
