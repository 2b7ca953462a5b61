//! Batched products of Q8_0 weight rows (a GGUF's Q8_0 tensors and waste's
//! q8 backbone, whose block is Q8_0's; and a GGUF's Q4_0 and IQ4_NL ones,
//! decoded to signed bytes the same way) with many Q8_0 activation rows: the
//! k-quant tile's scheme ([`super`]) on blocks of 32 with a scale per block
//! on both sides, as llama.cpp pairs Q8_0 with Q8_0. Per weight row, block
//! b and token t: `(d_w · d_a,t) · Σ q·a`, the integer sum exact.
//!
//! The AVX-512 kernel takes the signed codes as `vpdpbusd`'s signed operand
//! against `a + 128`, as the k-quant tile does. AVX2's `vpmaddubsw` would
//! saturate on that pairing with 8-bit weights (255 · 127 · 2 > 2¹⁵), so
//! its kernel takes the row kernels' sign trick instead, `|w|` against
//! `a · sign(w)` (2 · 127 · 128 < 2¹⁵), one `vpsignb` more per product;
//! weights within ±64 (`q3`) keep `a + 128` ([`gemm_tile_q8_0_avx2_narrow`]).

use super::super::super::act::{GgmlActs, Pairing};
use super::super::super::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};
use super::super::super::iquants::BlockIq4Xs;
use super::super::super::kquants::QK_K;
use super::super::super::legacy::{
    BlockIq4Nl, BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK, e8m0_half,
    q5_codes,
};
use super::super::super::{GgmlBlock, GgmlType, f16_le};
use super::{ROWS, TOKENS};
#[cfg(target_arch = "x86_64")]
use crate::ggml::dot::avx2::{Avx2Mac, AvxVnniMac, Mac, RowBlockQ8_0};

/// One Q8_0 block of one weight row, decoded once per product.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct UnpackedQ8_0 {
    /// The signed codes, as bytes.
    pub q: [u8; QK],
    /// `-128 · Σ q`: what `Σ q · (a + 128)` exceeds `Σ q · a` by, negated.
    pub init: i32,
    /// The block's scale.
    pub d: f32,
}
const _: () = assert!(size_of::<UnpackedQ8_0>() == 40);

/// One Q8_0 block of [`TOKENS`] activation rows: 576 bytes.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct ActTileQ8_0 {
    /// `a + 128` (unsigned), the four codes `4g..4g + 4` of token t at
    /// `64g + 4t`.
    pub a: [u8; QK * TOKENS],
    /// Each token's block scale; 0 past the last token.
    pub d: [f32; TOKENS],
}
const _: () = assert!(size_of::<ActTileQ8_0>() == 576);

impl Default for ActTileQ8_0 {
    fn default() -> Self {
        Self {
            a: [0; QK * TOKENS],
            d: [0.0; TOKENS],
        }
    }
}

/// [`ROWS`] weight rows (`w[r · nb + b]`, block b of row r) times one tile
/// of tokens (`acts[b]`); `out[16r + t]` is row r's product with token t,
/// for the first `tokens` of the tile (as [`super::GemmTile`]).
///
/// # Safety
/// The ISA the function was compiled for must be available;
/// `w.len() == ROWS · acts.len()`.
pub type GemmTileQ8_0 = unsafe fn(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
);

/// A Q8_0 row (whole blocks) decoded for the micro-kernel.
pub fn unpack_row(row: &[u8], out: &mut [UnpackedQ8_0]) {
    for_blocks(row, out, |b: &BlockQ8_0| (b.d, b.qs));
}

/// Whether [`unpack_row_of`] decodes `ty`: the types whose every 32
/// weights are 8-bit values under one scale: Q8_0, Q4_0, IQ4_NL and Q5_0
/// (paired with Q8_0 activations), IQ4_XS (paired with Q8_K ones, whose
/// 32-code runs share their block's scale: [`pack_acts`] tiles them the
/// same way), and Q4_1 and Q5_1, whose mins the micro-kernel leaves to
/// [`add_mins`] ([`has_min`]).
pub fn unpacks(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::Q5_0
            | GgmlType::Q4_1
            | GgmlType::Q5_1
            | GgmlType::MXFP4
    )
}

