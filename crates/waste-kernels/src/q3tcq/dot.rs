//! Products of `q3-tcq` rows with activations that went through the rows'
//! [`Rotation`](super::Rotation) and were quantized to int8 per 32
//! ([`QuantizedActs`]): per block of 32, the levels of its steps (decoded
//! from its branch bits and the 6 before them) times the activation codes,
//! summed exactly in i32, then `d_superblock · d_a · Σ` added in block order
//! in f32. [`vec_dot_q3tcq_q8_ref`] is the specification; the AVX2 kernel
//! decodes a block with bit-plane arithmetic and byte shuffles, with the
//! same i32 sums, and adds the f32 terms in vector lanes: equal up to f32
//! summation order.

use super::{BLOCK_BYTES, QK, SB_BLOCKS, SCALES, block_levels};
use crate::quant::act::QuantizedActs;

/// `out[t] = Σ_blocks SCALES[s_sb] · d_a[t, b] · Σ_i level_i · q_a[t, b, i]`
/// for one packed row against every row `t` of `acts` (rotated, quantized).
pub fn vec_dot_q3tcq_q8_ref(row: &[u8], acts: &QuantizedActs, out: &mut [f32]) {
    let nb = acts.blocks;
    out[..acts.n].fill(0.0);
    let mut state = 0u32;
    let mut levels = [0i8; QK];
    for b0 in (0..nb).step_by(SB_BLOCKS) {
        let k = (nb - b0).min(SB_BLOCKS);
        let sb = &row[b0 * BLOCK_BYTES..(b0 + k) * BLOCK_BYTES];
        let d = SCALES[usize::from(sb[0])];
        let mut wide = 0;
        for blk in 0..k {
            block_levels(sb, k, blk, &mut state, &mut wide, &mut levels);
            let b = b0 + blk;
            for (t, o) in out.iter_mut().enumerate().take(acts.n) {
                let a = &acts.row_qs(t)[b * QK..(b + 1) * QK];
                let isum: i32 = levels
                    .iter()
                    .zip(a)
                    .map(|(&l, &q)| i32::from(l) * i32::from(q))
                    .sum();
                *o += d * acts.row_d(t)[b] * isum as f32;
            }
        }
    }
}
