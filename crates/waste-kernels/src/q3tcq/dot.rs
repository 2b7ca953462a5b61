//! Products of `q3-tcq` rows with activations that went through the rows'
//! [`Rotation`](super::Rotation) and were quantized to int8 per 32
//! ([`QuantizedActs`], one scale per superblock from
//! [`rotated_acts`](super::rotated_acts)): per block of 32, the levels of
//! its steps (decoded from its branch bits and the 6 before them) times
//! the activation codes, summed exactly in i32, then `d_superblock · d_a ·
//! Σ` added in block order in f32. [`vec_dot_q3tcq_q8_ref`] is the
//! specification and [`unpack_row`] the scalar decoder of the batched
//! products (`quant::tile`). The AVX2 kernel (`avx2.rs`) decodes a block
//! with bit-plane arithmetic and byte shuffles, the AVX-512 one
//! (`avx512.rs`) two blocks with byte permutes and a GF(2) affine map; the
//! i32 sums are the same, the f32 terms added in vector lanes (and on
//! AVX-512 a superblock's shared-scale sums in i32 first): equal up to f32
//! summation order.

use super::{BLOCK_BYTES, QK, each_block};
use crate::ggml::dot::tile::q8_0::UnpackedQ8_0;
use crate::quant::act::QuantizedActs;

/// `out[t] = Σ_blocks SCALES[s_sb] · d_a[t, b] · Σ_i level_i · q_a[t, b, i]`
/// for one packed row against every row `t` of `acts` (rotated, quantized).
pub fn vec_dot_q3tcq_q8_ref(row: &[u8], acts: &QuantizedActs, out: &mut [f32]) {
    out[..acts.n].fill(0.0);
    each_block(row, acts.blocks, |b, d, levels| {
        for (t, o) in out.iter_mut().enumerate().take(acts.n) {
            let a = &acts.row_qs(t)[b * QK..(b + 1) * QK];
            let isum: i32 = levels
                .iter()
                .zip(a)
                .map(|(&l, &q)| i32::from(l) * i32::from(q))
                .sum();
            *o += d * acts.row_d(t)[b] * isum as f32;
        }
    });
}

/// One row's blocks (`out.len()` of them) in Q8_0's unpacked form, for the
/// batched products (`quant::tile`): each block's signed levels, `-128 ·
/// Σ levels` and its superblock's scale. The scalar specification of the
/// SIMD unpackers.
pub fn unpack_row(row: &[u8], out: &mut [UnpackedQ8_0]) {
    assert!(
        row.len() >= out.len() * BLOCK_BYTES,
        "row shorter than its blocks"
    );
    each_block(row, out.len(), |b, d, levels| {
        let u = &mut out[b];
        u.q = levels.map(|l| l as u8);
        u.init = -128 * levels.iter().map(|&l| i32::from(l)).sum::<i32>();
        u.d = d;
    });
}