/// Whether `ty`'s blocks carry an f16 min after their f16 scale (`w = d·q
/// + m`: Q4_1, Q5_1): [`unpack_row_of`] gives the codes `q` under `d`, and
/// the products' `Σ_b m_b · d_a,b · Σ a_b` comes from [`add_mins`].
pub fn has_min(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1)
}

/// Each activation tile's `d_a · Σ a` per block and token, as
/// [`add_mins`] takes them: `sums[(tile · nb + b) · TOKENS + lane]` for the
/// tiles of [`pack_acts`] (Q8_0 activations), 0 past the last token.
pub fn act_sums(acts: &GgmlActs, sums: &mut Vec<f32>) {
    let nb = acts.cols / QK;
    sums.clear();
    sums.resize(acts.n.div_ceil(TOKENS) * nb * TOKENS, 0.0);
    for t in 0..acts.n {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        for (b, a) in acts.q8_0_row(t).iter().enumerate() {
            let sum: i32 = a.qs.iter().map(|&q| i32::from(q as i8)).sum();
            sums[(tile * nb + b) * TOKENS + lane] = f16_le(a.d) * sum as f32;
        }
    }
}

/// The f16 min (bytes 2..4) of each `block`-byte block of `row`, as f32.
pub fn row_mins(row: &[u8], block: usize, out: &mut [f32]) {
    for (m, b) in out.iter_mut().zip(row.chunks_exact(block)) {
        *m = f16_le([b[2], b[3]]);
    }
}

/// `v[TOKENS·k + i] += Σ_b mins[k·nb + b] · sums[b·TOKENS + i]` for the
/// first `live` rows: the mins' part of a tile's products (`sums` one
/// tile's [`act_sums`], `nb` blocks; `mins` each row's [`row_mins`]).
/// Rows × tokens × blocks multiply-adds, a 32nd of the tile's.
#[inline(always)]
pub fn add_mins(mins: &[f32], sums: &[f32], nb: usize, live: usize, v: &mut [f32; ROWS * TOKENS]) {
    for (k, v) in v.chunks_exact_mut(TOKENS).take(live).enumerate() {
        let mut acc = [0f32; TOKENS];
        for (&m, s) in mins[k * nb..][..nb].iter().zip(sums.chunks_exact(TOKENS)) {
            for (a, &s) in acc.iter_mut().zip(s) {
                *a += m * s;
            }
        }
        for (v, a) in v.iter_mut().zip(acc) {
            *v += a;
        }
    }
}

/// A row of `ty` (one [`unpacks`] takes) decoded for the micro-kernel, one
/// entry per 32 weights: Q8_0's codes; Q4_0's nibbles less 8; IQ4_NL's and
/// IQ4_XS's nibbles through [`KVALUES_IQ4NL`], IQ4_XS's scale `d · (ls -
/// 32)` per 32 (exact in f32: an f16 times a 6-bit integer); Q5_0's 5-bit
/// codes less 16; Q4_1's and Q5_1's codes as they are, their mins left out
/// ([`has_min`]); MXFP4's through [`KVALUES_MXFP4`] under its halved
/// exponent ([`e8m0_half`]). Panics on another type.
pub fn unpack_row_of(ty: GgmlType, row: &[u8], out: &mut [UnpackedQ8_0]) {
    /// Low nibbles weights 0..16, high ones 16..32, each as `value` maps it.
    fn nibbles(qs: &[u8; 16], value: impl Fn(u8) -> i8) -> [u8; QK] {
        std::array::from_fn(|j| value((qs[j % 16] >> (4 * (j / 16))) & 0x0F) as u8)
    }
    match ty {
        GgmlType::Q8_0 => unpack_row(row, out),
        GgmlType::Q4_0 => for_blocks(row, out, |b: &BlockQ4_0| {
            (b.d, nibbles(&b.qs, |n| n as i8 - 8))
        }),
        GgmlType::IQ4_NL => for_blocks(row, out, |b: &BlockIq4Nl| {
            (b.d, nibbles(&b.qs, |n| KVALUES_IQ4NL[usize::from(n)]))
        }),
        GgmlType::IQ4_XS => iq4_xs_runs(row, out, iq4_xs_scales, |u, d, qs| {
            set(u, d, nibbles(qs, |n| KVALUES_IQ4NL[usize::from(n)]));
        }),
        GgmlType::Q5_0 => for_blocks(row, out, |b: &BlockQ5_0| (b.d, five_bits(b.qh, &b.qs, -16))),
        GgmlType::Q4_1 => for_blocks(row, out, |b: &BlockQ4_1| (b.d, nibbles(&b.qs, |n| n as i8))),
        GgmlType::Q5_1 => for_blocks(row, out, |b: &BlockQ5_1| (b.d, five_bits(b.qh, &b.qs, 0))),
        GgmlType::MXFP4 => {
            let blocks: &[BlockMxfp4] = super::super::super::blocks(row).expect("whole blocks");
            assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
            for (b, u) in blocks.iter().zip(out) {
                let codes = nibbles(&b.qs, |n| KVALUES_MXFP4[usize::from(n)]);
                set(u, e8m0_half(b.e[0]), codes);
            }
        }
        _ => panic!("{ty} has no Q8_0-paired batched kernel"),
    }
}

