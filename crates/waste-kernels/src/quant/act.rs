//! Activations quantized for the integer dot products: int8 per group of 32
//! with an f32 scale (`a ≈ d · q`, `q ∈ [-127, 127]`), rows padded with zeros to
//! whole groups so that tail codes of a weight row always meet zeros.

/// `n` activation rows of `cols` values, quantized to int8 groups of 32.
#[derive(Debug, Clone, Default)]
pub struct QuantizedActs {
    /// Rows.
    pub n: usize,
    /// Real values per row.
    pub cols: usize,
    /// Groups per row, `ceil(cols / 32)`.
    pub blocks: usize,
    /// Codes, (n, blocks · 32), zero past `cols`.
    pub qs: Vec<i8>,
    /// Group scales, (n, blocks).
    pub d: Vec<f32>,
    /// `d · Σ q` per group, (n, blocks): what an unsigned weight offset adds.
    pub sums: Vec<f32>,
    /// `Σ q` per group, (n, blocks), exact: the SIMD kernels' offset correction.
    pub qsums: Vec<i32>,
    /// The codes of `qs` with each pair of groups `2p, 2p + 1` of a row
    /// interleaved by 4-code runs, first the 16 codes of each group's first
    /// half then of its second: `[2p: 0..4, 2p+1: 0..4, 2p: 4..8, ...,
    /// 2p+1: 12..16, 2p: 16..20, ..., 2p+1: 28..32]` (a last odd group as it
    /// is). The order in which the AVX-512 `q3` kernel decodes two blocks
    /// from one load: each i32 lane of its dot products belongs to one
    /// group, alternately, so one broadcast of the two groups' scales
    /// scales them.
    pub qs_pair: Vec<i8>,
    /// The codes of `qs` with each run of 8 groups `8g..8g + 8` of a row
    /// laid by 8-code runs: 64 bytes `k` (0..4) hold codes `8k..8k + 8` of
    /// each of the 8 groups in turn (the groups past a row's last whole 8
    /// as they are). The order in which the 512-bit `q3` kernel decodes
    /// eight blocks: each 64-bit lane of its vectors belongs to one block.
    pub qs_oct: Vec<i8>,
    /// Consecutive groups, from each row's first, that share one scale
    /// (the largest of their magnitudes over 127): 1 (or 0) for every group
    /// its own; `q3-tcq`'s activations, near-Gaussian after their rotation,
    /// share one per superblock so that its kernels sum a superblock in
    /// i32 ([`QuantizedActs::quantize_shared`]). `d` still holds every
    /// group's scale.
    pub shared: usize,
}

impl QuantizedActs {
    /// Quantizes `x`, (n, cols) row-major, reusing this buffer's memory.
    pub fn quantize_from(&mut self, x: &[f32], n: usize, cols: usize) {
        self.quantize_shared(x, n, cols, 1);
    }

    /// Like [`QuantizedActs::quantize_from`], with one scale per `shared ≥
    /// 1` consecutive groups of each row ([`QuantizedActs::shared`]).
    pub fn quantize_shared(&mut self, x: &[f32], n: usize, cols: usize, shared: usize) {
        let shared = shared.max(1);
        let blocks = cols.div_ceil(32);
        self.shared = shared;
        self.n = n;
        self.cols = cols;
        self.blocks = blocks;
        self.qs.clear();
        self.qs.resize(n * blocks * 32, 0);
        self.d.clear();
        self.d.resize(n * blocks, 0.0);
        self.sums.clear();
        self.sums.resize(n * blocks, 0.0);
        self.qsums.clear();
        self.qsums.resize(n * blocks, 0);
        for t in 0..n {
            let row = &x[t * cols..(t + 1) * cols];
            // One scale per span of `shared` groups, then each group's codes.
            for (s, span) in row.chunks(32 * shared).enumerate() {
                let amax = span.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
                for (j, g) in span.chunks(32).enumerate() {
                    let b = s * shared + j;
                    let q = &mut self.qs[(t * blocks + b) * 32..][..g.len()];
                    for (o, v) in q.iter_mut().zip(g) {
                        // `round()` without its libm call per value: |v · inv| ≤ 127.
                        *o = crate::ggml::act::round_half_away(v * inv).clamp(-127, 127) as i8;
                    }
                    let qsum = q.iter().map(|&v| i32::from(v)).sum::<i32>();
                    self.d[t * blocks + b] = d;
                    self.sums[t * blocks + b] = d * qsum as f32;
                    self.qsums[t * blocks + b] = qsum;
                }
            }
        }
        // Pairs: 4-code run g (group g / 8, codes 4k..4k + 4 for k = g % 8)
        // to the k / 4 half, the (k % 4)-th place of its group.
        relay(&self.qs, &mut self.qs_pair, blocks, 2, 4, |g| {
            let (which, k) = (g / 8, g % 8);
            32 * (k / 4) + 4 * (2 * (k % 4) + which)
        });
        // Eights: 8-code run r (group r / 4, codes 8k..8k + 8 for k = r % 4)
        // to 64 bytes k, the group's 8.
        relay(&self.qs, &mut self.qs_oct, blocks, 8, 8, |r| {
            let (l, k) = (r / 4, r % 4);
            64 * k + 8 * l
        });
    }

    /// A new quantized copy of `x`, (n, cols).
    pub fn new(x: &[f32], n: usize, cols: usize) -> Self {
        let mut a = Self::default();
        a.quantize_from(x, n, cols);
        a
    }

    /// Codes of row `t`.
    #[inline]
    pub fn row_qs(&self, t: usize) -> &[i8] {
        &self.qs[t * self.blocks * 32..(t + 1) * self.blocks * 32]
    }

