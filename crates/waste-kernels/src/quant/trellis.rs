//! Bitshift trellis-coded quantization (TCQ as in QTIP, with a computed
//! codebook) for the quantizer study: not a stored format.
//!
//! A row's codes are one bit stream of `k` bits per weight; weight `t` is
//! decoded from the state `s_t` = the last `l` bits of the stream up to and
//! including its own `k` (`s_t = (s_{t-1} << k | c_t) mod 2^l`, the first
//! state's upper bits zero, so a row costs exactly `k` bits per weight) as
//! `d_g · CODEBOOK[s_t]`, `d_g` the group's scale byte (the `q3` table, one
//! byte per `group` weights). Decoding is a shift, a mask and a table
//! lookup per weight; encoding is a Viterbi search over the `2^l` states.
//!
//! The codebook is fixed in the code (free in the bit count): the `2^l`
//! quantiles of a unit Gaussian, arranged so that the `2^k` successors of
//! every state (the states sharing their upper `l - k` bits) form an
//! `2^k`-level quantizer of the whole range, each set offset from the others
//! by a fraction of a level (the union of the sets is the fine grid the
//! trellis reaches through its paths).

use crate::q3;

/// A bitshift trellis with `2^l` states and `k` bits per weight.
#[derive(Debug, Clone)]
pub struct Trellis {
    l: u32,
    k: u32,
    /// `2^l` reconstruction values of unit variance, by state.
    codebook: Vec<f32>,
}

/// Scratch of one row's search, reused across rows.
#[derive(Debug, Default)]
pub struct Scratch {
    cost: Vec<f32>,
    next: Vec<f32>,
    best_pred: Vec<f32>,
    /// Chosen predecessor (upper `k` bits) per (step, successor set).
    back: Vec<u8>,
    states: Vec<u16>,
}

impl Trellis {
    /// The trellis of `2^l` states, `k` bits per weight (`k < l ≤ 12`).
    pub fn new(l: u32, k: u32) -> Self {
        assert!(k >= 1 && k < l && l <= 12, "trellis l {l}, k {k}");
        let n = 1usize << l;
        let sets = 1usize << (l - k);
        let fan = 1usize << k;
        let quantiles: Vec<f32> = (0..n)
            .map(|j| inv_normal_cdf((j as f64 + 0.5) / n as f64) as f32)
            .collect();
        let codebook = (0..n)
            .map(|s| {
                let (set, c) = (s >> k, s & (fan - 1));
                // Level c of set `set`: stratum c, offset by the set's bit-reversed index.
                quantiles[c * sets + reverse_bits(set, l - k)]
            })
            .collect();
        Self { l, k, codebook }
    }

    /// Bits per weight of the codes.
    pub fn bits(&self) -> u32 {
        self.k
    }

    /// The Viterbi search of one row `x` at per-weight scales `scale(t)`:
    /// fills `scratch.states` with the best state sequence and returns its
    /// squared error (f32 sums per path, recomputed in f64 by the caller).
    pub fn search(&self, x: &[f32], scale: impl Fn(usize) -> f32, scratch: &mut Scratch) {
        let n_states = 1usize << self.l;
        let sets = 1usize << (self.l - self.k);
        let fan = 1usize << self.k;
        let Scratch {
            cost,
            next,
            best_pred,
            back,
            states,
        } = scratch;
        cost.clear();
        cost.resize(n_states, f32::INFINITY);
        next.resize(n_states, 0.0);
        best_pred.resize(sets, 0.0);
        back.clear();
        back.resize(x.len() * sets, 0);
        states.clear();
        states.resize(x.len(), 0);
        if x.is_empty() {
            return;
        }
        // Step 0: only the states whose upper bits are zero.
        let d = scale(0);
        for (s, c) in cost.iter_mut().enumerate().take(fan) {
            let e = x[0] - d * self.codebook[s];
            *c = e * e;
        }
        for (t, &xt) in x.iter().enumerate().skip(1) {
            let d = scale(t);
            let bk = &mut back[t * sets..(t + 1) * sets];
            // Best predecessor of each successor set b: p = b + j·sets.
            best_pred.copy_from_slice(&cost[..sets]);
            bk.fill(0);
            for j in 1..fan {
                let row = &cost[j * sets..(j + 1) * sets];
                for ((m, bj), &c) in best_pred.iter_mut().zip(bk.iter_mut()).zip(row) {
                    if c < *m {
                        *m = c;
                        *bj = j as u8;
                    }
                }
            }
            for (b, &m) in best_pred.iter().enumerate() {
                let cb = &self.codebook[b * fan..(b + 1) * fan];
                for (o, &v) in next[b * fan..(b + 1) * fan].iter_mut().zip(cb) {
                    let e = xt - d * v;
                    *o = m + e * e;
                }
            }
            std::mem::swap(cost, next);
        }
        let mut s = (0..n_states).fold(0, |b, i| if cost[i] < cost[b] { i } else { b });
        for t in (0..x.len()).rev() {
            states[t] = s as u16;
            if t > 0 {
                let b = s >> self.k;
                s = b + usize::from(back[t * sets + b]) * sets;
            }
        }
    }

