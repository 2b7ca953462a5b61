//! The ggml i-quants: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S
//! and IQ4_XS (ggml-common.h `block_iq1_s` .. `block_iq4_xs`), all of 256
//! weights. Most code groups of 8 (or 4) weights as an index into a lattice
//! grid of magnitudes ([`super::grids`]) plus sign bits; the grid value is
//! multiplied by a block scale formed in f32 first, in the operation order
//! of ggml's `dequantize_row_*` and gguf-py.

use super::grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS, KVALUES_IQ4NL,
    byte,
};
use super::kquants::QK_K;
use super::{GgmlBlock, GgmlType, f16_le, pod_block};

/// IQ2_XXS: 32 grid entries of 8 weights, `w = d * (0.5 + s) * 0.25 *
/// grid[g] * ±1`. Per 32 weights a little-endian u32 pair: the first holds
/// four 8-bit indices into [`IQ2XXS_GRID`], the second four 7-bit
/// [`KSIGNS`] indices (bits 7k..7k+7) and the 4-bit scale `s` (bits 28..32).
/// 256 weights in 66 bytes: 2.0625 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq2Xxs {
    /// f16 scale.
    pub d: [u8; 2],
    /// Eight (grid indices, signs and scale) u32 pairs.
    pub qs: [u8; 64],
}
const _: () = assert!(size_of::<BlockIq2Xxs>() == 66);

/// IQ2_XS: 32 little-endian u16, each a 9-bit index into [`IQ2XS_GRID`]
/// and a 7-bit [`KSIGNS`] index (bits 9..16); `w = d * (0.5 + s) * 0.25 *
/// grid * ±1` with a 4-bit scale `s` per 16 weights (entry e uses nibble
/// `(e / 2) % 2` of `scales[e / 4]`). 256 weights in 74 bytes: 2.3125 bits
/// per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq2Xs {
    /// f16 scale.
    pub d: [u8; 2],
    /// Grid and sign indices (u16, little-endian).
    pub qs: [u8; 64],
    /// 4-bit scales, two per byte.
    pub scales: [u8; 8],
}
const _: () = assert!(size_of::<BlockIq2Xs>() == 74);

/// IQ2_S: entry e's 10-bit index into [`IQ2S_GRID`] is `qs[e]` plus bits
/// `2(e % 4)..+2` of `qh[e / 4]` on top; its eight sign bits are `signs[e]`
/// (plain, not through [`KSIGNS`]); scales as IQ2_XS. 256 weights in 82
/// bytes: 2.5625 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq2S {
    /// f16 scale.
    pub d: [u8; 2],
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 32],
    /// Sign bits, bit j of byte e for weight j of entry e.
    pub signs: [u8; 32],
    /// Top 2 bits of the grid indices.
    pub qh: [u8; 8],
    /// 4-bit scales, two per byte.
    pub scales: [u8; 8],
}
const _: () = assert!(size_of::<BlockIq2S>() == 82);

/// IQ3_XXS: 64 entries of 4 weights, 8-bit indices into [`IQ3XXS_GRID`];
/// per 32 weights a little-endian u32 with four 7-bit [`KSIGNS`] indices
/// (one per 8 weights) and a 4-bit scale `s` in bits 28..32; `w = d * (0.5
/// + s) * 0.5 * grid * ±1`. 256 weights in 98 bytes: 3.0625 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq3Xxs {
    /// f16 scale.
    pub d: [u8; 2],
    /// Grid indices.
    pub qs: [u8; 64],
    /// Sign indices and scales (u32, little-endian).
    pub scales_and_signs: [u8; 32],
}
const _: () = assert!(size_of::<BlockIq3Xxs>() == 98);

/// IQ3_S: entry e's 9-bit index into [`IQ3S_GRID`] is `qs[e]` plus bit
/// `e % 8` of `qh[e / 8]`; weight i's sign is bit `i % 8` of `signs[i / 8]`;
/// `w = d * (1 + 2s) * grid * ±1` with a 4-bit scale `s` per 32 weights
/// (nibble `g % 2` of `scales[g / 2]`). 256 weights in 110 bytes: 3.4375
/// bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq3S {
    /// f16 scale.
    pub d: [u8; 2],
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 64],
    /// Ninth bits of the grid indices.
    pub qh: [u8; 8],
    /// Sign bits.
    pub signs: [u8; 32],
    /// 4-bit scales, two per byte.
    pub scales: [u8; 4],
}
const _: () = assert!(size_of::<BlockIq3S>() == 110);