    /// Group scales of row `t`.
    #[inline]
    pub fn row_d(&self, t: usize) -> &[f32] {
        &self.d[t * self.blocks..(t + 1) * self.blocks]
    }
}

/// `dst` = `qs` (rows of `blocks` groups of 32 codes) with, in each row,
/// every whole `span` groups re-laid: their `run`-code piece `r` at `at(r)`
/// within them; the groups past a row's last whole `span` as they are.
fn relay(
    qs: &[i8],
    dst: &mut Vec<i8>,
    blocks: usize,
    span: usize,
    run: usize,
    at: impl Fn(usize) -> usize,
) {
    dst.clear();
    dst.extend_from_slice(qs);
    let row = blocks * 32;
    if row == 0 {
        return; // no codes
    }
    for (src, out) in qs.chunks_exact(row).zip(dst.chunks_exact_mut(row)) {
        for (src, out) in src
            .chunks_exact(32 * span)
            .zip(out.chunks_exact_mut(32 * span))
        {
            for (r, piece) in src.chunks_exact(run).enumerate() {
                out[at(r)..][..run].copy_from_slice(piece);
            }
        }
    }
}

/// The `_ref` dot product of every block format: `out[t] = Σ_b scale(block_b)
/// · d_a[t,b] · Σ_i value(block_b, i) · q_a[t,b,i]`, the inner sum exact in
/// i32, the outer in f32 in block order. Each format's `reference.rs` names
/// its scale and value functions.
pub fn vec_dot_blocks_ref(
    row: &[u8],
    block_bytes: usize,
    acts: &QuantizedActs,
    out: &mut [f32],
    scale: impl Fn(&[u8]) -> f32,
    value: impl Fn(&[u8], usize) -> i32,
) {
    for (t, o) in out.iter_mut().enumerate().take(acts.n) {
        let (qs, ds) = (acts.row_qs(t), acts.row_d(t));
        let mut acc = 0f32;
        for (b, blk) in row.chunks_exact(block_bytes).enumerate().take(acts.blocks) {
            let a = &qs[b * 32..(b + 1) * 32];
            let isum: i32 = a
                .iter()
                .enumerate()
                .map(|(i, &q)| value(blk, i) * i32::from(q))
                .sum();
            acc += scale(blk) * ds[b] * isum as f32;
        }
        *o = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_pair_order_follow_the_codes() {
        let (n, cols) = (2, 5 * 32 + 7);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let a = QuantizedActs::new(&x, n, cols);
        assert_eq!(a.blocks, 6);
        for t in 0..n {
            for b in 0..a.blocks {
                let q = &a.qs[(t * a.blocks + b) * 32..][..32];
                let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
                assert_eq!(a.qsums[t * a.blocks + b], sum);
            }
            for p in 0..a.blocks / 2 {
                let at = (t * a.blocks + 2 * p) * 32;
                let (src, pair) = (&a.qs[at..at + 64], &a.qs_pair[at..at + 64]);
                for (which, g) in src.chunks_exact(32).enumerate() {
                    for (i, &v) in g.iter().enumerate() {
                        // Code i of group `which`: half i / 16, run (i % 16) / 4.
                        let to = 32 * (i / 16) + 8 * ((i % 16) / 4) + 4 * which + i % 4;
                        assert_eq!(pair[to], v, "t {t} pair {p} group {which} code {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn empty_rows_quantize_to_nothing() {
        for (n, cols) in [(0, 0), (3, 0), (0, 64)] {
            let a = QuantizedActs::new(&vec![0.5; n * cols], n, cols);
            assert!(a.qs.is_empty() && a.qs_pair.is_empty() && a.qs_oct.is_empty());
        }
    }

    #[test]
    fn oct_order_follows_the_codes() {
        let (n, cols) = (2, 19 * 32 + 5);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 41 % 97) as f32 - 48.0) / 5.0)
            .collect();
        let a = QuantizedActs::new(&x, n, cols);
        assert_eq!(a.blocks, 20);
        for t in 0..n {
            let row = t * a.blocks * 32;
            for b in 0..a.blocks {
                for i in 0..32 {
                    let code = a.qs[row + 32 * b + i];
                    // whole eights: 64 bytes per 8 codes of all eight groups
                    let to = if b < 16 {
                        256 * (b / 8) + 64 * (i / 8) + 8 * (b % 8) + i % 8
                    } else {
                        32 * b + i
                    };
                    assert_eq!(a.qs_oct[row + to], code, "t {t} group {b} code {i}");
                }
            }
        }
    }

    #[test]
    fn shared_scales_are_the_largest_magnitude_of_their_groups() {
        let (n, cols, shared) = (2, 13 * 32 + 5, 6);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53 % 211) as f32 - 105.0) / if i % 40 == 3 { 1.0 } else { 9.0 })
            .collect();
        let mut a = QuantizedActs::default();
        a.quantize_shared(&x, n, cols, shared);
        assert_eq!((a.blocks, a.shared), (14, shared));
        for t in 0..n {
            let row = &x[t * cols..(t + 1) * cols];
            for b in 0..a.blocks {
                let g0 = b - b % shared;
                let span = &row[g0 * 32..((g0 + shared) * 32).min(cols)];
                let amax = span.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = a.d[t * a.blocks + b];
                assert_eq!(d, amax / 127.0, "row {t} group {b}");
                for (i, &v) in row[b * 32..((b + 1) * 32).min(cols)].iter().enumerate() {
                    let q = a.qs[(t * a.blocks + b) * 32 + i];
                    assert!((f32::from(q) * d - v).abs() <= 0.5 * d * (1.0 + 1e-6));
                }
            }
        }
    }
}
