//! The one place row kernels go parallel: packed matrix × activations split
//! into row chunks over rayon. Row kernels themselves are single-threaded.

use rayon::prelude::*;

use crate::quant::{Kernels, PackedMatrix, QuantizedActs};

/// Rows per rayon task: enough work (~100 KB of weights at 7168 wide) to
/// outweigh scheduling, small enough to balance 768-row matrices on 16 cores.
const ROWS_PER_TASK: usize = 32;

/// `out[t·rows + r] = m.row(r) · acts[t]`, rows split over the rayon pool.
pub fn matmul_par(k: &Kernels, m: &PackedMatrix<'_>, acts: &QuantizedActs, out: &mut [f32]) {
    let (rows, n) = (m.rows(), acts.n);
    if n == 1 {
        // (rows, 1) is (1, rows): each task's slice of `out` is its rows'.
        out.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(c, o)| matmul_rows(k, m, c * ROWS_PER_TASK, acts, o));
        return;
    }
    let mut by_row = vec![0f32; rows * n]; // (rows, n)
    by_row
        .par_chunks_mut(ROWS_PER_TASK * n)
        .enumerate()
        .for_each(|(c, o)| matmul_rows(k, m, c * ROWS_PER_TASK, acts, o));
    for (r, vals) in by_row.chunks(n).enumerate() {
        for (t, v) in vals.iter().enumerate() {
            out[t * rows + r] = *v;
        }
    }
}

/// The exact path of a native matrix: `out[t·rows + r] = decode(row r) · x[t]`,
/// x (n, cols) f32, rows split over the rayon pool, one scratch row per task.
pub fn matmul_exact_par(k: &Kernels, m: &PackedMatrix<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    let (rows, cols) = (m.rows(), m.cols());
    if n == 1 {
        out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each_init(
            || vec![0f32; cols],
            |buf, (c, o)| k.rows_dot_exact(m, c * ROWS_PER_TASK, x, 1, buf, o),
        );
        return;
    }
    let mut by_row = vec![0f32; rows * n]; // (rows, n)
    by_row
        .par_chunks_mut(ROWS_PER_TASK * n)
        .enumerate()
        .for_each_init(
            || vec![0f32; cols],
            |buf, (c, o)| k.rows_dot_exact(m, c * ROWS_PER_TASK, x, n, buf, o),
        );
    for (r, vals) in by_row.chunks(n).enumerate() {
        for (t, v) in vals.iter().enumerate() {
            out[t * rows + r] = *v;
        }
    }
}

/// Single-threaded: rows `r0..r0 + out.len()/n` into `out`, (rows, n).
pub fn matmul_rows(
    k: &Kernels,
    m: &PackedMatrix<'_>,
    r0: usize,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let rb = m.format().row_bytes(m.cols());
    let end = (r0 + out.len() / acts.n.max(1)) * rb;
    // One call for all the rows: the kernels stream over them.
    k.rows_dot(m.format(), &m.bytes()[r0 * rb..end], rb, acts, out);
}