/// [`unpack_row_of`] as a table's unpacker.
///
/// # Safety
/// The ISA the function was compiled for must be available.
pub type UnpackQ8_0 = unsafe fn(ty: GgmlType, row: &[u8], out: &mut [UnpackedQ8_0]);

/// [`unpack_row_of`] as an [`UnpackQ8_0`] (the `ref` table's).
///
/// # Safety
/// None (safe code; `unsafe` to fit the table).
pub unsafe fn unpack_row_of_ref(ty: GgmlType, row: &[u8], out: &mut [UnpackedQ8_0]) {
    unpack_row_of(ty, row, out);
}

/// [`unpack_row_of`] with AVX2: the nibble types' (Q4_0, IQ4_NL, IQ4_XS)
/// each 16 bytes to 32 codes by one `vpshufb` of a 16-entry table, Q8_0's
/// codes as they are, Q5_0's, Q4_1's and Q5_1's as their row kernels form
/// them, their sums by `vpsadbw`; bit for bit the scalar unpacker's.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub unsafe fn unpack_row_of_avx2(ty: GgmlType, row: &[u8], out: &mut [UnpackedQ8_0]) {
    use std::arch::x86_64::*;
    /// 32 codes `q` and their scale `d` into `u`, with their `init`.
    #[target_feature(enable = "avx2")]
    fn put(u: &mut UnpackedQ8_0, d: f32, q: __m256i) {
        // SAFETY: 32 bytes written inside `u.q`.
        unsafe { _mm256_storeu_si256(u.q.as_mut_ptr().cast(), q) };
        // Σ (q + 128) per 8 bytes by `vpsadbw`, then the four summed.
        let s = _mm256_sad_epu8(
            _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN)),
            _mm256_setzero_si256(),
        );
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        let s = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s)));
        u.init = -128 * (s - 128 * QK as i32);
        u.d = d;
    }
    /// The codes of a type whose row kernels take them unsigned (Q5_0
    /// less its offset; Q4_1 and Q5_1 as they are, their mins apart).
    #[target_feature(enable = "avx2")]
    fn unsigned_codes<B: RowBlockQ8_0 + GgmlBlock>(row: &[u8], out: &mut [UnpackedQ8_0]) {
        let blocks: &[B] = super::super::super::blocks(row).expect("whole blocks");
        assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
        for (b, u) in blocks.iter().zip(out) {
            // SAFETY: this function's AVX2 (the codes need no table); the
            // scale's two bytes lie inside the block.
            let (q, d) = unsafe {
                let q =
                    _mm256_sub_epi8(b.codes(_mm256_setzero_si256()), _mm256_set1_epi8(B::OFFSET));
                (q, std::ptr::read_unaligned(b.d().cast::<[u8; 2]>()))
            };
            put(u, f16_le(d), q);
        }
    }
    /// 32 codes from 16 nibble-packed bytes (low nibbles weights 0..16)
    /// through `table` (16 i8 values in both 128-bit lanes).
    #[target_feature(enable = "avx2")]
    fn nibbles(qs: &[u8; 16], table: __m256i) -> __m256i {
        // SAFETY: 16 bytes read inside `qs`.
        let b = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
        let m4 = _mm_set1_epi8(0x0F);
        let n = _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(b, 4), m4),
            _mm_and_si128(b, m4),
        );
        _mm256_shuffle_epi8(table, n)
    }
    // SAFETY: this function's AVX2.
    let table =
        |t: [i8; 16]| unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) };
    const Q4_0: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];
    match ty {
        GgmlType::Q4_0 | GgmlType::IQ4_NL => {
            let t = table(if ty == GgmlType::Q4_0 {
                Q4_0
            } else {
                KVALUES_IQ4NL
            });
            // Q4_0 and IQ4_NL share their layout
            let blocks: &[BlockQ4_0] = super::super::super::blocks(row).expect("whole blocks");
            assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
            for (b, u) in blocks.iter().zip(out) {
                put(u, f16_le(b.d), nibbles(&b.qs, t));
            }
        }
        GgmlType::MXFP4 => {
            let t = table(KVALUES_MXFP4);
            let blocks: &[BlockMxfp4] = super::super::super::blocks(row).expect("whole blocks");
            assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
            for (b, u) in blocks.iter().zip(out) {
                put(u, e8m0_half(b.e[0]), nibbles(&b.qs, t));
            }
        }
        GgmlType::Q5_0 => unsigned_codes::<BlockQ5_0>(row, out),
        GgmlType::Q4_1 => unsigned_codes::<BlockQ4_1>(row, out),
        GgmlType::Q5_1 => unsigned_codes::<BlockQ5_1>(row, out),
        GgmlType::IQ4_XS => {
            let t = table(KVALUES_IQ4NL);
            let scales = |b: &BlockIq4Xs| {
                // bits 4j..4j + 4 of the low nibbles' four bytes and 2j..2j
                // + 2 of the high bits' two, as `iq4_xs_scales` takes them
                let low = _mm256_srlv_epi32(
                    _mm256_set1_epi32(i32::from_le_bytes(b.scales_l)),
                    _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
                );
                let high = _mm256_srlv_epi32(
                    _mm256_set1_epi32(i32::from(u16::from_le_bytes(b.scales_h))),
                    _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
                );
                let ls = _mm256_or_si256(
                    _mm256_and_si256(low, _mm256_set1_epi32(0x0F)),
                    _mm256_slli_epi32::<4>(_mm256_and_si256(high, _mm256_set1_epi32(3))),
                );
                let ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
                let v = _mm256_mul_ps(_mm256_set1_ps(f16_le(b.d)), _mm256_cvtepi32_ps(ls));
                let mut out = [0f32; 8];
                // SAFETY: 8 f32 written inside `out`.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
                out
            };
            iq4_xs_runs(row, out, scales, |u, d, qs| put(u, d, nibbles(qs, t)));
        }
        GgmlType::Q8_0 => {
            let blocks: &[BlockQ8_0] = super::super::super::blocks(row).expect("whole blocks");
            assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
            for (b, u) in blocks.iter().zip(out) {
                // SAFETY: 32 bytes read inside `b.qs`.
                put(u, f16_le(b.d), unsafe {
                    _mm256_loadu_si256(b.qs.as_ptr().cast())
                });
            }
        }
        _ => unpack_row_of(ty, row, out),
    }
}

