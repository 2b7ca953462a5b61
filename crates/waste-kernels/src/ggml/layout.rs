//! How the rows of a ggml matrix lie in memory.
//!
//! Row-major is the GGUF's own order. [`RowLayout::Interleaved16`] groups
//! the rows by 16 and stores each group block-column-major: block `b` of
//! row `16·g + i` (i < 16) at byte `16·g·rb + (16·b + i)·bs` (`rb` the
//! row's bytes, `bs` the block's); rows past the last whole group stay
//! where row-major puts them. The bytes, and the blocks, are the same; a
//! group's rows lie within the same 16·rb bytes as in row-major, so a band
//! of whole groups can be handed around as row-major bands are. It is what
//! the sixteen-row decode kernels read as one stream instead of sixteen
//! (docs/BENCH.md, "Q4_0 and IQ4_NL rows interleaved by sixteen").

use super::GgmlType;

/// Rows in a group of [`RowLayout::Interleaved16`].
pub const GROUP: usize = 16;

/// The order of a ggml matrix's rows in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// Row after row, as a GGUF stores them.
    #[default]
    RowMajor,
    /// Rows in groups of [`GROUP`], each group block-column-major (see the
    /// module's documentation).
    Interleaved16,
}

/// Whether matrices of `ty` are stored [`RowLayout::Interleaved16`] where
/// a record can say so: the types with sixteen-row decode kernels.
pub fn interleaves(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::IQ4_NL)
}

/// Checks that `bytes` holds `rows` rows of `rb` bytes in blocks of `bs`.
fn check(bytes: &[u8], rows: usize, rb: usize, bs: usize) {
    assert!(
        bs > 0 && rb.is_multiple_of(bs) && bytes.len() == rows * rb,
        "{} bytes are not {rows} rows of {rb} bytes in blocks of {bs}",
        bytes.len()
    );
}

/// Each whole group of `src` (rows of `rb` bytes, blocks of `bs`) with
/// its blocks moved to the other order into `dst` (as long; rows past the
/// last group untouched): block `i·nb + b` of a row-major group is block
/// `16·b + i` of an interleaved one.
fn regroup(src: &[u8], dst: &mut [u8], rb: usize, bs: usize, interleave: bool) {
    /// Blocks of a size known here move as fixed-size copies (a call to
    /// `memcpy` per 18 bytes ran a band at ~3 GB/s).
    fn fixed<const N: usize>(src: &[u8], dst: &mut [u8], nb: usize, interleave: bool) {
        let (s, _) = src.as_chunks::<N>();
        let (d, _) = dst.as_chunks_mut::<N>();
        for (s, d) in s
            .chunks_exact(GROUP * nb)
            .zip(d.chunks_exact_mut(GROUP * nb))
        {
            for i in 0..GROUP {
                for b in 0..nb {
                    let (rm, il) = (i * nb + b, GROUP * b + i);
                    if interleave {
                        d[il] = s[rm];
                    } else {
                        d[rm] = s[il];
                    }
                }
            }
        }
    }
    let nb = rb / bs;
    let whole = src.len() / (GROUP * rb).max(1) * GROUP * rb;
    let (src, dst) = (&src[..whole], &mut dst[..whole]);
    match bs {
        // Q4_0's and IQ4_NL's blocks
        18 => fixed::<18>(src, dst, nb, interleave),
        _ => {
            for (s, d) in src
                .chunks_exact(GROUP * rb)
                .zip(dst.chunks_exact_mut(GROUP * rb))
            {
                for i in 0..GROUP {
                    for b in 0..nb {
                        let (rm, il) = (i * rb + b * bs, (GROUP * b + i) * bs);
                        let (from, to) = if interleave { (rm, il) } else { (il, rm) };
                        d[to..to + bs].copy_from_slice(&s[from..from + bs]);
                    }
                }
            }
        }
    }
}

/// `src` (`rows` rows of `rb` bytes, blocks of `bs`) in
/// [`RowLayout::Interleaved16`] order.
pub fn interleave16(src: &[u8], rows: usize, rb: usize, bs: usize) -> Vec<u8> {
    check(src, rows, rb, bs);
    let mut dst = src.to_vec();
    regroup(src, &mut dst, rb, bs, true);
    dst
}

/// The rows of `src`, a band of [`RowLayout::Interleaved16`] rows that
/// starts at a group's first row, into `dst` in row-major order.
pub fn deinterleave16_into(src: &[u8], rb: usize, bs: usize, dst: &mut Vec<u8>) {
    let rows = src.len() / rb.max(1);
    check(src, rows, rb, bs);
    dst.clear();
    dst.extend_from_slice(src);
    regroup(src, dst, rb, bs, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block lands where the layout says, and the way back restores
    /// the rows, for row counts around the group and bands of whole groups,
    /// on Q4_0's block size and on one without a fixed-size copy.
    #[test]
    fn interleaving_places_each_block_and_comes_back() {
        for (bs, nb) in [(18, 5), (20, 3)] {
            let rb = bs * nb;
            for rows in [0, 1, 15, 16, 17, 31, 32, 37, 48] {
                let src: Vec<u8> = (0..rows * rb).map(|i| (i * 7 + i / 251) as u8).collect();
                let il = interleave16(&src, rows, rb, bs);
                for r in 0..rows {
                    for b in 0..nb {
                        let want = &src[r * rb + b * bs..][..bs];
                        let at = if r < rows / GROUP * GROUP {
                            (r / GROUP) * GROUP * rb + (GROUP * b + r % GROUP) * bs
                        } else {
                            r * rb + b * bs
                        };
                        assert_eq!(&il[at..at + bs], want, "rows {rows}: row {r} block {b}");
                    }
                }
                let mut back = Vec::new();
                deinterleave16_into(&il, rb, bs, &mut back);
                assert_eq!(back, src, "rows {rows}");
                // a band from a later group's first row on
                if rows > GROUP {
                    deinterleave16_into(&il[GROUP * rb..], rb, bs, &mut back);
                    assert_eq!(back, &src[GROUP * rb..], "rows {rows}: band from row 16");
                }
            }
        }
    }
}
