//! The sampler's seeded PRNG: xoshiro256** seeded through splitmix64 (the reference
//! recommendations of Blackman and Vigna). Small, fast, reproducible across platforms, and
//! enough for drawing tokens; not for anything that needs cryptographic randomness.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Expands one `u64` into the 256-bit state with splitmix64, which never yields the
    /// all-zero state xoshiro cannot leave.
    pub(crate) fn seed_from_u64(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self {
            s: [next(), next(), next(), next()],
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1): the top 53 bits as the mantissa.
    pub(crate) fn next_f64(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // 53 bits fit an f64 mantissa exactly
        let v = (self.next_u64() >> 11) as f64;
        v * (1.0 / (1u64 << 53) as f64)
    }
}

/// A seed for `seed: None`: the clock plus std's per-process random hash keys plus a counter,
/// so that samplers created in the same instant still differ.
pub(crate) fn entropy_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_in_unit_interval_and_reproducible() {
        let (mut a, mut b) = (Rng::seed_from_u64(7), Rng::seed_from_u64(7));
        let mut sum = 0.0;
        for _ in 0..10_000 {
            let x = a.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x.to_bits(), b.next_f64().to_bits());
            sum += x;
        }
        assert!((sum / 10_000.0 - 0.5).abs() < 0.02);
        assert_ne!(
            Rng::seed_from_u64(8).next_u64(),
            Rng::seed_from_u64(7).next_u64()
        );
    }
}
