//! The scalar `_ref` dot products of ggml weight rows with quantized
//! activation rows: the specification the SIMD versions must meet. Each
//! block's integer sums are formed exactly as ggml forms them (a code times
//! an activation code, summed per sub-block, times the sub-block's integer
//! scale; mins and offsets from the activations' exact block sums), then
//! scaled by the two f32 block scales and added in f32 in block order. The
//! SIMD kernels compute the same integers; only the order of the final f32
//! additions differs.

use super::super::act::BlockQ8K;
use super::super::f16_le;
use super::super::grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS, KVALUES_IQ4NL,
    KVALUES_MXFP4,
};
use super::super::iquants::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockIq4Xs,
    Iq1Entries, ksigns_of, u16_at, u32_at,
};
use super::super::kquants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, scale_k3, scale_min_k4,
};
use super::super::legacy::{
    BlockIq4Nl, BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, e8m0_half,
    q5_codes,
};

/// `Σ w · a` of one 32-byte run of codes against 32 activation codes.
fn dot32(w: impl Iterator<Item = i32>, a: &[i8]) -> i32 {
    w.zip(a).map(|(w, &a)| w * i32::from(a)).sum()
}

/// Q2_K · Q8_K: per 16-weight sub-block `sc · Σ q·a`, less `m · bsum`.
pub fn vec_dot_q2_k_q8k_ref(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for j in 0..16 {
            let (h, s) = (j / 8, (j / 2) % 4);
            let off = 16 * (j % 2);
            let q = (0..16).map(|l| i32::from((w.qs[32 * h + off + l] >> (2 * s)) & 3));
            isum += i32::from(w.scales[j] & 0x0F) * dot32(q, &a.qs[16 * j..16 * j + 16]);
            mins += i32::from(w.scales[j] >> 4) * i32::from(a.bsums[j]);
        }
        let (d, dmin) = (a.d * f16_le(w.d), a.d * f16_le(w.dmin));
        sum += d * isum as f32 - dmin * mins as f32;
    }
    sum
}

/// Q3_K · Q8_K: per 16-weight sub-block `(sc - 32) · Σ (low - 4·!high)·a`.
pub fn vec_dot_q3_k_q8k_ref(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let mut isum = 0i32;
        for j in 0..16 {
            let (h, s) = (j / 8, (j / 2) % 4);
            let off = 16 * (j % 2);
            let q = (0..16).map(|l| {
                let low = i32::from((w.qs[32 * h + off + l] >> (2 * s)) & 3);
                let high = (w.hmask[off + l] >> (4 * h + s)) & 1;
                low - if high == 1 { 0 } else { 4 }
            });
            isum += i32::from(scale_k3(j, &w.scales)) * dot32(q, &a.qs[16 * j..16 * j + 16]);
        }
        sum += a.d * f16_le(w.d) * isum as f32;
    }
    sum
}

/// Q4_K · Q8_K: per 32-weight sub-block `sc · Σ q·a`, less `m · bsums`.
pub fn vec_dot_q4_k_q8k_ref(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &w.scales);
            let q = w.qs[32 * (j / 2)..][..32]
                .iter()
                .map(|&q| i32::from((q >> (4 * (j % 2))) & 0x0F));
            isum += i32::from(sc) * dot32(q, &a.qs[32 * j..32 * j + 32]);
            mins += i32::from(m) * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]));
        }
        let (d, dmin) = (a.d * f16_le(w.d), a.d * f16_le(w.dmin));
        sum += d * isum as f32 - dmin * mins as f32;
    }
    sum
}

/// Q5_K · Q8_K: as Q4_K with the fifth bit from `qh`.
pub fn vec_dot_q5_k_q8k_ref(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &w.scales);
            let q = w.qs[32 * (j / 2)..][..32]
                .iter()
                .zip(&w.qh)
                .map(|(&q, &h)| {
                    i32::from((q >> (4 * (j % 2))) & 0x0F) | i32::from((h >> j) & 1) << 4
                });
            isum += i32::from(sc) * dot32(q, &a.qs[32 * j..32 * j + 32]);
            mins += i32::from(m) * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]));
        }
        let (d, dmin) = (a.d * f16_le(w.d), a.d * f16_le(w.dmin));
        sum += d * isum as f32 - dmin * mins as f32;
    }
    sum
}

