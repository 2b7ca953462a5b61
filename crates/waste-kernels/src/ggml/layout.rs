//! How the rows of a ggml matrix lie in memory.
//!
//! Row-major is the GGUF's own order. The other layouts group the rows by
//! 16 and keep each group's blocks together by block column: block `b` of
//! the rows `16·g..16·g + 16` within the `16·bs` bytes at `16·g·rb +
//! 16·b·bs` (`rb` the row's bytes, `bs` the block's). Within a block
//! column, [`RowLayout::Interleaved16`] keeps the blocks whole (block `b`
//! of row `16·g + i` at `16·g·rb + (16·b + i)·bs`) and
//! [`RowLayout::Words16`] lays them word-major (4-byte word `j` of that
//! block at `16·g·rb + 16·b·bs + 4·(16·j + i)`, so one 64-byte load holds
//! the same word of all sixteen rows). Rows past the last whole group stay
//! where row-major puts them. The bytes are the same; a group's rows lie
//! within the same 16·rb bytes as in row-major, so a band of whole groups
//! can be handed around as row-major bands are. It is what the sixteen-row
//! decode kernels read as one stream instead of sixteen (docs/BENCH.md,
//! "Q4_0 and IQ4_NL rows interleaved by sixteen", "Q4_K rows word-major by
//! sixteen").

use std::borrow::Cow;

use super::GgmlType;

/// Rows in a group of the interleaved layouts.
pub const GROUP: usize = 16;

/// The order of a ggml matrix's rows in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// Row after row, as a GGUF stores them.
    #[default]
    RowMajor,
    /// Rows in groups of [`GROUP`], each group's blocks whole and
    /// block-column-major (see the module's documentation).
    Interleaved16,
    /// Rows in groups of [`GROUP`], each block column of a group
    /// word-major (see the module's documentation); blocks of a multiple
    /// of 4 bytes.
    Words16,
}

/// The layout a record gives matrices of `ty` (of a group of rows or
/// more), where some table has sixteen-row kernels that read it: Q4_0's
/// and IQ4_NL's 18-byte blocks and MXFP4's 17-byte ones whole, Q4_K's
/// 144-byte and IQ4_XS's 136-byte ones word-major.
pub fn interleaving(ty: GgmlType) -> Option<RowLayout> {
    match ty {
        GgmlType::Q4_0 | GgmlType::IQ4_NL | GgmlType::MXFP4 => Some(RowLayout::Interleaved16),
        GgmlType::Q4_K | GgmlType::IQ4_XS => Some(RowLayout::Words16),
        _ => None,
    }
}

/// The layout a matrix of `rows` rows of `ty` is held in (a record's
/// component, a backbone matrix in RAM): its type's [`interleaving`] where
/// it has a group of rows or more, else row-major.
pub fn for_rows(ty: GgmlType, rows: usize) -> RowLayout {
    match interleaving(ty) {
        Some(laid) if rows >= GROUP => laid,
        _ => RowLayout::RowMajor,
    }
}

/// Whether rows of `ty` may be laid as `layout`: row-major always, else
/// the type's [`interleaving`].
pub fn lays(ty: GgmlType, layout: RowLayout) -> bool {
    layout == RowLayout::RowMajor || interleaving(ty) == Some(layout)
}

/// Checks that `bytes` holds `rows` rows of `rb` bytes in blocks of `bs`.
fn check(bytes: &[u8], rows: usize, rb: usize, bs: usize, layout: RowLayout) {
    assert!(
        bs > 0 && rb.is_multiple_of(bs) && bytes.len() == rows * rb,
        "{} bytes are not {rows} rows of {rb} bytes in blocks of {bs}",
        bytes.len()
    );
    assert!(
        layout != RowLayout::Words16 || bs.is_multiple_of(4),
        "blocks of {bs} bytes are not whole words"
    );
}