    /// The unit-variance value of state `s`.
    pub fn value(&self, s: u16) -> f32 {
        self.codebook[usize::from(s)]
    }
}

/// The q3 scale-table step nearest scale `s`. Scales are in the table's
/// units (grid sixteenths): the codebooks' unit is 16.
fn step_of(s: f32) -> usize {
    let table = &q3::SCALES;
    let k = ((table[0] / (s / 16.0)).log2() * 8.0).round();
    if k.is_nan() {
        127
    } else {
        k.clamp(0.0, 127.0) as usize
    }
}

/// Each group's first step: its RMS times `rho`.
fn first_steps(x: &[f32], group: usize, rho: f32) -> Vec<usize> {
    x.chunks(group)
        .map(|g| {
            let rms = (g.iter().map(|&v| v * v).sum::<f32>() / g.len() as f32).sqrt();
            step_of(rms * rho)
        })
        .collect()
}

/// With the codes fixed (`level(t)`: weight t's code value in codebook
/// units), each group's step refitted by least squares and its neighbours;
/// returns the row's squared error.
fn refit_steps(x: &[f32], group: usize, steps: &mut [usize], level: impl Fn(usize) -> f32) -> f64 {
    let table = &q3::SCALES;
    let mut err = 0.0;
    for (gi, g) in x.chunks(group).enumerate() {
        let base = gi * group;
        let (mut wf, mut ff) = (0f64, 0f64);
        for (t, &v) in g.iter().enumerate() {
            let f = f64::from(level(base + t));
            wf += f64::from(v) * f;
            ff += f * f;
        }
        let group_err = |k: usize| -> f64 {
            let dk = f64::from(table[k] * 16.0);
            g.iter()
                .enumerate()
                .map(|(t, &v)| (f64::from(v) - dk * f64::from(level(base + t))).powi(2))
                .sum()
        };
        let mut best = (steps[gi], group_err(steps[gi]));
        if ff > 0.0 && wf > 0.0 {
            let k = step_of((wf / ff) as f32);
            for k in [k.saturating_sub(1), k, (k + 1).min(127)] {
                let e = group_err(k);
                if e < best.1 {
                    best = (k, e);
                }
            }
        }
        steps[gi] = best.0;
        err += best.1;
    }
    err
}
/// Squared error of a row `x` (already rotated) coded by `trellis` with one
/// `q3` scale byte (positive steps) per `group` weights, `passes` rounds of
/// (Viterbi at the current scales, least-squares refit of each group's
/// scale step with the codes fixed); the first scales are the groups' RMS
/// times `rho`.
pub fn row_error(
    trellis: &Trellis,
    x: &[f32],
    group: usize,
    rho: f32,
    passes: usize,
    scratch: &mut Scratch,
) -> f64 {
    let table = &q3::SCALES;
    let mut steps = first_steps(x, group, rho);
    let d = |steps: &[usize], t: usize| table[steps[t / group]] * 16.0;
    let mut err = f64::INFINITY;
    for _ in 0..passes.max(1) {
        trellis.search(x, |t| d(&steps, t), scratch);
        let states = &scratch.states;
        err = refit_steps(x, group, &mut steps, |t| trellis.value(states[t]));
    }
    err
}

/// Classic trellis-coded quantization (Marcellin–Fischer, Ungerboeck's
/// set partitioning) at 3 bits per weight: a 16-level codebook split into
/// the subsets `D_j = {levels i : i mod 4 = j}`; per weight one branch bit
/// `b` and a 2-bit index `q` within the subset, level `4q + j`. The subset
/// is `j = 2·(b ⊕ r(S)) + p(S)` for the state `S` = the last `nu` branch
/// bits, `p` the parity of the newer `nu - 1` bits under `p_taps` and `r` the
/// oldest bit ⊕ the parity under `r_taps`: the two branches leaving a state
/// take `D_p` and `D_{p+2}`, the two merging into one share `p` and differ
/// in `r` (Ungerboeck's rules). Decoding reads the last `nu` branch bits of
/// the stream: a shift, two masks and two parities per weight.
#[derive(Debug, Clone)]
pub struct Tcq {
    nu: u32,
    p_taps: u32,
    r_taps: u32,
    /// The 16 levels, ascending, unit variance.
    levels: [f32; 16],
    /// `pull[ns]`: the subsets of the two branches into state `ns`, from
    /// `ns >> 1` and from `ns >> 1 | 2^(nu-1)` (both with branch bit `ns & 1`).
    pull: Vec<[u8; 2]>,
}