/// `f(u, scale, nibbles)` for each 32 weights of an IQ4_XS row and its
/// unpacked entry (eight a block), the scales by `scales` (what
/// [`iq4_xs_scales`] gives).
#[inline(always)]
fn iq4_xs_runs(
    row: &[u8],
    out: &mut [UnpackedQ8_0],
    scales: impl Fn(&BlockIq4Xs) -> [f32; 8],
    mut f: impl FnMut(&mut UnpackedQ8_0, f32, &[u8; 16]),
) {
    let blocks: &[BlockIq4Xs] = super::super::super::blocks(row).expect("whole blocks");
    assert_eq!(
        8 * blocks.len(),
        out.len(),
        "row and unpacked blocks disagree"
    );
    for (b, u) in blocks.iter().zip(out.chunks_exact_mut(8)) {
        for (j, (u, d)) in u.iter_mut().zip(scales(b)).enumerate() {
            f(
                u,
                d,
                b.qs[16 * j..16 * j + 16].try_into().expect("16 bytes"),
            );
        }
    }
}

/// IQ4_XS's eight per-32 scales `d · (ls - 32)`.
fn iq4_xs_scales(b: &BlockIq4Xs) -> [f32; 8] {
    let d = f16_le(b.d);
    let high = u16::from_le_bytes(b.scales_h);
    std::array::from_fn(|j| {
        let low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
        let ls = i32::from(low) | i32::from((high >> (2 * j)) & 3) << 4;
        d * (ls - 32) as f32
    })
}

