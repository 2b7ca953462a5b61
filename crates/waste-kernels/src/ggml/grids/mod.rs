//! Lookup tables of the ggml i-quants and of MXFP4: the lattice grids
//! (generated from gguf-py by `scripts/gen-ggml-grids.py`), the sign
//! patterns and the non-uniform 4-bit value sets. An entry of a grid word
//! holds weight j in byte j (little-endian), as in ggml-common.h.

mod iq1s;
mod iq2;
mod iq3;

pub use iq1s::IQ1S_GRID;
pub use iq2::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
pub use iq3::{IQ3S_GRID, IQ3XXS_GRID};

/// ggml `ksigns_iq2xs`: sign pattern of eight weights from a 7-bit index.
/// Bits 0..7 are the index; bit 7 is their parity, so that every pattern
/// has an even number of minus signs (bit j set: weight j is negated).
pub static KSIGNS: [u8; 128] = ksigns();

const fn ksigns() -> [u8; 128] {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u8).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
}

/// ggml `kvalues_iq4nl`: the 16 levels of IQ4_NL and IQ4_XS, ascending.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml `kvalues_mxfp4`: the E2M1 values doubled to stay integral. The
/// nibble is a sign bit and a 3-bit magnitude code {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The `i`-th byte of a little-endian grid word.
#[inline]
pub(crate) fn byte(word: u64, i: usize) -> u8 {
    word.to_le_bytes()[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ksigns_match_ggml_rows() {
        // first and last rows of ggml's ksigns_iq2xs
        assert_eq!(KSIGNS[..8], [0, 129, 130, 3, 132, 5, 6, 135]);
        assert_eq!(KSIGNS[120..], [120, 249, 250, 123, 252, 125, 126, 255]);
    }

    #[test]
    fn grid_entries_are_in_their_value_sets() {
        let all = |g: &[u64], ok: &[u8]| {
            g.iter()
                .all(|&w| w.to_le_bytes().iter().all(|b| ok.contains(b)))
        };
        assert!(all(&IQ2XXS_GRID, &[8, 25, 43]));
        assert!(all(&IQ2XS_GRID, &[8, 25, 43]));
        assert!(all(&IQ2S_GRID, &[8, 25, 43]));
        assert!(all(&IQ1S_GRID, &[0xff, 0, 1]));
        let all3 = |g: &[u32], ok: &[u8]| {
            g.iter()
                .all(|&w| w.to_le_bytes().iter().all(|b| ok.contains(b)))
        };
        assert!(all3(&IQ3XXS_GRID, &[4, 12, 20, 28, 36, 44, 52, 62]));
        assert!(all3(&IQ3S_GRID, &[1, 3, 5, 7, 9, 11, 13, 15]));
        // the grids are sets: no entry twice
        for g in [&IQ2XXS_GRID[..], &IQ2XS_GRID, &IQ2S_GRID, &IQ1S_GRID] {
            let mut v = g.to_vec();
            v.sort_unstable();
            v.dedup();
            assert_eq!(v.len(), g.len());
        }
    }
}