/// IQ1_S: entry e (8 weights) has an 11-bit index into [`IQ1S_GRID`]:
/// `qs[e]` plus bits `3(e % 4)..+3` of the little-endian u16 `qh[e / 4]`.
/// That u16 also holds the 3-bit scale `s` (bits 12..15) and the sign of
/// the shift (bit 15): `w = d * (2s + 1) * (grid ± 0.125)`, minus when the
/// bit is set. 256 weights in 50 bytes: 1.5625 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq1S {
    /// f16 scale.
    pub d: [u8; 2],
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 32],
    /// Per 32 weights: index top bits, scale and shift sign (u16).
    pub qh: [u8; 16],
}
const _: () = assert!(size_of::<BlockIq1S>() == 50);

/// IQ1_M: entry e's 11-bit index into [`IQ1S_GRID`] is `qs[e]` plus the
/// low 3 bits of nibble `e % 2` of `qh[e / 2]`, whose bit 3 is the sign of
/// the shift; `w = d * (2s + 1) * (grid ± 0.125)` with a 3-bit scale `s`
/// per 16 weights (bits `3(k % 4)..+3` of u16 `k / 4` of `scales`). The f16
/// `d` is split over the top nibbles of those four u16s (its bits 4i..4i+4
/// in u16 i). 256 weights in 56 bytes: 1.75 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq1M {
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 32],
    /// Index top bits and shift signs, a nibble per entry.
    pub qh: [u8; 16],
    /// 3-bit scales and the f16 `d` (four u16, little-endian).
    pub scales: [u8; 8],
}
const _: () = assert!(size_of::<BlockIq1M>() == 56);

/// IQ4_XS: `w = d * (s - 32) * KVALUES_IQ4NL[q]` with a 6-bit scale `s`
/// per 32 weights (low 4 bits: nibble `g % 2` of `scales_l[g / 2]`; top 2
/// bits: bits 2g..2g+2 of the u16 `scales_h`); codes packed per 32 weights
/// as IQ4_NL's. 256 weights in 136 bytes: 4.25 bits per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIq4Xs {
    /// f16 scale.
    pub d: [u8; 2],
    /// Top 2 bits of the eight scales (u16, little-endian).
    pub scales_h: [u8; 2],
    /// Low 4 bits of the eight scales.
    pub scales_l: [u8; 4],
    /// 4-bit codes: 16 bytes per 32 weights, low nibble weight j, high j + 16.
    pub qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockIq4Xs>() == 136);

pod_block!(
    BlockIq2Xxs,
    BlockIq2Xs,
    BlockIq2S,
    BlockIq3Xxs,
    BlockIq3S,
    BlockIq1S,
    BlockIq1M,
    BlockIq4Xs
);

/// The little-endian u32 at `b[4k..4k + 4]`: one load (indexing the four
/// bytes one by one compiled to four loads and their shifts).
#[inline]
pub(crate) fn u32_at(b: &[u8], k: usize) -> u32 {
    u32::from_le_bytes(b[4 * k..][..4].try_into().expect("4 bytes"))
}

/// The little-endian u16 at `b[2k..2k + 2]`.
#[inline]
pub(crate) fn u16_at(b: &[u8], k: usize) -> u16 {
    u16::from_le_bytes([b[2 * k], b[2 * k + 1]])
}

/// `db * grid[j] * (sign bit j ? -1 : 1)` for the 8 weights of one entry.
#[inline]
fn signed_entry(y: &mut [f32], db: f32, grid: u64, signs: u8) {
    for (j, y) in y.iter_mut().enumerate() {
        let v = db * f32::from(byte(grid, j));
        *y = if (signs >> j) & 1 == 1 { -v } else { v };
    }
}

/// The [`KSIGNS`] byte of entry `l`, its 7-bit index at bit `7l` of `aux`.
#[inline]
pub(crate) fn ksigns_of(aux: u32, l: usize) -> u8 {
    KSIGNS[((aux >> (7 * l)) & 127) as usize]
}

/// The 4-bit IQ2 scale of entry `e` turned into `d * (0.5 + s) * 0.25`.
#[inline]
fn iq2_scale(d: f32, scales: &[u8; 8], e: usize) -> f32 {
    let s = (scales[e / 4] >> (4 * ((e / 2) % 2))) & 0x0F;
    d * (0.5 + f32::from(s)) * 0.25
}

