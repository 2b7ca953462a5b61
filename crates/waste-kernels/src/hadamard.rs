//! Randomized block-diagonal Hadamard rotation of a matrix's input dimension
//! (QuIP#/QTIP's incoherence processing, calibration-free): `W' = W·(D·H)` per
//! block of `p` columns, `p` the largest power of two dividing the width (at
//! most [`MAX_BLOCK`]), `D` seeded random signs, `H` the orthonormal
//! Walsh-Hadamard matrix. Undone on activations with the same transform.
//! The quantizer study measures this rotation; `q3tcq::Rotation`, the
//! whole-row rotation of the `q3-tcq` format, builds on [`fwht`] and
//! [`signs`].

/// Largest rotation block.
pub const MAX_BLOCK: usize = 256;

/// The rotation block for rows of width `cols`: the largest power of two
/// dividing it, at most [`MAX_BLOCK`] (never a padding of the row).
pub fn block_for(cols: usize) -> usize {
    if cols == 0 {
        return 1;
    }
    (1usize << cols.trailing_zeros()).min(MAX_BLOCK)
}

/// In-place orthonormal fast Walsh-Hadamard transform of `x` (len a power of two).
pub fn fwht(x: &mut [f32]) {
    let n = x.len();
    // The butterflies of each stage, the same additions in the same order
    // whatever the stage's span: the first spans as constants so that the
    // compiler unrolls them, the rest on two contiguous halves.
    if n >= 2 {
        stage::<1>(x);
    }
    if n >= 4 {
        stage::<2>(x);
    }
    if n >= 8 {
        stage::<4>(x);
    }
    let mut h = 8;
    while h < n {
        for c in x.chunks_exact_mut(2 * h) {
            let (a, b) = c.split_at_mut(h);
            butterflies(a, b);
        }
        h *= 2;
    }
    let s = 1.0 / (n as f32).sqrt();
    x.iter_mut().for_each(|v| *v *= s);
}

/// One stage of butterflies of span `H`.
fn stage<const H: usize>(x: &mut [f32]) {
    for c in x.chunks_exact_mut(2 * H) {
        let (a, b) = c.split_at_mut(H);
        butterflies(a, b);
    }
}

#[inline]
fn butterflies(a: &mut [f32], b: &mut [f32]) {
    for (u, v) in a.iter_mut().zip(b.iter_mut()) {
        let (p, q) = (*u, *v);
        *u = p + q;
        *v = p - q;
    }
}

/// Seeded ±1 per column (xorshift64*), shared by weights and activations.
pub fn signs(cols: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..cols)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            if s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 63 == 0 {
                1.0
            } else {
                -1.0
            }
        })
        .collect()
}

/// Rotates one row (weights or an activation) in place: signs, then FWHT per block.
pub fn rotate_row(row: &mut [f32], signs: &[f32]) {
    let p = block_for(row.len());
    row.iter_mut().zip(signs).for_each(|(v, s)| *v *= s);
    row.chunks_mut(p).for_each(fwht);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_is_orthogonal_and_blocks_divide_real_widths() {
        for (cols, p) in [(7168, 256), (576, 64), (384, 128), (2048, 256), (100, 4)] {
            assert_eq!(block_for(cols), p);
            let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
            let y: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.11).cos()).collect();
            let s = signs(cols, 9);
            let (mut rx, mut ry) = (x.clone(), y.clone());
            rotate_row(&mut rx, &s);
            rotate_row(&mut ry, &s);
            let dot =
                |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(u, v)| f64::from(u * v)).sum::<f64>();
            assert!((dot(&x, &y) - dot(&rx, &ry)).abs() < 1e-3, "{cols}");
        }
    }
}
