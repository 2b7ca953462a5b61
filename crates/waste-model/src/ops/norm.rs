//! RMSNorm as transformers computes it: `w · (x · rsqrt(mean(x²) + eps))`, all f32.

/// Normalises each row of `x` (rows of `weight.len()` values) in place.
pub fn rms_norm_rows(x: &mut [f32], weight: &[f32], eps: f32) {
    for row in x.chunks_mut(weight.len()) {
        rms_norm(row, weight, eps);
    }
}

/// Normalises one row in place.
pub fn rms_norm(row: &mut [f32], weight: &[f32], eps: f32) {
    let mean_sq = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
    let inv = 1.0 / (mean_sq + eps).sqrt();
    for (v, w) in row.iter_mut().zip(weight) {
        *v = w * (*v * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_weight_gives_unit_rms() {
        let mut x = vec![3.0, -4.0, 12.0, 0.5];
        rms_norm(&mut x, &[1.0; 4], 0.0);
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / 4.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-6);
    }
}
