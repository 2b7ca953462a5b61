//! Scalar reference of the `q8` dot product (the specification). Never deleted.

use super::{BLOCK_BYTES, scale};
use crate::quant::act::{QuantizedActs, vec_dot_blocks_ref};

/// `out[t] = Σ_b d_b · d_a[t,b] · Σ_i qs_bi · q_a[t,b,i]` (`_grid` unused:
/// the codes are the values).
pub fn vec_dot_q8_q8_ref(row: &[u8], _grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    let value = |blk: &[u8], i: usize| i32::from(blk[2 + i] as i8);
    vec_dot_blocks_ref(row, BLOCK_BYTES, acts, out, scale, value);
}