/// A Q5 block's 32 codes plus `add`, as bytes.
fn five_bits(qh: [u8; 4], qs: &[u8; 16], add: i8) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..16 {
        let (lo, hi) = q5_codes(qh, qs, j);
        q[j] = (lo as i8 + add) as u8;
        q[j + 16] = (hi as i8 + add) as u8;
    }
    q
}

/// Each block of `row` as its f16 scale and 32 signed codes (`codes`),
/// with their `init`.
fn for_blocks<B: GgmlBlock>(
    row: &[u8],
    out: &mut [UnpackedQ8_0],
    codes: impl Fn(&B) -> ([u8; 2], [u8; QK]),
) {
    let blocks: &[B] = super::super::super::blocks(row).expect("whole blocks");
    assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
    for (b, u) in blocks.iter().zip(out) {
        let (d, q) = codes(b);
        set(u, f16_le(d), q);
    }
}

/// One unpacked block: codes `q`, their `init`, scale `d`.
fn set(u: &mut UnpackedQ8_0, d: f32, q: [u8; QK]) {
    u.q = q;
    u.init = -128 * q.iter().map(|&q| i32::from(q as i8)).sum::<i32>();
    u.d = d;
}

/// Packs activation rows into tiles, `tiles[tile · nb + b]` for the 32
/// codes b of tokens `16·tile..`; tokens past the last are zero. Q8_0
/// rows, or Q8_K rows (each 32 codes under their block's scale) where
/// `pairing` says the activations are Q8_K.
pub fn pack_acts(acts: &GgmlActs, pairing: Pairing, tiles: &mut Vec<ActTileQ8_0>) {
    let nb = acts.cols / QK;
    tiles.clear();
    tiles.resize(acts.n.div_ceil(TOKENS) * nb, ActTileQ8_0::default());
    let q8k = pairing == Pairing::Q8K;
    for t in 0..acts.n {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        let row = &mut tiles[tile * nb..(tile + 1) * nb];
        if q8k {
            for (a, row) in acts.q8k_row(t).iter().zip(row.chunks_exact_mut(QK_K / QK)) {
                for (tile, q) in row.iter_mut().zip(a.qs.chunks_exact(QK)) {
                    pack_block(tile, lane, bytemuck::cast_slice(q), a.d);
                }
            }
        } else {
            for (a, tile) in acts.q8_0_row(t).iter().zip(row) {
                pack_block(tile, lane, &a.qs, f16_le(a.d));
            }
        }
    }
}

/// One token's block (codes `q` as i8 bytes, scale `d`) into lane `lane` of `tile`.
pub fn pack_block(tile: &mut ActTileQ8_0, lane: usize, q: &[u8], d: f32) {
    for (g, q) in q.chunks_exact(4).enumerate() {
        for (o, &q) in tile.a[64 * g + 4 * lane..][..4].iter_mut().zip(q) {
            *o = q ^ 0x80;
        }
    }
    tile.d[lane] = d;
}