impl GgmlBlock for BlockIq2Xxs {
    const TYPE: GgmlType = GgmlType::IQ2_XXS;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(&self.qs, 2 * g + 1);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let grid = IQ2XXS_GRID[usize::from(self.qs[8 * g + l])];
                let signs = ksigns_of(aux, l);
                signed_entry(y, db, grid, signs);
            }
        }
    }
}

impl GgmlBlock for BlockIq2Xs {
    const TYPE: GgmlType = GgmlType::IQ2_XS;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (e, y) in y.chunks_exact_mut(8).enumerate() {
            let q = u16_at(&self.qs, e);
            let db = iq2_scale(d, &self.scales, e);
            signed_entry(
                y,
                db,
                IQ2XS_GRID[usize::from(q & 511)],
                KSIGNS[usize::from(q >> 9)],
            );
        }
    }
}

impl GgmlBlock for BlockIq2S {
    const TYPE: GgmlType = GgmlType::IQ2_S;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (e, y) in y.chunks_exact_mut(8).enumerate() {
            let high = (self.qh[e / 4] >> (2 * (e % 4))) & 3;
            let index = usize::from(self.qs[e]) | usize::from(high) << 8;
            let db = iq2_scale(d, &self.scales, e);
            signed_entry(y, db, IQ2S_GRID[index], self.signs[e]);
        }
    }
}

impl GgmlBlock for BlockIq3Xxs {
    const TYPE: GgmlType = GgmlType::IQ3_XXS;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(&self.scales_and_signs, g);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let lo = IQ3XXS_GRID[usize::from(self.qs[8 * g + 2 * l])];
                let hi = IQ3XXS_GRID[usize::from(self.qs[8 * g + 2 * l + 1])];
                let grid = u64::from(lo) | u64::from(hi) << 32;
                signed_entry(y, db, grid, ksigns_of(aux, l));
            }
        }
    }
}

impl GgmlBlock for BlockIq3S {
    const TYPE: GgmlType = GgmlType::IQ3_S;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let s = (self.scales[g / 2] >> (4 * (g % 2))) & 0x0F;
            let db = d * f32::from(1 + 2 * s);
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let index = |e: usize| {
                    usize::from(self.qs[e]) | usize::from((self.qh[e / 8] >> (e % 8)) & 1) << 8
                };
                let e = 8 * g + 2 * l;
                let grid =
                    u64::from(IQ3S_GRID[index(e)]) | u64::from(IQ3S_GRID[index(e + 1)]) << 32;
                signed_entry(y, db, grid, self.signs[4 * g + l]);
            }
        }
    }
}

/// The shift IQ1_S/IQ1_M add to every grid value: `+0.125`, or `-0.125`
/// when the sign bit is set.
const IQ1_DELTA: f32 = 0.125;

/// `dl * (grid[j] + delta)` for the 8 weights of one IQ1 grid entry.
#[inline]
fn iq1_entry(y: &mut [f32], dl: f32, index: usize, delta: f32) {
    let grid = IQ1S_GRID[index];
    for (j, y) in y.iter_mut().enumerate() {
        *y = dl * (f32::from(byte(grid, j) as i8) + delta);
    }
}

/// The fields of an IQ1 block (IQ1_S, IQ1_M) by 8-weight entry `e < 32`
/// and 16-weight half `h < 16`, as the decoders and the products read them.
pub(crate) trait Iq1Entries {
    /// The block's f16 scale `d`, as f32.
    fn d_scale(&self) -> f32;
    /// Entry `e`'s 11-bit index into [`IQ1S_GRID`].
    fn grid_index(&self, e: usize) -> usize;
    /// Whether entry `e` shifts down (`-0.125`) rather than up.
    fn shifts_down(&self, e: usize) -> bool;
    /// The odd scale `2s + 1` of the 16 weights of half `h`.
    fn odd_scale(&self, h: usize) -> i32;
}