/// Q6_K · Q8_K: per 16-weight sub-block `sc · Σ (q - 32)·a`.
pub fn vec_dot_q6_k_q8k_ref(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let mut isum = 0i32;
        for j in 0..16 {
            let (h, s) = (j / 8, (j / 2) % 4);
            let off = 16 * (j % 2);
            let q = (0..16).map(|l| {
                let low = (w.ql[64 * h + off + l + 32 * (s & 1)] >> (4 * (s / 2))) & 0x0F;
                let high = (w.qh[32 * h + off + l] >> (2 * s)) & 3;
                i32::from(low | high << 4) - 32
            });
            isum += i32::from(w.scales[j] as i8) * dot32(q, &a.qs[16 * j..16 * j + 16]);
        }
        sum += a.d * f16_le(w.d) * isum as f32;
    }
    sum
}

/// IQ4_XS · Q8_K: per 32-weight sub-block `(ls - 32) · Σ kv[q]·a`.
pub fn vec_dot_iq4_xs_q8k_ref(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let scales_h = u16::from_le_bytes(w.scales_h);
        let mut isum = 0i32;
        for j in 0..8 {
            let low = (w.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
            let ls = i32::from(low) | i32::from((scales_h >> (2 * j)) & 3) << 4;
            isum += (ls - 32)
                * dot32(
                    nibble_codes(&w.qs[16 * j..16 * j + 16]),
                    &a.qs[32 * j..32 * j + 32],
                );
        }
        sum += a.d * f16_le(w.d) * isum as f32;
    }
    sum
}

/// A lattice i-quant block (IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S) as integers:
/// weight i is `d · FACTOR · scales[i / 16] · values[i]`, each value a
/// grid magnitude with its sign (at most `MAX` in magnitude) and each
/// scale the odd integer `2s + 1` of a 4-bit `s` (the decoders' `0.5 + s`
/// doubled, the half kept in `FACTOR`). What the `_ref` dot products and
/// the batched unpacker (`tile::unpack_row`) read these blocks as.
pub trait LatticeInts: super::super::GgmlBlock {
    /// The constant of the decoders' scale beyond `d · (2s + 1)`.
    const FACTOR: f32;
    /// The largest grid magnitude.
    const MAX: u8;

    /// The block's f16 scale `d`, its first two bytes in every lattice
    /// type.
    fn d(&self) -> f32 {
        let b = bytemuck::bytes_of(self);
        f16_le([b[0], b[1]])
    }

    /// The 256 signed values.
    fn values(&self) -> [i8; 256];

    /// The odd scale of each 16 weights.
    fn scales16(&self) -> [i32; 16];
}

/// Each 8-weight entry (8 magnitudes, a byte each, and its sign byte:
/// bit `i` set, weight `i` negative) written out as signed values.
fn signed_values(entries: impl Iterator<Item = (u64, u8)>) -> [i8; 256] {
    let mut v = [0i8; 256];
    for (e, (grid, signs)) in entries.enumerate() {
        for (i, v) in v[8 * e..8 * e + 8].iter_mut().enumerate() {
            let m = (grid >> (8 * i)) as u8 as i8;
            *v = if (signs >> i) & 1 == 1 { -m } else { m };
        }
    }
    v
}

/// Per-32 odd scales (`odd[g]` for weights 32g..32g + 32) per 16.
fn halves(odd: impl Fn(usize) -> i32) -> [i32; 16] {
    std::array::from_fn(|h| odd(h / 2))
}

/// IQ2_XXS: per 32-weight group, four grid indices in the group's first
/// u32, four [`KSIGNS`] indices and `s` in its second; `FACTOR` 0.125
/// (the decoder's `d · (0.5 + s) · 0.25`).
impl LatticeInts for BlockIq2Xxs {
    const FACTOR: f32 = 0.125;
    const MAX: u8 = 0x2b;

