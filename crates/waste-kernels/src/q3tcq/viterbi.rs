//! The Viterbi search of `q3-tcq`: the least-squared-error path through the
//! trellis for one row at given per-step scales. The forward pass (per step
//! and state, the cheaper of the two branches into it) is the hot loop:
//! [`Search::forward_ref`] is its scalar specification and the AVX2 version
//! (`avx2.rs`) reproduces it bit for bit (the same f32 operations, no FMA,
//! the same tie rule), so the codes never depend on the ISA.

use super::{LEVELS_3, LEVELS_4, NU, STATES, subset};
use crate::quant::{Isa, kernels};

/// Per new state `ns`: the subsets of its two incoming branches, from
/// `ns >> 1` and from `ns >> 1 | 2^(NU-1)` (both with branch bit `ns & 1`).
pub(super) const PULL: [[u8; 2]; STATES] = pull();

const fn pull() -> [[u8; 2]; STATES] {
    let mut t = [[0u8; 2]; STATES];
    let mut ns = 0;
    while ns < STATES {
        let (p0, b) = ((ns >> 1) as u32, (ns & 1) as u32);
        t[ns] = [subset(p0, b) as u8, subset(p0 | 1 << (NU - 1), b) as u8];
        ns += 1;
    }
    t
}

/// `SUBSET[state][b]`: [`subset`] as a table.
const SUBSET: [[u8; 2]; STATES] = subsets();

const fn subsets() -> [[u8; 2]; STATES] {
    let mut t = [[0u8; 2]; STATES];
    let mut s = 0;
    while s < STATES {
        t[s] = [subset(s as u32, 0) as u8, subset(s as u32, 1) as u8];
        s += 1;
    }
    t
}

/// Midpoints between consecutive levels of each subset, ascending:
/// `MIDS_3[j][q]` between levels `4q + j` and `4q + 4 + j` of [`LEVELS_3`].
const MIDS_3: [[f32; 3]; 4] = mids::<16, 3>(&LEVELS_3);
/// The same for the wide steps' [`LEVELS_4`].
const MIDS_4: [[f32; 7]; 4] = mids::<32, 7>(&LEVELS_4);

const fn mids<const N: usize, const M: usize>(levels: &[i8; N]) -> [[f32; M]; 4] {
    let mut t = [[0f32; M]; 4];
    let mut j = 0;
    while j < 4 {
        let mut q = 0;
        while q < M {
            t[j][q] = (levels[4 * q + j] as f32 + levels[4 * q + 4 + j] as f32) * 0.5;
            q += 1;
        }
        j += 1;
    }
    t
}

/// One row's search problem, in the rotated basis.
#[derive(Debug, Clone, Copy)]
pub struct Search<'a> {
    /// The rotated row, padded with zeros to whole blocks.
    pub x: &'a [f32],
    /// The scale of each step.
    pub d: &'a [f32],
    /// Whether each step is wide (32 levels).
    pub wide: &'a [bool],
    /// Steps from here on are padding: they cost nothing on any branch.
    pub live: usize,
}

/// Squared error of the nearest level of each subset for weight `x` at
/// scale `d` (lane `j` = subset `j`).
#[inline]
pub(super) fn subset_errors(x: f32, d: f32, wide: bool) -> [f32; 4] {
    let mut e = [f32::INFINITY; 4];
    let mut one = |i: usize, l: i8| {
        let v = x - d * f32::from(l);
        let sq = v * v;
        if sq < e[i % 4] {
            e[i % 4] = sq;
        }
    };
    if wide {
        LEVELS_4.iter().enumerate().for_each(|(i, &l)| one(i, l));
    } else {
        LEVELS_3.iter().enumerate().for_each(|(i, &l)| one(i, l));
    }
    e
}

impl Search<'_> {
    /// The forward pass on the fastest code of the chosen kernels' ISA
    /// ([`kernels`]): fills `back` (one bit per state and step: the branch
    /// from `ns >> 1 | 2^(NU-1)` won) and returns the best final state.
    pub fn forward(&self, back: &mut [u64]) -> u32 {
        self.forward_checked(kernels().isa(), back)
    }

    /// [`Search::forward`] on the code of `isa` (AVX-512 runs the AVX2
    /// code). Panics if this CPU lacks `isa`.
    pub fn forward_on(&self, isa: Isa, back: &mut [u64]) -> u32 {
        assert!(isa.available(), "this CPU lacks {}", isa.name());
        self.forward_checked(isa, back)
    }

    fn forward_checked(&self, isa: Isa, back: &mut [u64]) -> u32 {
        assert!(self.d.len() == self.x.len() && self.wide.len() == self.x.len());
        assert!(back.len() >= self.x.len());
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            // SAFETY: `isa` ≥ AVX2 is available (checked by the callers);
            // the lengths are checked above.
            return unsafe { super::avx2::forward(self, back) };
        }
        let _ = isa;
        self.forward_ref(back)
    }

    /// The scalar specification of the forward pass. The stream starts in
    /// state 0; per step, `next[ns] = min(c0, c1)` with `c0` the branch from
    /// `ns >> 1`, `c1` from `ns >> 1 | 2^(NU-1)`, `c1` only if strictly
    /// smaller; the best final state is the first of the least cost.
    pub fn forward_ref(&self, back: &mut [u64]) -> u32 {
        let half = STATES / 2;
        let mut cost = [f32::INFINITY; STATES];
        cost[0] = 0.0;
        for (t, slot) in back[..self.x.len()].iter_mut().enumerate() {
            let e = if t < self.live {
                subset_errors(self.x[t], self.d[t], self.wide[t])
            } else {
                [0.0; 4]
            };
            let mut next = [0f32; STATES];
            let mut bits = 0u64;
            for (ns, n) in next.iter_mut().enumerate() {
                let p0 = ns >> 1;
                let c0 = cost[p0] + e[usize::from(PULL[ns][0])];
                let c1 = cost[p0 + half] + e[usize::from(PULL[ns][1])];
                if c1 < c0 {
                    *n = c1;
                    bits |= 1 << ns;
                } else {
                    *n = c0;
                }
            }
            *slot = bits;
            cost = next;
        }
        best_state(&cost)
    }

    /// The codes of the path ending in state `end`: per step the branch bit
    /// and the nearest level of the branch's subset (the lower at a
    /// midpoint).
    pub fn traceback(&self, end: u32, back: &[u64], codes: &mut [super::Code]) {
        let mut st = end as usize;
        for t in (0..self.x.len()).rev() {
            let from_upper = (back[t] >> st) & 1;
            let prev = (st >> 1) | ((from_upper as usize) << (NU - 1));
            let b = st & 1;
            let j = usize::from(SUBSET[prev][b]);
            let (x, d) = (self.x[t], self.d[t]);
            // The nearest level of the subset: the midpoints below x (the
            // lower level at a midpoint).
            let above = |m: &[f32]| m.iter().map(|&m| usize::from(x > d * m)).sum::<usize>();
            let q = if self.wide[t] {
                above(&MIDS_4[j])
            } else {
                above(&MIDS_3[j])
            };
            codes[t] = super::Code {
                branch: b as u8,
                level: (4 * q + j) as u8,
            };
            st = prev;
        }
    }
}

/// The first state of least cost.
pub(super) fn best_state(cost: &[f32; STATES]) -> u32 {
    (0..STATES).fold(0, |b, i| if cost[i] < cost[b] { i } else { b }) as u32
}
