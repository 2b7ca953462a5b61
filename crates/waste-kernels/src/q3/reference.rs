//! Scalar reference of the `q3` dot product: the specification every SIMD
//! version must reproduce (within float summation order). Never deleted.

use super::{BLOCK_BYTES, SCALES, code};
use crate::quant::act::{QuantizedActs, vec_dot_blocks_ref};

/// `out[t] = Σ_b SCALES[s_b] · d_a[t,b] · Σ_i grid[c_bi] · q_a[t,b,i]` for one
/// packed row against every row `t` of `acts`.
pub fn vec_dot_q3_q8_ref(row: &[u8], grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    let scale = |blk: &[u8]| SCALES[usize::from(blk[0])];
    let value = |blk: &[u8], i: usize| i32::from(grid[code(blk, i)]);
    vec_dot_blocks_ref(row, BLOCK_BYTES, acts, out, scale, value);
}