    fn values(&self) -> [i8; 256] {
        signed_values((0..32).map(|e| {
            let (g, l) = (e / 4, e % 4);
            let aux = u32_at(&self.qs, 2 * g + 1);
            (
                IQ2XXS_GRID[usize::from(self.qs[8 * g + l])],
                ksigns_of(aux, l),
            )
        }))
    }

    fn scales16(&self) -> [i32; 16] {
        halves(|g| half_odd_scale(u32_at(&self.qs, 2 * g + 1)))
    }
}

/// IQ2_XS: each entry's u16 a 9-bit grid index and a 7-bit [`KSIGNS`]
/// index; the nibbles of `scales` per 16 weights.
impl LatticeInts for BlockIq2Xs {
    const FACTOR: f32 = 0.125;
    const MAX: u8 = 0x2b;

    fn values(&self) -> [i8; 256] {
        signed_values((0..32).map(|e| {
            let q = u16_at(&self.qs, e);
            (
                IQ2XS_GRID[usize::from(q & 511)],
                KSIGNS[usize::from(q >> 9)],
            )
        }))
    }

    fn scales16(&self) -> [i32; 16] {
        std::array::from_fn(|h| odd_scale(u32::from(self.scales[h / 2] >> (4 * (h % 2)))))
    }
}

/// IQ2_S: each grid index 8 bits of `qs` and two more from `qh`, the
/// signs plain bits; the nibbles of `scales` per 16 weights; `FACTOR` 0.125
/// (the decoder's `d · (0.5 + s) · 0.25`).
impl LatticeInts for BlockIq2S {
    const FACTOR: f32 = 0.125;
    const MAX: u8 = 0x2b;

    fn values(&self) -> [i8; 256] {
        signed_values((0..32).map(|e| {
            let top = usize::from(self.qh[e / 4]) << (8 - 2 * (e % 4)) & 0x300;
            (IQ2S_GRID[usize::from(self.qs[e]) | top], self.signs[e])
        }))
    }

    fn scales16(&self) -> [i32; 16] {
        std::array::from_fn(|h| odd_scale(u32::from(self.scales[h / 2] >> (4 * (h % 2)))))
    }
}

/// IQ1_S and IQ1_M as lattice types: each weight `8·grid + δ` (in
/// -9..=9) under the 16 weights' odd scale and `FACTOR` 0.125, the
/// decoders' `d · (2s + 1) · (grid ± 0.125)` exactly; the same integer sums
/// as ggml's `Σ grid·a + 0.125·Σ δ·a` per scale.
macro_rules! iq1_lattice {
    ($($block:ty)*) => {$(
        impl LatticeInts for $block {
            const FACTOR: f32 = 0.125;
            const MAX: u8 = 9;

            fn d(&self) -> f32 {
                self.d_scale()
            }

            fn values(&self) -> [i8; 256] {
                std::array::from_fn(|j| {
                    let e = j / 8;
                    let delta = if self.shifts_down(e) { -1 } else { 1 };
                    8 * (IQ1S_GRID[self.grid_index(e)].to_le_bytes()[j % 8] as i8) + delta
                })
            }

            fn scales16(&self) -> [i32; 16] {
                std::array::from_fn(|h| self.odd_scale(h))
            }
        }
    )*};
}
iq1_lattice!(BlockIq1S BlockIq1M);

/// IQ1_S · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq1_s_q8k_ref(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ1_M · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq1_m_q8k_ref(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ2_S · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq2_s_q8k_ref(w: &[BlockIq2S], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ3_XXS: two 4-value grid entries per 8 weights; per 32-weight group
/// a u32 of four [`KSIGNS`] indices and `s`; `FACTOR` 0.25 (the decoder's
/// `d · (0.5 + s) · 0.5`).
impl LatticeInts for BlockIq3Xxs {
    const FACTOR: f32 = 0.25;
    const MAX: u8 = 62;

    fn values(&self) -> [i8; 256] {
        signed_values((0..32).map(|e| {
            let (g, l) = (e / 4, e % 4);
            let qs = &self.qs[2 * e..];
            let grid = u64::from(IQ3XXS_GRID[usize::from(qs[0])])
                | u64::from(IQ3XXS_GRID[usize::from(qs[1])]) << 32;
            (grid, ksigns_of(u32_at(&self.scales_and_signs, g), l))
        }))
    }