impl Tcq {
    /// `2^nu` states (`2 ≤ nu ≤ 12`); `levels` ascending.
    pub fn new(nu: u32, p_taps: u32, r_taps: u32, levels: [f32; 16]) -> Self {
        assert!((2..=12).contains(&nu), "tcq nu {nu}");
        let mut t = Self {
            nu,
            p_taps,
            r_taps,
            levels,
            pull: Vec::new(),
        };
        t.pull = (0..1u32 << nu)
            .map(|ns| {
                let (p0, b) = (ns >> 1, ns & 1);
                let p1 = p0 | 1 << (nu - 1);
                [t.subset(p0, b) as u8, t.subset(p1, b) as u8]
            })
            .collect();
        t
    }

    /// 16 Gaussian quantiles scaled by `spread` (1: the plain quantiles).
    pub fn gaussian_levels(spread: f32) -> [f32; 16] {
        std::array::from_fn(|i| spread * inv_normal_cdf((i as f64 + 0.5) / 16.0) as f32)
    }

    /// The subset of the branch `b` leaving state `st`.
    fn subset(&self, st: u32, b: u32) -> usize {
        let newer = st & ((1 << (self.nu - 1)) - 1);
        let oldest = st >> (self.nu - 1);
        let p = (newer & self.p_taps).count_ones() & 1;
        let r = oldest ^ ((newer & self.r_taps).count_ones() & 1);
        (2 * (b ^ r) + p) as usize
    }

    /// Viterbi over a row at per-weight scales; returns the level index per
    /// weight in `out` and the squared error (f32 path sums).
    pub fn search(&self, x: &[f32], scale: impl Fn(usize) -> f32, out: &mut Vec<u8>) -> f32 {
        let n_states = 1usize << self.nu;
        out.clear();
        out.resize(x.len(), 0);
        if x.is_empty() {
            return 0.0;
        }
        // The stream starts in state 0.
        let mut cost = vec![f32::INFINITY; n_states];
        cost[0] = 0.0;
        let mut next = vec![f32::INFINITY; n_states];
        // Per step and new state: the predecessor's oldest bit.
        let mut back = vec![0u8; x.len() * n_states];
        let mut best_q = vec![[0u8; 4]; x.len()];
        for (t, &xt) in x.iter().enumerate() {
            let d = scale(t);
            // Best level of each subset for this weight.
            let mut e = [f32::INFINITY; 4];
            for (j, ej) in e.iter_mut().enumerate() {
                for q in 0..4 {
                    let v = xt - d * self.levels[4 * q + j];
                    if v * v < *ej {
                        *ej = v * v;
                        best_q[t][j] = (4 * q + j) as u8;
                    }
                }
            }
            // Each state's two predecessors differ in their oldest bit; the
            // one without it wins a tie.
            let bk = &mut back[t * n_states..(t + 1) * n_states];
            let half = n_states / 2;
            for (ns, ((o, bo), pl)) in next
                .iter_mut()
                .zip(bk.iter_mut())
                .zip(&self.pull)
                .enumerate()
            {
                let p0 = ns >> 1;
                let c0 = cost[p0] + e[usize::from(pl[0])];
                let c1 = cost[p0 + half] + e[usize::from(pl[1])];
                *bo = u8::from(c1 < c0);
                *o = if c1 < c0 { c1 } else { c0 };
            }
            std::mem::swap(&mut cost, &mut next);
        }
        let mut st = (0..n_states).fold(0, |b, i| if cost[i] < cost[b] { i } else { b });
        let total = cost[st];
        for t in (0..x.len()).rev() {
            let prev = (st >> 1) | (usize::from(back[t * n_states + st]) << (self.nu - 1));
            let b = (st & 1) as u32;
            out[t] = best_q[t][self.subset(prev as u32, b)];
            st = prev;
        }
        total
    }

    /// The unit-variance value of level `i`.
    pub fn level(&self, i: u8) -> f32 {
        self.levels[usize::from(i)]
    }
}

/// [`row_error`] for [`Tcq`]: `q3` scale byte per `group`, RMS·`rho` start,
/// `passes` rounds of Viterbi + least-squares refit of the scale steps.
pub fn tcq_row_error(tcq: &Tcq, x: &[f32], group: usize, rho: f32, passes: usize) -> f64 {
    tcq_row(tcq, x, group, rho, passes).0
}

