//! Scalar reference of the `q3` dot product: the specification every SIMD
//! version must reproduce (within float summation order). Never deleted.

use super::{BLOCK_BYTES, SCALES, code};
use crate::quant::act::QuantizedActs;

/// `out[t] = Σ_b SCALES[s_b] · d_a[t,b] · Σ_i grid[c_bi] · q_a[t,b,i]` for one
/// packed row against every row `t` of `acts`.
pub fn vec_dot_q3_q8_ref(row: &[u8], grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    for (t, o) in out.iter_mut().enumerate().take(acts.n) {
        let (qs, ds) = (acts.row_qs(t), acts.row_d(t));
        let mut acc = 0f32;
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate().take(acts.blocks) {
            let a = &qs[b * 32..(b + 1) * 32];
            let mut isum = 0i32;
            for (i, &q) in a.iter().enumerate() {
                isum += i32::from(grid[code(blk, i)]) * i32::from(q);
            }
            acc += SCALES[usize::from(blk[0])] * ds[b] * isum as f32;
        }
        *o = acc;
    }
}