    fn scales16(&self) -> [i32; 16] {
        halves(|g| half_odd_scale(u32_at(&self.scales_and_signs, g)))
    }
}

/// IQ3_S: each grid index 8 bits of `qs` and a ninth from `qh`, the signs
/// plain bits; a nibble of `scales` per 32 weights; `FACTOR` 1 (the
/// decoder's `d · (1 + 2s)`).
impl LatticeInts for BlockIq3S {
    const FACTOR: f32 = 1.0;
    const MAX: u8 = 15;

    fn values(&self) -> [i8; 256] {
        let index =
            |e: usize| usize::from(self.qs[e]) | usize::from((self.qh[e / 8] >> (e % 8)) & 1) << 8;
        signed_values((0..32).map(|e| {
            let grid =
                u64::from(IQ3S_GRID[index(2 * e)]) | u64::from(IQ3S_GRID[index(2 * e + 1)]) << 32;
            (grid, self.signs[e])
        }))
    }

    fn scales16(&self) -> [i32; 16] {
        halves(|g| odd_scale(u32::from(self.scales[g / 2] >> (4 * (g % 2)))))
    }
}

/// A lattice type · Q8_K: per 16 weights `(2s + 1) · Σ value·a`; the
/// block's sum times `d`, the row's times `FACTOR`.
fn vec_dot_lattice_ref<B: LatticeInts>(w: &[B], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let (v, sc) = (w.values(), w.scales16());
        let isum: i32 = (0..16)
            .map(|h| {
                sc[h]
                    * dot32(
                        v[16 * h..16 * h + 16].iter().map(|&v| i32::from(v)),
                        &a.qs[16 * h..16 * h + 16],
                    )
            })
            .sum();
        sum += a.d * w.d() * isum as f32;
    }
    B::FACTOR * sum
}

/// IQ2_XXS · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq2_xxs_q8k_ref(w: &[BlockIq2Xxs], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ2_XS · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq2_xs_q8k_ref(w: &[BlockIq2Xs], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ3_XXS · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq3_xxs_q8k_ref(w: &[BlockIq3Xxs], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// IQ3_S · Q8_K ([`LatticeInts`]).
pub fn vec_dot_iq3_s_q8k_ref(w: &[BlockIq3S], a: &[BlockQ8K]) -> f32 {
    vec_dot_lattice_ref(w, a)
}

/// The odd integer `2s + 1` of the 4-bit scale `s` in bits 28..32.
fn half_odd_scale(aux: u32) -> i32 {
    odd_scale(aux >> 28)
}

/// `2s + 1` of a 4-bit scale `s` (the decoders' `0.5 + s`, doubled).
fn odd_scale(s: u32) -> i32 {
    2 * (s & 0x0F) as i32 + 1
}

/// The IQ4 grid values of 16 nibble-packed bytes, weights 0..16 from the
/// low nibbles then 16..32 from the high ones.
fn nibble_codes(qs: &[u8]) -> impl Iterator<Item = i32> + '_ {
    table_codes(qs, &KVALUES_IQ4NL)
}

/// 16 nibble-packed bytes through a 16-entry table, weights 0..16 from the
/// low nibbles then 16..32 from the high ones.
fn table_codes<'a>(qs: &'a [u8], table: &'a [i8; 16]) -> impl Iterator<Item = i32> + 'a {
    let lo = qs.iter().map(|&q| q & 0x0F);
    let hi = qs.iter().map(|&q| q >> 4);
    lo.chain(hi).map(|c| i32::from(table[usize::from(c)]))
}

/// Q8_0 · Q8_0: per block `Σ q·a` times both f16 scales.
pub fn vec_dot_q8_0_q8_0_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let isum = dot32(w.qs.iter().map(|&q| i32::from(q as i8)), bytes_i8(&a.qs));
        sum += f16_le(w.d) * f16_le(a.d) * isum as f32;
    }
    sum
}