/// [`tcq_row_error`] with the chosen scale steps (per group) and level
/// indices (per weight).
pub fn tcq_row(
    tcq: &Tcq,
    x: &[f32],
    group: usize,
    rho: f32,
    passes: usize,
) -> (f64, Vec<usize>, Vec<u8>) {
    let table = &q3::SCALES;
    let mut steps = first_steps(x, group, rho);
    let mut idx = Vec::new();
    let mut err = f64::INFINITY;
    for _ in 0..passes.max(1) {
        tcq.search(x, |t| table[steps[t / group]] * 16.0, &mut idx);
        err = refit_steps(x, group, &mut steps, |t| tcq.level(idx[t]));
    }
    (err, steps, idx)
}

/// `i` with its low `bits` bits reversed.
fn reverse_bits(i: usize, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        i.reverse_bits() >> (usize::BITS - bits)
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative
/// error below 1.2e-9: ample for a codebook).
pub(crate) fn inv_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force over every stream of a short row: the Viterbi path is optimal.
    #[test]
    fn viterbi_finds_the_best_stream() {
        let tr = Trellis::new(4, 2);
        let x = [0.3f32, -1.2, 0.8, 2.0, -0.1];
        let mut sc = Scratch::default();
        tr.search(&x, |_| 1.0, &mut sc);
        let path_err = |states: &[u16]| -> f32 {
            x.iter()
                .zip(states)
                .map(|(&v, &s)| (v - tr.value(s)).powi(2))
                .sum()
        };
        let got = path_err(&sc.states);
        // Every sequence of 2-bit codes, first state's upper bits zero.
        let mut best = f32::INFINITY;
        for codes in 0..(1u32 << (2 * x.len())) {
            let mut s = 0u16;
            let states: Vec<u16> = (0..x.len())
                .map(|t| {
                    s = ((s << 2) | ((codes >> (2 * t)) & 3) as u16) & 15;
                    s
                })
                .collect();
            best = best.min(path_err(&states));
        }
        assert!(
            (got - best).abs() <= 1e-6 * best.max(1.0),
            "{got} vs {best}"
        );
        // Consecutive states share bits as the bit stream says.
        for w in sc.states.windows(2) {
            assert_eq!(w[1] >> 2, w[0] & 3);
        }
        assert_eq!(sc.states[0] >> 2, 0);
    }

    /// Brute force over every branch sequence of a short row: the TCQ
    /// Viterbi path is the best one, and its levels follow the subsets.
    #[test]
    fn tcq_viterbi_finds_the_best_path() {
        let tcq = Tcq::new(3, 0b01, 0b10, Tcq::gaussian_levels(1.0));
        let x = [0.3f32, -1.2, 0.8, 2.0, -0.1, 0.45];
        let mut idx = Vec::new();
        let got = tcq.search(&x, |_| 1.0, &mut idx);
        let mut best = f32::INFINITY;
        for bits in 0..(1u32 << x.len()) {
            let (mut st, mut e) = (0u32, 0f32);
            for (t, &v) in x.iter().enumerate() {
                let b = (bits >> t) & 1;
                let j = tcq.subset(st, b);
                e += (0..4)
                    .map(|q| (v - tcq.levels[4 * q + j]).powi(2))
                    .fold(f32::INFINITY, f32::min);
                st = ((st << 1) | b) & 7;
            }
            best = best.min(e);
        }
        assert!(
            (got - best).abs() <= 1e-6 * best.max(1.0),
            "{got} vs {best}"
        );
        let path: f32 = x
            .iter()
            .zip(&idx)
            .map(|(&v, &i)| (v - tcq.level(i)).powi(2))
            .sum();
        assert!((path - got).abs() <= 1e-5, "{path} vs {got}");
    }

    #[test]
    fn codebook_is_unit_gaussian_quantiles() {
        let tr = Trellis::new(8, 3);
        let mean: f64 = tr.codebook.iter().map(|&v| f64::from(v)).sum::<f64>() / 256.0;
        let var: f64 = tr
            .codebook
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            / 256.0;
        assert!(
            mean.abs() < 1e-6 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
        // Each successor set is ascending over its codes: a quantizer of the whole range.
        for set in 0..32 {
            let v = &tr.codebook[set * 8..set * 8 + 8];
            assert!(v.windows(2).all(|p| p[0] < p[1]), "set {set}: {v:?}");
        }
        assert!((inv_normal_cdf(0.975) - 1.959964).abs() < 1e-5);
    }
}
