//! Products of `q3-tcq` rows with activations that went through the rows'
//! [`Rotation`](super::Rotation) and were quantized to int8 per 32
//! ([`QuantizedActs`]): per block of 32, the levels of its steps (decoded
//! from its branch bits and the 6 before them) times the activation codes,
//! summed exactly in i32, then `d_superblock · d_a · Σ` added in block order
//! in f32. [`vec_dot_q3tcq_q8_ref`] is the specification; the AVX2 kernel
//! decodes a block with bit-plane arithmetic and byte shuffles, with the
//! same i32 sums, and adds the f32 terms in vector lanes: equal up to f32
//! summation order.

use super::{BLOCK_BYTES, LEVELS_3, LEVELS_4, QK, SB_BLOCKS, SCALES, STATES, is_wide, subset};
use crate::quant::act::QuantizedActs;

/// The 32 level values of block `blk` of the superblock `sb` (`k` blocks)
/// whose first step follows trellis state `state`; returns the state after
/// the block. `wide_before`: the wide steps of the superblock before this
/// block.
pub(crate) fn block_levels_ref(
    sb: &[u8],
    k: usize,
    blk: usize,
    mut state: u32,
    mut wide: usize,
    out: &mut [i8; QK],
) -> u32 {
    for (i, o) in out.iter_mut().enumerate() {
        let t = blk * QK + i;
        let b = u32::from(sb[1 + 4 * blk + i / 8] >> (i % 8)) & 1;
        let mut q = u32::from(sb[1 + 4 * k + 8 * blk + i % 8] >> (2 * (i / 8))) & 3;
        let j = subset(state, b);
        *o = if is_wide(k, t) {
            q |= (u32::from(sb[1 + 12 * k + wide / 8] >> (wide % 8)) & 1) << 2;
            wide += 1;
            LEVELS_4[(4 * q + j) as usize]
        } else {
            LEVELS_3[(4 * q + j) as usize]
        };
        state = ((state << 1) | b) & (STATES as u32 - 1);
    }
    state
}

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
            state = block_levels_ref(sb, k, blk, state, wide, &mut levels);
            wide += (0..QK).filter(|&i| is_wide(k, blk * QK + i)).count();
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