/// [`GemmTileQ8_0`] in scalar code: the specification. Per (row, token)
/// each block's integer sum exactly, through `a + 128` and `init` as the
/// SIMD kernel forms it, then `(d_w · d_a) · sum` added in block order, as
/// `vec_dot_q8_0_q8_0_ref` adds.
///
/// # Safety
/// None beyond the type's contract (safe code; `unsafe` to fit the table).
pub unsafe fn gemm_tile_q8_0_ref(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    _tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    let nb = acts.len();
    assert_eq!(w.len(), ROWS * nb, "ROWS rows of nb blocks");
    for r in 0..ROWS {
        for t in 0..TOKENS {
            let mut acc = 0f32;
            for (u, a) in w[r * nb..(r + 1) * nb].iter().zip(acts) {
                let mut dot = u.init;
                for (k, &q) in u.q.iter().enumerate() {
                    let code = a.a[64 * (k / 4) + 4 * t + k % 4];
                    dot += i32::from(q as i8) * i32::from(code);
                }
                acc += u.d * a.d[t] * dot as f32;
            }
            out[r * TOKENS + t] = acc;
        }
    }
}

/// [`GemmTileQ8_0`] with AVX-512 F + VNNI: per block, the eight 64-byte
/// groups of the tile loaded once for [`ROWS`] rows, 8 `vpdpbusd` per row,
/// a conversion and an FMA by `d_w · d_a`; on 256-bit lanes when at most
/// 8 tokens are live (as the k-quant tile).
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI; `w.len() == ROWS · acts.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile_q8_0_vnni(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm_vnni_lanes::<1>(w, acts, tokens, out) }
}

/// [`gemm_tile_q8_0_vnni`] for tiles of Q8_K activations ([`pack_acts`]
/// with [`Pairing::Q8K`]), whose eight blocks of each 256 share their
/// scale: the blocks' products are scaled by `d_w` alone and summed, then
/// by `d_a` once per eight, one multiply fewer per row and block.
///
/// # Safety
/// As [`gemm_tile_q8_0_vnni`]; `acts.len()` a multiple of 8 and each
/// token's `d` the same in the 8 tiles of each 256 codes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile_q8_0_vnni_q8k(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    assert!(
        acts.len().is_multiple_of(8),
        "Q8_K tiles come eight to 256 codes"
    );
    // SAFETY: the caller's contract.
    unsafe { gemm_vnni_lanes::<8>(w, acts, tokens, out) }
}

/// The VNNI kernels, `SHARED` blocks a scale of the activations: on all
/// 16 tokens or, when at most 8 are live, on 256-bit lanes.
///
/// # Safety
/// As the callers, inlined into them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn gemm_vnni_lanes<const SHARED: usize>(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    use super::avx512::{Full, Half};
    // SAFETY: the caller's contract.
    unsafe {
        if tokens <= TOKENS / 2 {
            gemm_vnni::<Half, SHARED>(w, acts, out);
        } else {
            gemm_vnni::<Full, SHARED>(w, acts, out);
        }
    }
}

/// [`gemm_vnni_lanes`] on the tokens of `L`.
///
/// # Safety
/// As [`gemm_vnni_lanes`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn gemm_vnni<L: super::avx512::Lanes, const SHARED: usize>(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    out: &mut [f32; ROWS * TOKENS],
) {
    let nb = acts.len();
    assert_eq!(w.len(), ROWS * nb, "ROWS rows of nb blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every read stays inside `acts[b]` (a: 64g + 64 ≤ 512) or
    // `w[r · nb + b]` (q: 4i + 4 ≤ 32).
    unsafe {
        let mut acc = [L::zero_f(); ROWS];
        // The blocks since the activations' last scale, scaled by `d_w`.
        let mut inner = [L::zero_f(); ROWS];
        for (b, at) in acts.iter().enumerate() {
            let ap = at.a.as_ptr();
            let mut a = [L::set1_i(0); QK / 4];
            for (g, a) in a.iter_mut().enumerate() {
                *a = L::load_i(ap.add(64 * g));
            }
            let d = L::load_f(at.d.as_ptr());
            for r in 0..ROWS {
                let u = w.get_unchecked(r * nb + b);
                let q = u.q.as_ptr().cast::<i32>();
                // two chains of four: eight `vpdpbusd` in one chain wait
                // on each other's latency
                let mut dot = L::set1_i(u.init);
                let mut odd = L::set1_i(0);
                for i in 0..QK / 8 {
                    dot = L::dpbusd(dot, a[2 * i], q.add(2 * i).read_unaligned());
                    odd = L::dpbusd(odd, a[2 * i + 1], q.add(2 * i + 1).read_unaligned());
                }
                let dot = L::sub_i(dot, L::sub_i(L::set1_i(0), odd));
                if SHARED == 1 {
                    let scale = L::mul(L::set1_f(u.d), d);
                    acc[r] = L::fmadd(L::cvt(dot), scale, acc[r]);
                } else {
                    inner[r] = L::fmadd(L::cvt(dot), L::set1_f(u.d), inner[r]);
                }
            }
            if SHARED > 1 && b % SHARED == SHARED - 1 {
                for (acc, inner) in acc.iter_mut().zip(&mut inner) {
                    *acc = L::fmadd(*inner, d, *acc);
                    *inner = L::zero_f();
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            L::store_f(out.as_mut_ptr().add(r * TOKENS), *acc);
        }
    }
}

/// [`GemmTileQ8_0`] with AVX2 + FMA, for any codes: per group of four
/// codes `vpmaddubsw` of `|w|` and `a · sign(w)` (the tile's `a + 128`
/// turned back to `a`, once per block for 4 rows), so each pair is at most
/// 2 · 128 · 127 and the integer sums stay exact; `init` is not needed.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w.len() == ROWS · acts.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm_tile_q8_0_avx2(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the same contract.
    unsafe { gemm_avx2::<Avx2Mac, true>(w, acts, tokens, out) }
}

/// [`GemmTileQ8_0`] with AVX2 + FMA for weights of at most 64 in magnitude
/// (`q3`'s grids, `crate::quant::tile`): `vpmaddubsw` of `a + 128` ≤ 255
/// and such a weight, twice, is at most 32640, inside its i16, so the
/// integer sums stay exact; GGUF's Q8_0 codes (to 127) would saturate and
/// take [`gemm_tile_q8_0_avx2`].
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w.len() == ROWS · acts.len()`;
/// every code of `w` within -64..=64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm_tile_q8_0_avx2_narrow(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the same contract.
    unsafe { gemm_avx2::<Avx2Mac, false>(w, acts, tokens, out) }
}

