//! Batched products of Q8_0 weight rows (a GGUF's Q8_0 tensors and waste's
//! q8 backbone, whose block is Q8_0's) with many Q8_0 activation rows: the
//! k-quant tile's scheme ([`super`]) on blocks of 32 with a scale per block
//! on both sides, as llama.cpp pairs Q8_0 with Q8_0. Per weight row, block
//! b and token t: `(d_w · d_a,t) · Σ q·a`, the integer sum exact.
//!
//! The AVX-512 kernel takes the signed codes as `vpdpbusd`'s signed operand
//! against `a + 128`, as the k-quant tile does; AVX2's `vpmaddubsw` would
//! saturate on 8-bit weights (255 · 127 · 2 > 2¹⁵), so tables without VNNI
//! keep the row kernels (`GgmlKernels::gemm_q8_0` is `None` there).

use super::super::super::act::GgmlActs;
use super::super::super::f16_le;
use super::super::super::legacy::{BlockQ8_0, QK};
use super::{ROWS, TOKENS};

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
/// of tokens (`acts[b]`); `out[16r + t]` is row r's product with token t.
///
/// # Safety
/// The ISA the function was compiled for must be available;
/// `w.len() == ROWS · acts.len()`.
pub type GemmTileQ8_0 =
    unsafe fn(w: &[UnpackedQ8_0], acts: &[ActTileQ8_0], out: &mut [f32; ROWS * TOKENS]);

/// A Q8_0 row (whole blocks) decoded for the micro-kernel.
pub fn unpack_row(row: &[u8], out: &mut [UnpackedQ8_0]) {
    let blocks: &[BlockQ8_0] = super::super::super::blocks(row).expect("whole Q8_0 blocks");
    assert_eq!(blocks.len(), out.len(), "row and unpacked blocks disagree");
    for (b, u) in blocks.iter().zip(out) {
        u.q = b.qs;
        u.init = -128 * b.qs.iter().map(|&q| i32::from(q as i8)).sum::<i32>();
        u.d = f16_le(b.d);
    }
}

/// Packs Q8_0 activation rows into tiles, `tiles[tile · nb + b]` for block
/// b of tokens `16·tile..`; tokens past the last are zero.
pub fn pack_acts(acts: &GgmlActs, tiles: &mut Vec<ActTileQ8_0>) {
    let nb = acts.cols / QK;
    tiles.clear();
    tiles.resize(acts.n.div_ceil(TOKENS) * nb, ActTileQ8_0::default());
    for t in 0..acts.n {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        for (b, a) in acts.q8_0_row(t).iter().enumerate() {
            let dst = &mut tiles[tile * nb + b];
            for (g, q) in a.qs.chunks_exact(4).enumerate() {
                for (d, &q) in dst.a[64 * g + 4 * lane..][..4].iter_mut().zip(q) {
                    *d = q ^ 0x80;
                }
            }
            dst.d[lane] = f16_le(a.d);
        }
    }
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
/// a conversion and an FMA by `d_w · d_a`.
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI; `w.len() == ROWS · acts.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile_q8_0_vnni(
    w: &[UnpackedQ8_0],
    acts: &[ActTileQ8_0],
    out: &mut [f32; ROWS * TOKENS],
) {
    use std::arch::x86_64::*;
    let nb = acts.len();
    assert_eq!(w.len(), ROWS * nb, "ROWS rows of nb blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every read stays inside `acts[b]` (a: 64g + 64 ≤ 512) or
    // `w[r · nb + b]` (q: 4i + 4 ≤ 32).
    unsafe {
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for (b, at) in acts.iter().enumerate() {
            let ap = at.a.as_ptr();
            let mut a = [_mm512_setzero_si512(); QK / 4];
            for (g, a) in a.iter_mut().enumerate() {
                *a = _mm512_load_si512(ap.add(64 * g).cast());
            }
            let d = _mm512_load_ps(at.d.as_ptr());
            for (r, acc) in acc.iter_mut().enumerate() {
                let u = w.get_unchecked(r * nb + b);
                let q = u.q.as_ptr().cast::<i32>();
                let mut dot = _mm512_set1_epi32(u.init);
                for (i, a) in a.iter().enumerate() {
                    dot =
                        _mm512_dpbusd_epi32(dot, *a, _mm512_set1_epi32(q.add(i).read_unaligned()));
                }
                let scale = _mm512_mul_ps(_mm512_set1_ps(u.d), d);
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *acc);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(r * TOKENS), *acc);
        }
    }
}