impl Iq1Entries for BlockIq1S {
    fn d_scale(&self) -> f32 {
        f16_le(self.d)
    }
    #[inline]
    fn grid_index(&self, e: usize) -> usize {
        let qh = u16_at(&self.qh, e / 4);
        usize::from(self.qs[e]) | usize::from((qh >> (3 * (e % 4))) & 7) << 8
    }
    #[inline]
    fn shifts_down(&self, e: usize) -> bool {
        u16_at(&self.qh, e / 4) & 0x8000 != 0
    }
    #[inline]
    fn odd_scale(&self, h: usize) -> i32 {
        2 * i32::from((u16_at(&self.qh, h / 2) >> 12) & 7) + 1
    }
}

impl BlockIq1M {
    /// Entry `e`'s nibble of `qh`: index bits 8..11, then the shift sign.
    #[inline]
    fn nibble(&self, e: usize) -> u8 {
        (self.qh[e / 2] >> (4 * (e % 2))) & 0x0F
    }
}

impl Iq1Entries for BlockIq1M {
    /// `d` lies in the top nibbles of the four scale words.
    fn d_scale(&self) -> f32 {
        let sc = [0, 1, 2, 3].map(|i| u16_at(&self.scales, i));
        let bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
        f16_le(bits.to_le_bytes())
    }
    #[inline]
    fn grid_index(&self, e: usize) -> usize {
        usize::from(self.qs[e]) | usize::from(self.nibble(e) & 7) << 8
    }
    #[inline]
    fn shifts_down(&self, e: usize) -> bool {
        self.nibble(e) & 8 != 0
    }
    #[inline]
    fn odd_scale(&self, h: usize) -> i32 {
        2 * i32::from((u16_at(&self.scales, h / 4) >> (3 * (h % 4))) & 7) + 1
    }
}

/// An IQ1 block's weights: `d · (2s + 1) · (grid ± 0.125)` per entry.
fn dequantize_iq1(b: &impl Iq1Entries, y: &mut [f32]) {
    let d = b.d_scale();
    for (e, y) in y.chunks_exact_mut(8).enumerate() {
        let dl = d * b.odd_scale(e / 2) as f32;
        let delta = if b.shifts_down(e) {
            -IQ1_DELTA
        } else {
            IQ1_DELTA
        };
        iq1_entry(y, dl, b.grid_index(e), delta);
    }
}

impl GgmlBlock for BlockIq1S {
    const TYPE: GgmlType = GgmlType::IQ1_S;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        dequantize_iq1(self, y);
    }
}

impl GgmlBlock for BlockIq1M {
    const TYPE: GgmlType = GgmlType::IQ1_M;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        dequantize_iq1(self, y);
    }
}

impl GgmlBlock for BlockIq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const QK: usize = QK_K;

    fn dequantize_ref(&self, y: &mut [f32]) {
        let d = f16_le(self.d);
        let scales_h = u16::from_le_bytes(self.scales_h);
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let low = (self.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
            let high = ((scales_h >> (2 * g)) & 3) as u8;
            let dl = d * f32::from((low | high << 4) as i8 - 32);
            for (j, &q) in self.qs[16 * g..16 * g + 16].iter().enumerate() {
                y[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0F)]);
                y[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq1_m_reassembles_its_split_scale() {
        // d = 1.0 (f16 0x3c00): nibbles 0x0, 0x0, 0xc, 0x3 in u16s 0..4
        let mut b = BlockIq1M {
            qs: [0; 32],
            qh: [0; 16],
            scales: [0; 8],
        };
        for (i, nib) in [0u16, 0, 0xc, 0x3].into_iter().enumerate() {
            b.scales[2 * i..2 * i + 2].copy_from_slice(&(nib << 12).to_le_bytes());
        }
        let mut y = [0f32; 256];
        b.dequantize_ref(&mut y);
        // grid entry 0 is all -1, scale 1, shift +0.125
        assert!(y.iter().all(|&v| v == -0.875), "{:?}", &y[..8]);
    }

    #[test]
    fn iq2_xxs_signs_have_even_parity() {
        let mut b = BlockIq2Xxs {
            d: [0x00, 0x3c],
            qs: [0; 64],
        };
        b.qs[4..8].copy_from_slice(&1u32.to_le_bytes()); // sign index 1 in entry 0
        let mut y = [0f32; 256];
        b.dequantize_ref(&mut y);
        // index 1 flips weight 0 and (parity) weight 7; grid 0 is all 8s
        let db = 0.5 * 0.25;
        assert_eq!(y[0], -8.0 * db);
        assert_eq!(y[1..7], [8.0 * db; 6]);
        assert_eq!(y[7], -8.0 * db);
    }
}