/// [`GemmTileQ8_0`] with AVX2 + FMA and AVX-VNNI, for any codes: `a + 128`
/// times `w` by `vpdpbusd`, four products summed straight into i32 (no
/// i16 to saturate), and `init`.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-VNNI; `w.len() == ROWS ·
/// acts.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn gemm_tile_q8_0_avx_vnni(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the same contract.
    unsafe { gemm_avx2::<AvxVnniMac, false>(w, acts, tokens, out) }
}

/// The AVX2 kernels, as the k-quant AVX2 tile: 8 tokens per register,
/// each tile in two halves (only those holding a token), 4 rows per pass,
/// the int8 products through `M` (`quant::avx2::dot_i8`); `SIGNED` pairs
/// `|w|` with `a · sign(w)`, otherwise `a + 128` with `w` and `init`.
///
/// # Safety
/// As [`gemm_tile_q8_0_avx2`], and for `!SIGNED` with [`Avx2Mac`] as the
/// narrow kernel; `M`'s ISA enabled in the caller.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn gemm_avx2<M: Mac, const SIGNED: bool>(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    use crate::quant::avx2::dot_i8;
    use std::arch::x86_64::*;
    let nb = acts.len();
    assert_eq!(w.len(), ROWS * nb, "ROWS rows of nb blocks");
    // SAFETY: the target features are enabled by the callers' contract;
    // every read stays inside `acts[b]` (a: 64g + 32h + 32 ≤ 512; d:
    // 8h + 8 ≤ 16) or `w[(g + r) · nb + b]` (q: 4i + 4 ≤ 32; g + r < ROWS).
    unsafe {
        // `a + 128` back to `a` for the sign trick.
        let flip = _mm256_set1_epi8(if SIGNED { i8::MIN } else { 0 });
        let halves = tokens.div_ceil(8).min(2);
        for g in (0..ROWS).step_by(4) {
            for h in 0..halves {
                let mut acc = [_mm256_setzero_ps(); 4];
                for (b, at) in acts.iter().enumerate() {
                    let ap = at.a.as_ptr().add(32 * h);
                    let mut a = [_mm256_setzero_si256(); QK / 4];
                    for (k, a) in a.iter_mut().enumerate() {
                        *a = _mm256_xor_si256(_mm256_load_si256(ap.add(64 * k).cast()), flip);
                    }
                    let d = _mm256_load_ps(at.d.as_ptr().add(8 * h));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let u = w.get_unchecked((g + r) * nb + b);
                        let q = u.q.as_ptr().cast::<i32>();
                        let mut dot = _mm256_set1_epi32(if SIGNED { 0 } else { u.init });
                        for (i, a) in a.iter().enumerate() {
                            let wq = _mm256_set1_epi32(q.add(i).read_unaligned());
                            dot = if SIGNED {
                                dot_i8::<M, true>(dot, wq, *a)
                            } else {
                                dot_i8::<M, false>(dot, *a, wq)
                            };
                        }
                        let scale = _mm256_mul_ps(_mm256_set1_ps(u.d), d);
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, *acc);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add((g + r) * TOKENS + 8 * h), *acc);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks: codes within ±`max`, scales of varied magnitude.
    fn random_tiles(nb: usize, max: i32, seed: &mut u64) -> (Vec<UnpackedQ8_0>, Vec<ActTileQ8_0>) {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let mut w = vec![UnpackedQ8_0::default(); ROWS * nb];
        for u in &mut w {
            for q in &mut u.q {
                *q = ((next() % (2 * max as u64 + 1)) as i32 - max) as i8 as u8;
            }
            u.init = -128 * u.q.iter().map(|&q| i32::from(q as i8)).sum::<i32>();
            u.d = (next() % 1000) as f32 * 1e-4;
        }
        let mut a = vec![ActTileQ8_0::default(); nb];
        for t in &mut a {
            for v in &mut t.a {
                *v = (next() % 255 + 1) as u8;
            }
            for d in &mut t.d {
                *d = (next() % 1000) as f32 * 1e-3;
            }
        }
        (w, a)
    }

    /// Every SIMD micro-kernel this CPU runs against the scalar one, within
    /// the f32 rounding of the per-block scaling (the integer sums are exact).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_micro_kernels_match_the_scalar_one() {
        let mut kernels: Vec<(&str, GemmTileQ8_0, i32)> = Vec::new();
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            kernels.push(("avx2 narrow", gemm_tile_q8_0_avx2_narrow, 64));
            kernels.push(("avx2", gemm_tile_q8_0_avx2, 127));
        } else {
            println!("SKIPPED: avx2 (this CPU lacks it)");
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni") {
            kernels.push(("avx-vnni", gemm_tile_q8_0_avx_vnni, 127));
        } else {
            println!("SKIPPED: avx-vnni (this CPU lacks it)");
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni") {
            kernels.push(("vnni", gemm_tile_q8_0_vnni, 127));
        } else {
            println!("SKIPPED: avx512 vnni (this CPU lacks it)");
        }
        let mut seed = 0x853c_49e6_748f_ea9b_u64;
        for (name, gemm, max) in kernels {
            for (nb, tokens) in [(1, TOKENS), (3, 5), (64, TOKENS), (64, 9)] {
                let (w, a) = random_tiles(nb, max, &mut seed);
                let (mut want, mut got) = ([0f32; ROWS * TOKENS], [0f32; ROWS * TOKENS]);
                // SAFETY: the scalar kernel has no ISA; the SIMD one's was
                // detected above; w holds ROWS rows of nb blocks, codes in range.
                unsafe {
                    gemm_tile_q8_0_ref(&w, &a, tokens, &mut want);
                    gemm(&w, &a, tokens, &mut got);
                }
                for i in (0..ROWS * TOKENS).filter(|i| i % TOKENS < tokens) {
                    let (g, r) = (got[i], want[i]);
                    // Each block's term is ≤ 32·127·255·1e-1; f32 rounds each
                    // of the nb additions at 2^-23 of the running magnitude.
                    let tol = 2e-6 * nb as f32 * (32.0 * 127.0 * 255.0 * 0.1);
                    assert!((g - r).abs() <= tol, "{name} nb={nb} [{i}]: {g} vs {r}");
                }
            }
        }
    }
}