/// Q4_0 · Q8_0: per block `Σ (q - 8)·a` times both f16 scales.
pub fn vec_dot_q4_0_q8_0_ref(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let lo = w.qs.iter().map(|&q| i32::from(q & 0x0F) - 8);
        let hi = w.qs.iter().map(|&q| i32::from(q >> 4) - 8);
        let isum = dot32(lo.chain(hi), bytes_i8(&a.qs));
        sum += f16_le(w.d) * f16_le(a.d) * isum as f32;
    }
    sum
}

/// Q5_0 · Q8_0: per block `Σ (q - 16)·a` times both f16 scales.
pub fn vec_dot_q5_0_q8_0_ref(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let q = five_bit_codes(w.qh, &w.qs).map(|q| q - 16);
        let isum = dot32(q.into_iter(), bytes_i8(&a.qs));
        sum += f16_le(w.d) * f16_le(a.d) * isum as f32;
    }
    sum
}

/// Q4_1 · Q8_0: per block `d·Σ q·a + m·Σ a`, each term times the
/// activations' f16 scale (llama.cpp pairs Q4_1 with Q8_1, whose blocks
/// carry `d_a·Σ a` rounded to f16; here `Σ a` is the exact integer).
pub fn vec_dot_q4_1_q8_0_ref(w: &[BlockQ4_1], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let lo = w.qs.iter().map(|&q| i32::from(q & 0x0F));
        let hi = w.qs.iter().map(|&q| i32::from(q >> 4));
        let isum = dot32(lo.chain(hi), bytes_i8(&a.qs));
        sum += with_min(f16_le(w.d), f16_le(w.m), f16_le(a.d), isum, &a.qs);
    }
    sum
}

/// Q5_1 · Q8_0: as [`vec_dot_q4_1_q8_0_ref`] with 5-bit codes.
pub fn vec_dot_q5_1_q8_0_ref(w: &[BlockQ5_1], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let isum = dot32(five_bit_codes(w.qh, &w.qs).into_iter(), bytes_i8(&a.qs));
        sum += with_min(f16_le(w.d), f16_le(w.m), f16_le(a.d), isum, &a.qs);
    }
    sum
}

/// The 32 codes of a Q5 block, weights 0..32.
fn five_bit_codes(qh: [u8; 4], qs: &[u8; 16]) -> [i32; 32] {
    let mut q = [0i32; 32];
    for j in 0..16 {
        let (lo, hi) = q5_codes(qh, qs, j);
        (q[j], q[j + 16]) = (i32::from(lo), i32::from(hi));
    }
    q
}

/// One block of a type with a min (`w = d·q + m`): `(d·d_a)·Σ q·a +
/// (m·d_a)·Σ a`, the two products as the SIMD kernels form them.
fn with_min(d: f32, m: f32, da: f32, isum: i32, a: &[u8; 32]) -> f32 {
    let asum: i32 = bytes_i8(a).iter().map(|&a| i32::from(a)).sum();
    (d * da) * isum as f32 + (m * da) * asum as f32
}

/// IQ4_NL · Q8_0: per block `Σ kv[q]·a` times both f16 scales.
pub fn vec_dot_iq4_nl_q8_0_ref(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let isum = dot32(nibble_codes(&w.qs), bytes_i8(&a.qs));
        sum += f16_le(w.d) * f16_le(a.d) * isum as f32;
    }
    sum
}

/// MXFP4 · Q8_0: per block `Σ kv[q]·a` over ggml's doubled E2M1 values
/// ([`KVALUES_MXFP4`]), times the halved E8M0 scale ([`e8m0_half`]) and
/// the activations' f16 scale, as ggml's `ggml_vec_dot_mxfp4_q8_0`.
pub fn vec_dot_mxfp4_q8_0_ref(w: &[BlockMxfp4], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let isum = dot32(table_codes(&w.qs, &KVALUES_MXFP4), bytes_i8(&a.qs));
        sum += e8m0_half(w.e[0]) * f16_le(a.d) * isum as f32;
    }
    sum
}

/// Q8_0 codes (stored as bytes) as i8.
fn bytes_i8(b: &[u8; 32]) -> &[i8] {
    bytemuck::cast_slice(b)
}