/// Each whole group of `src` (rows of `rb` bytes, blocks of `bs`) moved
/// between row-major and `layout` (to it where `lay`, else from it) into
/// `dst` (as long; rows past the last group untouched): unit `u` of block
/// `b` of the group's row `i` (units of `unit` bytes, `n` to a block) sits
/// at unit `i·nb·n + b·n + u` in row-major order and at `16·b·n + 16·u +
/// i` laid out. Whole blocks are one unit ([`RowLayout::Interleaved16`]),
/// words are four bytes ([`RowLayout::Words16`]).
fn regroup(src: &[u8], dst: &mut [u8], rb: usize, bs: usize, layout: RowLayout, lay: bool) {
    /// Units of a size known here move as fixed-size copies (a call to
    /// `memcpy` per 18 bytes ran a band at ~3 GB/s).
    fn fixed<const N: usize>(src: &[u8], dst: &mut [u8], nb: usize, n: usize, lay: bool) {
        let (s, _) = src.as_chunks::<N>();
        let (d, _) = dst.as_chunks_mut::<N>();
        let per_group = GROUP * nb * n;
        for (s, d) in s.chunks_exact(per_group).zip(d.chunks_exact_mut(per_group)) {
            for i in 0..GROUP {
                for b in 0..nb {
                    for u in 0..n {
                        let (rm, il) = ((i * nb + b) * n + u, GROUP * (b * n + u) + i);
                        if lay {
                            d[il] = s[rm];
                        } else {
                            d[rm] = s[il];
                        }
                    }
                }
            }
        }
    }
    let nb = rb / bs;
    let whole = src.len() / (GROUP * rb).max(1) * GROUP * rb;
    let (src, dst) = (&src[..whole], &mut dst[..whole]);
    match (layout, bs) {
        (RowLayout::RowMajor, _) => dst.copy_from_slice(src),
        (RowLayout::Words16, _) => fixed::<4>(src, dst, nb, bs / 4, lay),
        // Q4_0's and IQ4_NL's blocks
        (RowLayout::Interleaved16, 18) => fixed::<18>(src, dst, nb, 1, lay),
        (RowLayout::Interleaved16, _) => {
            for (s, d) in src
                .chunks_exact(GROUP * rb)
                .zip(dst.chunks_exact_mut(GROUP * rb))
            {
                for i in 0..GROUP {
                    for b in 0..nb {
                        let (rm, il) = (i * rb + b * bs, (GROUP * b + i) * bs);
                        let (from, to) = if lay { (rm, il) } else { (il, rm) };
                        d[to..to + bs].copy_from_slice(&s[from..from + bs]);
                    }
                }
            }
        }
    }
}

/// `src` (`rows` row-major rows of `rb` bytes, blocks of `bs`) laid as
/// `layout`.
pub fn lay_out(layout: RowLayout, src: &[u8], rows: usize, rb: usize, bs: usize) -> Vec<u8> {
    check(src, rows, rb, bs, layout);
    let mut dst = src.to_vec();
    regroup(src, &mut dst, rb, bs, layout, true);
    dst
}

/// `data` (row-major rows of `rb` bytes, blocks of `bs`) laid as `layout`
/// in place, one group at a time through a group's scratch, groups split
/// over rayon (a backbone's matrices are laid out at load).
pub fn lay_out_in_place(layout: RowLayout, data: &mut [u8], rb: usize, bs: usize) {
    use rayon::prelude::*;
    if rb == 0 {
        return;
    }
    check(data, data.len() / rb, rb, bs, layout);
    data.par_chunks_exact_mut(GROUP * rb).for_each_init(
        || vec![0u8; GROUP * rb],
        |scratch, group| {
            scratch.copy_from_slice(group);
            regroup(scratch, group, rb, bs, layout, true);
        },
    );
}

