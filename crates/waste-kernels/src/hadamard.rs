//! Randomized block-diagonal Hadamard rotation of a matrix's input dimension
//! (QuIP#/QTIP's incoherence processing, calibration-free): `W' = W·(D·H)` per
//! block of `p` columns, `p` the largest power of two dividing the width (at
//! most [`MAX_BLOCK`]), `D` seeded random signs, `H` the orthonormal
//! Walsh-Hadamard matrix. Undone on activations with the same transform.
//! Used by the quantizer study; no stored format rotates yet.

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
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (x[j], x[j + h]);
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let s = 1.0 / (n as f32).sqrt();
    x.iter_mut().for_each(|v| *v *= s);
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
