//! The one place row kernels go parallel: packed matrix × activations split
//! into row chunks over rayon, and the loop of the batched micro-kernels
//! over weight rows and activation tiles ([`tile_rows`]). Row kernels and
//! micro-kernels themselves are single-threaded.

use std::cell::Cell;
use std::marker::PhantomData;

use rayon::prelude::*;

use crate::ggml::dot::tile::q8_0::{ActTileQ8_0, UnpackedQ8_0};
use crate::ggml::dot::tile::{ROWS, TOKENS};
use crate::quant::{Kernels, PackedMatrix, QuantizedActs, tile};
use crate::stash::{Reuse, Stash};

thread_local! {
    /// Activation tiles of a batched product, reused across products
    /// (held across its rayon tasks: a stash, for nested products).
    static TILES: Stash<Vec<ActTileQ8_0>> = const { Stash::new() };
    /// [`ROWS`] weight rows unpacked, on each worker thread.
    static UNPACKED: Cell<Vec<UnpackedQ8_0>> = const { Cell::new(Vec::new()) };
}

/// Rows per rayon task: enough work (~100 KB of weights at 7168 wide) to
/// outweigh scheduling, small enough to balance 768-row matrices on 16 cores.
const ROWS_PER_TASK: usize = 32;

/// Rows per rayon task of a one-token product (decode) over `rows` rows:
/// about four tasks a thread of the pool, at least `min` rows, a multiple of
/// `multiple`. Every call of a row kernel pays a setup (its constant
/// vectors, the activations laid in its order, the last rows' sums): over
/// tasks of a fixed few dozen rows, 5-15 % of a 2048x768 product on one
/// core; a few tasks a thread still balance the cores (docs/BENCH.md).
pub(crate) fn decode_rows_per_task(rows: usize, min: usize, multiple: usize) -> usize {
    let per = rows.div_ceil(4 * rayon::current_num_threads().max(1));
    per.max(min).next_multiple_of(multiple.max(1))
}

/// `out[t·rows + r] = m.row(r) · acts[t]`, rows split over the rayon pool.
pub fn matmul_par(k: &Kernels, m: &PackedMatrix<'_>, acts: &QuantizedActs, out: &mut [f32]) {
    let (rows, n) = (m.rows(), acts.n);
    if n == 1 {
        // (rows, 1) is (1, rows): each task's slice of `out` is its rows'.
        let per = decode_rows_per_task(rows, ROWS_PER_TASK, 1);
        out.par_chunks_mut(per)
            .enumerate()
            .for_each(|(c, o)| matmul_rows(k, m, c * per, acts, o));
        return;
    }
    if let Some(t) = k.tile(m.format(), n) {
        let mut tiles = TILES.take_one();
        tile::pack_acts(acts, &mut tiles);
        let dst = ByToken::new(out, n, rows);
        (0..rows.div_ceil(ROWS_PER_TASK))
            .into_par_iter()
            .for_each(|c| {
                let (r0, r1) = (c * ROWS_PER_TASK, ((c + 1) * ROWS_PER_TASK).min(rows));
                let mut u = UNPACKED.take();
                // SAFETY: this task alone writes rows r0..r1, and `rows_into`
                // hands out rows below r1 - r0, tokens below n.
                tile::rows_into(t, m, r0..r1, &tiles, n, &mut u, unsafe { dst.band(r0) });
                UNPACKED.set(u);
            });
        TILES.give_back(tiles);
        return;
    }
    rows_by_task(
        out,
        n,
        rows,
        ROWS_PER_TASK,
        || (),
        |(), r0, o| matmul_rows(k, m, r0, acts, o),
    );
}

/// The batched product of row kernels that write (rows, n): rows split over
/// the rayon pool in tasks of `per` rows, each task's products computed
/// into its own scratch by `f(state, r0, scratch)` and written into `out`,
/// (n, rows), by the task itself ([`Band::rows`]), so no thread transposes
/// the whole product after the pool (one serial pass of strided stores:
/// 12-16 % of an F16 model's prefill, docs/BENCH.md). `init` makes each
/// worker's state (a scratch row, say).
pub(crate) fn rows_by_task<S>(
    out: &mut [f32],
    n: usize,
    rows: usize,
    per: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, &mut [f32]) + Sync + Send,
) {
    let dst = ByToken::new(out, n, rows);
    (0..rows.div_ceil(per.max(1)))
        .into_par_iter()
        .for_each_init(
            || (init(), Vec::new()),
            |(state, scratch), c| {
                let (r0, r1) = (c * per, ((c + 1) * per).min(rows));
                scratch.clear();
                scratch.resize((r1 - r0) * n, 0.0);
                f(state, r0, scratch);
                // SAFETY: this task alone writes rows r0..r1.
                unsafe { dst.band(r0) }.rows(scratch);
            },
        );
}