/// Row `r` of `bytes` (rows of `rb` bytes laid as `layout`, blocks of
/// `bs`): borrowed where it lies whole, else gathered.
pub fn row_of(layout: RowLayout, bytes: &[u8], r: usize, rb: usize, bs: usize) -> Cow<'_, [u8]> {
    let whole = bytes.len() / (GROUP * rb).max(1) * GROUP;
    let unit = match layout {
        RowLayout::RowMajor => return Cow::Borrowed(&bytes[r * rb..][..rb]),
        _ if r >= whole => return Cow::Borrowed(&bytes[r * rb..][..rb]),
        RowLayout::Interleaved16 => bs,
        RowLayout::Words16 => 4,
    };
    let (g, i) = (r / GROUP, r % GROUP);
    let group = &bytes[g * GROUP * rb..][..GROUP * rb];
    let mut row = Vec::with_capacity(rb);
    for b in 0..rb / bs {
        for u in 0..bs / unit {
            let at = GROUP * b * bs + (GROUP * u + i) * unit;
            row.extend_from_slice(&group[at..at + unit]);
        }
    }
    Cow::Owned(row)
}

/// The rows of `src`, a band laid as `layout` that starts at a group's
/// first row, into `dst` in row-major order.
pub fn to_row_major_into(layout: RowLayout, src: &[u8], rb: usize, bs: usize, dst: &mut Vec<u8>) {
    let rows = src.len() / rb.max(1);
    check(src, rows, rb, bs, layout);
    dst.clear();
    dst.extend_from_slice(src);
    regroup(src, dst, rb, bs, layout, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit lands where the layout says, in place as into a copy;
    /// each row gathers back, and the way back restores the rows, for row
    /// counts around the group and bands of whole groups,
    /// on Q4_0's block size (a fixed-size copy), one without, and words.
    #[test]
    fn each_layout_places_each_unit_and_comes_back() {
        for (layout, bs, nb) in [
            (RowLayout::Interleaved16, 18, 5),
            (RowLayout::Interleaved16, 20, 3),
            (RowLayout::Words16, 20, 3),
            (RowLayout::Words16, 144, 2),
        ] {
            let rb = bs * nb;
            let unit = if layout == RowLayout::Words16 { 4 } else { bs };
            for rows in [0, 1, 15, 16, 17, 31, 32, 37, 48] {
                let src: Vec<u8> = (0..rows * rb).map(|i| (i * 7 + i / 251) as u8).collect();
                let il = lay_out(layout, &src, rows, rb, bs);
                for r in 0..rows {
                    for b in 0..nb {
                        for u in 0..bs / unit {
                            let want = &src[r * rb + b * bs + u * unit..][..unit];
                            let at = if r < rows / GROUP * GROUP {
                                let (g, i) = (r / GROUP, r % GROUP);
                                g * GROUP * rb + GROUP * b * bs + (GROUP * u + i) * unit
                            } else {
                                r * rb + b * bs + u * unit
                            };
                            assert_eq!(
                                &il[at..at + unit],
                                want,
                                "{layout:?} rows {rows}: row {r} block {b} unit {u}"
                            );
                        }
                    }
                }
                let mut in_place = src.clone();
                lay_out_in_place(layout, &mut in_place, rb, bs);
                assert_eq!(in_place, il, "{layout:?} rows {rows}: in place");
                for r in 0..rows {
                    let row = row_of(layout, &il, r, rb, bs);
                    assert_eq!(*row, src[r * rb..][..rb], "{layout:?} rows {rows}: row {r}");
                }
                let mut back = Vec::new();
                to_row_major_into(layout, &il, rb, bs, &mut back);
                assert_eq!(back, src, "{layout:?} rows {rows}");
                // a band from a later group's first row on
                if rows > GROUP {
                    to_row_major_into(layout, &il[GROUP * rb..], rb, bs, &mut back);
                    assert_eq!(
                        back,
                        &src[GROUP * rb..],
                        "{layout:?} rows {rows}: from row 16"
                    );
                }
            }
        }
    }
}
