//! Scalar reference of the `q8` dot product (the specification). Never deleted.

use super::{BLOCK_BYTES, scale};
use crate::quant::act::QuantizedActs;

/// `out[t] = Σ_b d_b · d_a[t,b] · Σ_i qs_bi · q_a[t,b,i]` (`_grid` unused:
/// the codes are the values).
pub fn vec_dot_q8_q8_ref(row: &[u8], _grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    for (t, o) in out.iter_mut().enumerate().take(acts.n) {
        let (qs, ds) = (acts.row_qs(t), acts.row_d(t));
        let mut acc = 0f32;
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate().take(acts.blocks) {
            let mut isum = 0i32;
            for (i, &q) in qs[b * 32..(b + 1) * 32].iter().enumerate() {
                isum += i32::from(blk[2 + i] as i8) * i32::from(q);
            }
            acc += scale(blk) * ds[b] * isum as f32;
        }
        *o = acc;
    }
}