/// The exact path of a native matrix: `out[t·rows + r] = decode(row r) · x[t]`,
/// x (n, cols) f32, rows split over the rayon pool, one scratch row per task.
pub fn matmul_exact_par(k: &Kernels, m: &PackedMatrix<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    let (rows, cols) = (m.rows(), m.cols());
    if n == 1 {
        let per = decode_rows_per_task(rows, ROWS_PER_TASK, 1);
        out.par_chunks_mut(per).enumerate().for_each_init(
            || vec![0f32; cols],
            |buf, (c, o)| k.rows_dot_exact(m, c * per, x, 1, buf, o),
        );
        return;
    }
    rows_by_task(
        out,
        n,
        rows,
        crate::dense::PREFILL_ROWS_PER_TASK,
        || vec![0f32; cols],
        |buf, r0, o| k.rows_dot_exact(m, r0, x, n, buf, o),
    );
}

/// Single-threaded: rows `r0..r0 + out.len()/n` into `out`, (rows, n),
/// batched as [`matmul_par`] batches (benchmarks; the driver splits the
/// same work over rayon).
pub fn matmul_rows(
    k: &Kernels,
    m: &PackedMatrix<'_>,
    r0: usize,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let rb = m.format().row_bytes(m.cols());
    let n = acts.n.max(1);
    let r1 = r0 + out.len() / n;
    if let Some(t) = k.tile(m.format(), acts.n) {
        let (mut tiles, mut u) = (Vec::new(), Vec::new());
        tile::pack_acts(acts, &mut tiles);
        tile::rows_into(t, m, r0..r1, &tiles, n, &mut u, |r, t0, v: &[f32]| {
            out[r * n + t0..][..v.len()].copy_from_slice(v);
        });
        return;
    }
    // One call for all the rows: the kernels stream over them.
    k.rows_dot(m.format(), &m.bytes()[r0 * rb..r1 * rb], rb, acts, out);
}

/// The (n, rows) product of a batched product, written in place by
/// the rayon tasks that each own a band of weight rows: a task writes only
/// its rows' column of every token's row, so no product is laid out twice.
pub(crate) struct ByToken<'a> {
    out: *mut f32,
    n: usize,
    rows: usize,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: `put`'s contract keeps the tasks' writes disjoint.
unsafe impl Sync for ByToken<'_> {}

impl<'a> ByToken<'a> {
    /// `out`, (n, rows), to be written by row. Panics if its length is not n · rows.
    pub(crate) fn new(out: &'a mut [f32], n: usize, rows: usize) -> Self {
        assert_eq!(out.len(), n * rows, "output is not (n, rows)");
        Self {
            out: out.as_mut_ptr(),
            n,
            rows,
            _out: PhantomData,
        }
    }

    /// The [`Products`] of the rows from `r0` on, written in place.
    ///
    /// # Safety
    /// No other thread reads or writes the products of the rows it is
    /// handed meanwhile.
    pub(crate) unsafe fn band(&self, r0: usize) -> Band<'_, 'a> {
        Band { dst: self, r0 }
    }
}

/// What a batched product's loops hand their products to: a row at a
/// time, or a micro-kernel's whole tile.
pub(crate) trait Products {
    /// `v[i]` is row `r`'s product with token `t0 + i`.
    fn row(&mut self, r: usize, t0: usize, v: &[f32]);
    /// `v[TOKENS·k + i]` is row `r0 + k`'s product with token `t0 + i`,
    /// for `k < live` and `i < nt`.
    fn tile(&mut self, r0: usize, t0: usize, live: usize, nt: usize, v: &[f32; ROWS * TOKENS]) {
        for k in 0..live {
            self.row(r0 + k, t0, &v[k * TOKENS..][..nt]);
        }
    }
}

impl<F: FnMut(usize, usize, &[f32])> Products for F {
    fn row(&mut self, r: usize, t0: usize, v: &[f32]) {
        self(r, t0, v);
    }
}

/// A band of a [`ByToken`]'s rows, from `r0` on ([`ByToken::band`]).
pub(crate) struct Band<'b, 'a> {
    dst: &'b ByToken<'a>,
    r0: usize,
}

impl Band<'_, '_> {
    /// `v` (k, n) holds the products of this band's first k rows: written
    /// token by token, each token's k products adjacent in `out`.
    pub(crate) fn rows(&mut self, v: &[f32]) {
        let (d, r0) = (self.dst, self.r0);
        let k = v.len() / d.n.max(1);
        assert!(
            v.len() == k * d.n && r0 + k <= d.rows,
            "products out of bounds"
        );
        for t in 0..d.n {
            // SAFETY: in bounds (asserted), the elements are this band's
            // alone (`band`'s contract).
            let o = unsafe { d.out.add(t * d.rows + r0) };
            for (i, row) in v.chunks_exact(d.n).enumerate() {
                // SAFETY: as above.
                unsafe { *o.add(i) = row[t] };
            }
        }
    }
}

