//! Numerically stable softmax and top-k selection.

/// Softmax in place; `-inf` entries get probability 0.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    waste_kernels::dense::kernels().exp_sub(x, max);
    let sum: f32 = x.iter().sum();
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// Indices of the `k` largest values, largest first; ties go to the lower index.
/// NaN sorts last so a poisoned score is never chosen over a real one.
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| {
        let (va, vb) = (values[a], values[b]);
        match (va.is_nan(), vb.is_nan()) {
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => vb
                .partial_cmp(&va)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b)),
        }
    });
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_handles_neg_inf() {
        let mut x = vec![1.0, f32::NEG_INFINITY, 3.0, 2.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(x[1], 0.0);
        assert!(x[2] > x[3] && x[3] > x[0]);
    }

    #[test]
    fn top_k_orders_by_value_then_index() {
        assert_eq!(top_k(&[0.1, 0.5, f32::NAN, 0.5, 0.2], 3), vec![1, 3, 4]);
    }
}
