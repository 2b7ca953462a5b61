//! How far a converted model is from the exact one, measured on real text:
//! the arithmetic of `waste perplexity` and `waste kl` (llama.cpp's
//! `llama-perplexity` and its `--kl-divergence`), over rows of logits the
//! caller computes. Everything accumulates in f64 from a numerically stable
//! log-softmax. Owns no model: the CLI runs the forward passes.

/// `log softmax(logits)` in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    let log_z = max + sum.ln();
    logits.iter().map(|&v| f64::from(v) - log_z).collect()
}

/// `KL(P || Q) = Σ p (log p − log q)` of two log-probability rows.
pub fn kl(log_p: &[f64], log_q: &[f64]) -> f64 {
    log_p
        .iter()
        .zip(log_q)
        .map(|(&lp, &lq)| {
            if lp == f64::NEG_INFINITY {
                0.0
            } else {
                lp.exp() * (lp - lq)
            }
        })
        .sum()
}

/// Index of the largest value (the first on ties).
pub fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best })
}

/// Negative log-likelihoods of predicted tokens: perplexity.
#[derive(Debug, Clone, Default)]
pub struct Perplexity {
    nll: Vec<f64>,
}

impl Perplexity {
    /// Adds the prediction of `target` by one row of logits.
    pub fn add(&mut self, logits: &[f32], target: u32) {
        let lp = log_softmax(logits);
        self.nll.push(-lp[target as usize]);
    }

    pub fn tokens(&self) -> usize {
        self.nll.len()
    }

    pub fn mean_nll(&self) -> f64 {
        self.nll.iter().sum::<f64>() / self.nll.len().max(1) as f64
    }

    /// `exp(mean NLL)`.
    pub fn perplexity(&self) -> f64 {
        self.mean_nll().exp()
    }
}

/// Per-position KL divergence of a model from a reference, top-1 agreement
/// and both perplexities.
#[derive(Debug, Clone, Default)]
pub struct Divergence {
    kl: Vec<f64>,
    agree: usize,
    pub model: Perplexity,
    pub reference: Perplexity,
}

impl Divergence {
    /// One position: the model's and the reference's logits, and the token
    /// that follows in the text (for the perplexities).
    pub fn add(&mut self, model: &[f32], reference: &[f32], target: u32) {
        let (lq, lp) = (log_softmax(model), log_softmax(reference));
        self.kl.push(kl(&lp, &lq).max(0.0));
        if argmax(model) == argmax(reference) {
            self.agree += 1;
        }
        self.model.nll.push(-lq[target as usize]);
        self.reference.nll.push(-lp[target as usize]);
    }

    pub fn positions(&self) -> usize {
        self.kl.len()
    }

    /// Mean KL(reference || model), nats.
    pub fn mean_kl(&self) -> f64 {
        self.kl.iter().sum::<f64>() / self.kl.len().max(1) as f64
    }

    pub fn median_kl(&self) -> f64 {
        let mut v = self.kl.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    pub fn max_kl(&self) -> f64 {
        self.kl.iter().copied().fold(0.0, f64::max)
    }

    /// Share of positions where both pick the same most likely token.
    pub fn top1_agreement(&self) -> f64 {
        self.agree as f64 / self.kl.len().max(1) as f64
    }

    /// The summary as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "positions": self.positions(),
            "mean_kl": self.mean_kl(),
            "median_kl": self.median_kl(),
            "max_kl": self.max_kl(),
            "top1_agreement": self.top1_agreement(),
            "perplexity": self.model.perplexity(),
            "reference_perplexity": self.reference.perplexity(),
        })
    }
}

/// Splits `tokens` into chunks of at most `ctx` tokens (at least 2, so each
/// predicts something); each chunk is scored on its own.
pub fn chunks(tokens: &[u32], ctx: usize) -> impl Iterator<Item = &[u32]> {
    tokens.chunks(ctx.max(2)).filter(|c| c.len() >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_equal_rows_and_positive_otherwise() {
        let a = [1.0f32, 2.0, -1.0, 0.5];
        let la = log_softmax(&a);
        assert!((la.iter().map(|v| v.exp()).sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(kl(&la, &la).abs() < 1e-12);
        let b = [1.0f32, 1.0, 1.0, 1.0];
        let lb = log_softmax(&b);
        // KL(a || uniform) = log 4 - H(a).
        let h: f64 = -la.iter().map(|&l| l.exp() * l).sum::<f64>();
        assert!((kl(&la, &lb) - (4f64.ln() - h)).abs() < 1e-12);
        let mut d = Divergence::default();
        d.add(&b, &a, 1);
        d.add(&a, &a, 0);
        assert_eq!(d.positions(), 2);
        assert_eq!(d.top1_agreement(), 0.5);
        assert!((d.reference.mean_nll() - (-(la[1] + la[0]) / 2.0)).abs() < 1e-12);
    }

    #[test]
    fn perplexity_of_a_uniform_model_is_the_vocabulary() {
        let mut p = Perplexity::default();
        for t in 0..5 {
            p.add(&[0.0; 8], t);
        }
        assert!((p.perplexity() - 8.0).abs() < 1e-9);
        let tokens: Vec<u32> = (0..11).collect();
        let lens: Vec<usize> = chunks(&tokens, 4).map(<[u32]>::len).collect();
        assert_eq!(lens, [4, 4, 3]);
    }
}