impl Products for Band<'_, '_> {
    /// `out[(t0 + i)·rows + r0 + r] = v[i]`. Panics if out of bounds.
    fn row(&mut self, r: usize, t0: usize, v: &[f32]) {
        let (d, r) = (self.dst, self.r0 + r);
        assert!(r < d.rows && t0 + v.len() <= d.n, "product out of bounds");
        for (i, &v) in v.iter().enumerate() {
            // SAFETY: in bounds (asserted), the element is this band's alone
            // (`band`'s contract).
            unsafe { *d.out.add((t0 + i) * d.rows + r) = v };
        }
    }

    /// Token by token: each token's `live` products are adjacent in `out`,
    /// so it is written once, where row by row would touch each of the
    /// tile's tokens' lines `live` times, `rows · 4` bytes apart (the same
    /// L1 set when that is a multiple of 4 KiB).
    fn tile(&mut self, r0: usize, t0: usize, live: usize, nt: usize, v: &[f32; ROWS * TOKENS]) {
        let (d, r0) = (self.dst, self.r0 + r0);
        assert!(
            live <= ROWS && nt <= TOKENS && r0 + live <= d.rows && t0 + nt <= d.n,
            "products out of bounds"
        );
        for i in 0..nt {
            // SAFETY: in bounds (asserted), the elements are this band's
            // alone (`band`'s contract).
            let o = unsafe { d.out.add((t0 + i) * d.rows + r0) };
            for k in 0..live {
                // SAFETY: as above.
                unsafe { *o.add(k) = v[k * TOKENS + i] };
            }
        }
    }
}

/// The batched micro-kernel's loop over weight rows (rows of `rb` bytes in
/// `w`, `per_row` blocks each) and activation tiles (`per_row` each, n
/// tokens in all): [`ROWS`] rows unpacked into `u`, then met by every tile.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_rows<U: Copy + Default, A>(
    w: &[u8],
    rb: usize,
    tiles: &[A],
    per_row: usize,
    n: usize,
    u: &mut Vec<U>,
    unpack: impl Fn(&[u8], &mut [U]),
    gemm: impl Fn(&[U], &[A], usize, &mut [f32; ROWS * TOKENS]),
    mut put: impl Products,
) {
    let rows = w.len() / rb.max(1);
    u.clear();
    u.resize(ROWS * per_row, U::default());
    let mut res = [0f32; ROWS * TOKENS];
    for g in (0..rows).step_by(ROWS) {
        let live = (rows - g).min(ROWS);
        for (r, dst) in u.chunks_exact_mut(per_row).enumerate() {
            if r < live {
                unpack(&w[(g + r) * rb..][..rb], dst);
            } else {
                dst.fill(U::default());
            }
        }
        // the next rows asked for while these multiply: else the unpacker
        // waits on each row's first lines (docs/BENCH.md, "Q4_0 and IQ4_NL
        // decode sixteen rows at a time, and the tile's next rows
        // prefetched")
        let next = (g + ROWS).min(rows) * rb;
        crate::dense::prefetch_lines(w[next..].as_ptr(), (w.len() - next).min(ROWS * rb));
        for (i, at) in tiles.chunks_exact(per_row).enumerate() {
            let t0 = i * TOKENS;
            let nt = (n - t0).min(TOKENS);
            gemm(u, at, nt, &mut res);
            put.tile(g, t0, live, nt, &res);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_task_lays_every_task_s_rows_out_by_token() {
        for (rows, n, per) in [
            (1, 1, 16),
            (47, 3, 16),
            (101, 7, 16),
            (96, 2, 48),
            (5, 9, 1),
        ] {
            let mut out = vec![f32::NAN; rows * n];
            let product = |r: usize, t: usize| (r * 1000 + t) as f32;
            rows_by_task(
                &mut out,
                n,
                rows,
                per,
                || (),
                |(), r0, o| {
                    assert!(
                        o.len() <= per * n && o.len() % n == 0,
                        "a task's scratch is (k, n)"
                    );
                    for (i, row) in o.chunks_exact_mut(n).enumerate() {
                        for (t, v) in row.iter_mut().enumerate() {
                            *v = product(r0 + i, t);
                        }
                    }
                },
            );
            for t in 0..n {
                for r in 0..rows {
                    assert_eq!(
                        out[t * rows + r],
                        product(r, t),
                        "{rows} rows, n {n}, per {per}"
                    );
                }
            }
        }
    }
}
