//! Whether a layer's guessed experts are worth reading ahead, by how often
//! such reads were right. Owns only the arithmetic: the record source tells
//! it, for each decode step's routed layer, which experts a prefetch would
//! have read (the guesses not in RAM when guessed) and which the routing
//! chose.
//!
//! Every read a wrong guess issues is bytes the disk moves for nothing and
//! a record that competes with the demand reads behind it. Under a RAM cap
//! the experts a router one layer ahead gets right are mostly the hot ones
//! the cache already holds, so the reads a prefetch would issue are right
//! far less often than the guesses as a whole: on the 4-layer, 64-expert
//! benchmark shape under half the model's size, 49 % of the guesses were
//! right, the gate's estimate for the reads they would issue was 11 % when
//! it paused them (and stayed below half), and prefetching read 1.16 x the
//! bytes per token of not prefetching, at 0.87 x its decode speed (docs/BENCH.md, "Under a RAM cap"). The gate measures the would-be
//! reads' precision whether or not they are issued, so it reopens by itself
//! when guesses start to pay.

use std::collections::HashSet;

/// Below this share of right reads a prefetch moves more wrong bytes than
/// right ones, and the gate closes.
pub const MIN_PRECISION: f64 = 0.5;

/// Counts are halved past this many would-be reads, so the precision
/// follows the last hundred or so decode steps' guesses, not the whole run.
const WINDOW: u64 = 256;

#[derive(Debug, Default, Clone)]
pub struct PrefetchGate {
    /// Would-be prefetch reads observed (decayed).
    reads: u64,
    /// Of those, experts the routing then chose.
    right: u64,
}

impl PrefetchGate {
    /// Records one layer's outcome: `would_read` the guesses a prefetch
    /// would read, `chosen` what the routing chose.
    pub fn observe(&mut self, would_read: &HashSet<u32>, chosen: &[u32]) {
        self.reads += would_read.len() as u64;
        self.right += chosen.iter().filter(|id| would_read.contains(id)).count() as u64;
        if self.reads > WINDOW {
            self.reads /= 2;
            self.right /= 2;
        }
    }

    /// The share of would-be reads that were right, with one right and one
    /// wrong read assumed before any are seen (so it starts open).
    pub fn precision(&self) -> f64 {
        (self.right + 1) as f64 / (self.reads + 2) as f64
    }

    /// Whether prefetch reads should be issued.
    pub fn open(&self) -> bool {
        self.precision() >= MIN_PRECISION
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a direct count: right reads over reads, both halved
    /// together past the window.
    #[test]
    fn precision_is_the_share_of_right_would_be_reads() {
        let mut g = PrefetchGate::default();
        assert!(g.open(), "no evidence yet: open");
        let (mut reads, mut right) = (0u64, 0u64);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let would: HashSet<u32> = (0..(x % 6) as u32).map(|i| i * 3 + step % 2).collect();
            let chosen: Vec<u32> = (0..8).map(|i| i * 2 + (x >> 9) as u32 % 3).collect();
            reads += would.len() as u64;
            right += chosen.iter().filter(|c| would.contains(c)).count() as u64;
            if reads > WINDOW {
                reads /= 2;
                right /= 2;
            }
            g.observe(&would, &chosen);
            let want = (right + 1) as f64 / (reads + 2) as f64;
            assert!((g.precision() - want).abs() < 1e-12, "step {step}");
            assert_eq!(g.open(), want >= MIN_PRECISION);
        }
    }

    /// Guesses that miss close the gate; once they hit again it reopens
    /// by itself, since closed it still observes.
    #[test]
    fn wrong_guesses_close_it_and_right_ones_reopen_it() {
        let mut g = PrefetchGate::default();
        let would: HashSet<u32> = [1, 2, 3, 4].into();
        for _ in 0..4 {
            g.observe(&would, &[5, 6, 7, 8]);
        }
        assert!(!g.open());
        let mut steps = 0;
        while !g.open() {
            g.observe(&would, &[1, 2, 3, 4]);
            steps += 1;
        }
        assert_eq!(steps, 4, "16 wrong, then 16 right reads: precision 17/34");
        // Nothing to read (every guess cached) is no evidence either way.
        let before = g.precision();
        g.observe(&HashSet::new(), &[1, 2]);
        assert_eq!(g.precision(), before);
    }
}
