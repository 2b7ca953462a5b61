//! The batched micro-kernel with AVX2: as `avx512.rs` on 8 tokens per
//! register (each tile in two halves), `vpmaddubsw` of the unsigned codes
//! with the signed activations, summed in i16 as far as the codes' width
//! allows, then `vpmaddwd`. And the unpacker every SIMD table takes:
//! codes 32 at a time, their sub-block sums by `vpsadbw`; the k-quants'
//! scales 16 at a time, with the scalar specification's products in its
//! order (the lattice types' as it forms them).

use std::arch::x86_64::*;

use super::super::super::grids::IQ1S_GRID;
use super::super::super::iquants::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, Iq1Entries,
};
use super::super::super::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::super::super::{GgmlType, f16_le};
use super::super::avx2_iq::{Lattice, grid64x4};
use super::super::reference::LatticeInts;
use super::{ActTile, KScales, ROWS, TOKENS, Unpacked, for_blocks};

/// [`super::GemmTile`] with AVX2 + FMA for rows whose codes are all below
/// 32 (every k-quant but Q6_K): the four `vpmaddubsw` of a sub-block are
/// summed in i16 before one `vpmaddwd` (4 · 2 · 31 · 128 ≤ 32767).
///
/// # Safety
/// As [`gemm_tile`]; every code of `w` below 32.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm_tile_narrow(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<4>(w, acts, tokens, out) }
}

/// [`super::GemmTile`] with AVX2 + FMA for codes below 64: the sub-block's
/// `vpmaddubsw` summed two at a time in i16 (2 · 2 · 63 · 128 ≤ 32767).
///
/// # Safety
/// The CPU must have AVX2 and FMA; `w.len() == ROWS · acts.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm_tile(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<2>(w, acts, tokens, out) }
}

/// [`super::GemmTile`] with AVX2 + FMA for codes below 128 (the lattice
/// i-quants' offset values): each `vpmaddubsw` (2 · 127 · 128 ≤ 32767)
/// straight to `vpmaddwd`.
///
/// # Safety
/// As [`gemm_tile`]; every code below 128.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm_tile_wide(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<1>(w, acts, tokens, out) }
}

/// [`super::GemmTile`] with AVX2 + FMA and AVX-VNNI, for any codes: a
/// sub-block's four `vpdpbusd` sum its products in i32 (no i16 to
/// saturate), then one `vpmulld` by its scale.
///
/// # Safety
/// The CPU must have AVX2, FMA and AVX-VNNI; `w.len() == ROWS · acts.len()`.
#[target_feature(enable = "avx2,fma,avxvnni")]
pub unsafe fn gemm_tile_avx_vnni(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<0>(w, acts, tokens, out) }
}

/// The micro-kernel on 8 tokens per register (each tile in two halves):
/// the activations back to signed codes (`a + 128` xor 0x80, once per load
/// for four rows), `vpmaddubsw` of the unsigned weight codes with them, `I16`
/// of its results summed in i16, then `vpmaddwd` by the sub-block's integer
/// scale ([`Unpacked::isc`]) into one i32 sum per row and token over the
/// super-block (|Σ| ≤ 16 · 16 · 63 · 127 · 128 < 2^31), scaled once by the
/// block's `d`. The mins go into the f32 accumulators after the codes,
/// against the activation sums times their scale (one product per
/// sub-block for four rows). [`Unpacked::init`] is not needed here.
///
/// With `I16 == 0` the sub-block's products are summed by AVX-VNNI's
/// `vpdpbusd` in i32 and scaled by `vpmulld` ([`gemm_tile_avx_vnni`]).
///
/// # Safety
/// As [`gemm_tile`]; with `I16 == 4`, every code below 32; with 2, below
/// 64; with 1, below 128; with 0, AVX-VNNI enabled in the caller.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemm<const I16: usize>(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    let nsb = acts.len();
    assert_eq!(w.len(), ROWS * nsb, "ROWS rows of nsb super-blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every pointer read stays inside `acts[s]` or `w[r · nsb + s]`
    // (q: 16j + 4i + 4 ≤ 256; a: 64 (4j + i) + 32h + 32 ≤ 4096; g + r < ROWS).
    unsafe {
        let flip = _mm256_set1_epi8(-128);
        // Four rows per pass: 16 ymm registers hold no more accumulators.
        // The halves of 8 tokens that hold one.
        let halves = tokens.div_ceil(8).min(2);
        for g in (0..ROWS).step_by(4) {
            for h in 0..halves {
                let mut acc = [_mm256_setzero_ps(); 4];
                for (s, at) in acts.iter().enumerate() {
                    let da = _mm256_load_ps(at.d.as_ptr().add(8 * h));
                    let mut dot = [_mm256_setzero_si256(); 4];
                    for j in 0..16 {
                        let ap = at.a.as_ptr().add(256 * j + 32 * h);
                        let a = [0, 64, 128, 192]
                            .map(|o| _mm256_xor_si256(_mm256_load_si256(ap.add(o).cast()), flip));
                        for (r, dot) in dot.iter_mut().enumerate() {
                            let u = w.get_unchecked((g + r) * nsb + s);
                            let q = u.q.as_ptr().add(16 * j).cast::<i32>();
                            let p = |i: usize| {
                                let wq = _mm256_set1_epi32(q.add(i).read_unaligned());
                                _mm256_maddubs_epi16(wq, a[i])
                            };
                            let isc = _mm256_set1_epi32(u.isc[j]);
                            let d = if I16 == 0 {
                                let mut v = _mm256_setzero_si256();
                                for (i, a) in a.iter().enumerate() {
                                    let wq = _mm256_set1_epi32(q.add(i).read_unaligned());
                                    v = _mm256_dpbusd_avx_epi32(v, wq, *a);
                                }
                                // the scale as one i32, not an i16 pair
                                _mm256_mullo_epi32(v, _mm256_set1_epi32(i32::from(u.isc[j] as i16)))
                            } else if I16 == 4 {
                                let s = _mm256_add_epi16(
                                    _mm256_add_epi16(p(0), p(1)),
                                    _mm256_add_epi16(p(2), p(3)),
                                );
                                _mm256_madd_epi16(s, isc)
                            } else if I16 == 1 {
                                let m = |i: usize| _mm256_madd_epi16(p(i), isc);
                                _mm256_add_epi32(
                                    _mm256_add_epi32(m(0), m(1)),
                                    _mm256_add_epi32(m(2), m(3)),
                                )
                            } else {
                                _mm256_add_epi32(
                                    _mm256_madd_epi16(_mm256_add_epi16(p(0), p(1)), isc),
                                    _mm256_madd_epi16(_mm256_add_epi16(p(2), p(3)), isc),
                                )
                            };
                            *dot = _mm256_add_epi32(*dot, d);
                        }
                    }
                    // The mins after the codes: fewer registers live in the loop above.
                    for j in 0..16 {
                        let bsum = _mm256_load_ps(at.bsum.as_ptr().add(TOKENS * j + 8 * h));
                        let bsum = _mm256_mul_ps(bsum, da);
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let u = w.get_unchecked((g + r) * nsb + s);
                            *acc = _mm256_fnmadd_ps(bsum, _mm256_set1_ps(u.m[j]), *acc);
                        }
                    }
                    for (r, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                        let u = w.get_unchecked((g + r) * nsb + s);
                        let d = _mm256_mul_ps(da, _mm256_set1_ps(u.d));
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add((g + r) * TOKENS + 8 * h), *acc);
                }
            }
        }
    }
}

/// Stores the 32 codes of weights `32j..32j + 32` and the `init` of their
/// two 16-weight sub-blocks.
#[inline]
#[target_feature(enable = "avx2")]
fn put(u: &mut Unpacked, j: usize, v: __m256i) {
    // SAFETY: `q` is 64-byte aligned (the struct's alignment, at offset 0)
    // and 32j + 32 ≤ 256 for j < 8 (callers pass j < 8).
    unsafe { _mm256_store_si256(u.q[32 * j..32 * j + 32].as_mut_ptr().cast(), v) };
    // u64 lanes: sums of bytes 0..8, 8..16, 16..24, 24..32; pairs added.
    let s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    let s = _mm256_add_epi64(s, _mm256_shuffle_epi32::<0x4E>(s));
    u.init[2 * j] = -128 * _mm256_extract_epi32::<0>(s);
    u.init[2 * j + 1] = -128 * _mm256_extract_epi32::<4>(s);
}

/// 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
fn load(p: &[u8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: 32 readable bytes (asserted).
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// Bits `shift..shift + bits` of each byte of `v`, as bytes.
#[inline]
#[target_feature(enable = "avx2")]
fn field(v: __m256i, shift: i32, mask: u8) -> __m256i {
    let v = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift));
    _mm256_and_si256(v, _mm256_set1_epi8(mask as i8))
}

/// `v << 2^k` for bytes whose result stays below 256.
#[inline]
#[target_feature(enable = "avx2")]
fn shl(v: __m256i, by: i32) -> __m256i {
    _mm256_sll_epi16(v, _mm_cvtsi32_si128(by))
}

#[target_feature(enable = "avx2")]
fn codes_q2_k(b: &BlockQ2K, u: &mut Unpacked) {
    for h in 0..2 {
        let qs = load(&b.qs[32 * h..]);
        for s in 0..4 {
            put(u, 4 * h + s, field(qs, 2 * s as i32, 3));
        }
    }
}

#[target_feature(enable = "avx2")]
fn codes_q3_k(b: &BlockQ3K, u: &mut Unpacked) {
    let hm = load(&b.hmask);
    for h in 0..2 {
        let qs = load(&b.qs[32 * h..]);
        for s in 0..4 {
            let high = shl(field(hm, (4 * h + s) as i32, 1), 2);
            put(
                u,
                4 * h + s,
                _mm256_or_si256(field(qs, 2 * s as i32, 3), high),
            );
        }
    }
}

#[target_feature(enable = "avx2")]
fn codes_k4(qs: &[u8; 128], high: Option<&[u8; 32]>, u: &mut Unpacked) {
    let qh = high.map(|h| load(h));
    for k in 0..4 {
        let r = load(&qs[32 * k..]);
        for (j, shift) in [(2 * k, 0), (2 * k + 1, 4)] {
            let mut v = field(r, shift, 0x0F);
            if let Some(qh) = qh {
                v = _mm256_or_si256(v, shl(field(qh, j as i32, 1), 4));
            }
            put(u, j, v);
        }
    }
}

#[target_feature(enable = "avx2")]
fn codes_q6_k(b: &BlockQ6K, u: &mut Unpacked) {
    for h in 0..2 {
        let ql = [load(&b.ql[64 * h..]), load(&b.ql[64 * h + 32..])];
        let qh = load(&b.qh[32 * h..]);
        for s in 0..4 {
            let low = field(ql[s & 1], 4 * (s / 2) as i32, 0x0F);
            let high = shl(field(qh, 2 * s as i32, 3), 4);
            put(u, 4 * h + s, _mm256_or_si256(low, high));
        }
    }
}

/// A lattice block's codes (`super::codes_lattice`) 32 at a time: the
/// row kernels' grid magnitudes and sign bytes (`avx2_iq.rs`), `vpsignb`,
/// plus the offset.
#[target_feature(enable = "avx2")]
fn codes_lattice<B: Lattice + LatticeInts>(b: &B, u: &mut Unpacked) {
    // SAFETY: this function's features are the trait methods' ISA.
    unsafe {
        let off = _mm256_set1_epi8(B::MAX as i8);
        for g in 0..8 {
            let v = _mm256_sign_epi8(b.grid(g), b.sign_vector(g));
            put(u, g, _mm256_add_epi8(v, off));
        }
    }
}

/// IQ1_S's and IQ1_M's codes (`8·grid + δ`, offset by `MAX`, as
/// `LatticeInts::values` gives them) 32 at a time: the four grid entries as
/// one vector, `8·grid` by `vpsignb` of eights, each entry's `δ + MAX` as
/// its bytes.
#[target_feature(enable = "avx2")]
fn codes_iq1<B: LatticeInts + Iq1Entries>(b: &B, u: &mut Unpacked) {
    let max = i64::from(B::MAX);
    for g in 0..8 {
        // SAFETY: this function's AVX2.
        let grid = unsafe { grid64x4(&IQ1S_GRID, |l| b.grid_index(4 * g + l)) };
        let shift = |l: usize| {
            let down = b.shifts_down(4 * g + l);
            (if down { max - 1 } else { max + 1 }) * 0x0101_0101_0101_0101
        };
        let shifts = _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3));
        let eights = _mm256_sign_epi8(_mm256_set1_epi8(8), grid);
        put(u, g, _mm256_add_epi8(eights, shifts));
    }
}

/// Sets `u`'s scales from a k-quant block's 16 sub-block scales `isc` and
/// the 16 `mv` of its mins (i8 each): `sc = d · isc`, `m = dm · (k · mv)`
/// (`k · mv` exact), `isc` in both i16 halves, and the codes' offset `off`. The products and their
/// order are [`KScales`]'s, so the values are its, bit for bit.
#[inline]
#[target_feature(enable = "avx2")]
fn put_scales(u: &mut Unpacked, d: f32, isc: __m128i, dm: f32, k: f32, mv: __m128i, off: u32) {
    u.d = d;
    u.off = off;
    let (d, dm, k) = (_mm256_set1_ps(d), _mm256_set1_ps(dm), _mm256_set1_ps(k));
    let low16 = _mm256_set1_epi32(0xFFFF);
    for h in 0..2 {
        let (s, m) = if h == 0 {
            (isc, mv)
        } else {
            (_mm_unpackhi_epi64(isc, isc), _mm_unpackhi_epi64(mv, mv))
        };
        let (s, m) = (_mm256_cvtepi8_epi32(s), _mm256_cvtepi8_epi32(m));
        let pair = _mm256_or_si256(_mm256_and_si256(s, low16), _mm256_slli_epi32::<16>(s));
        let sc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s));
        let m = _mm256_mul_ps(dm, _mm256_mul_ps(k, _mm256_cvtepi32_ps(m)));
        // SAFETY: each field holds 16 entries, 8 written at 8h.
        unsafe {
            _mm256_storeu_ps(u.sc[8 * h..].as_mut_ptr(), sc);
            _mm256_storeu_ps(u.m[8 * h..].as_mut_ptr(), m);
            _mm256_storeu_si256(u.isc[8 * h..].as_mut_ptr().cast(), pair);
        }
    }
}

/// The 12 scale bytes of a Q3_K or Q4_K/Q5_K block as `[b0..8, b8..12, 0..]`.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_bytes(s: &[u8; 12]) -> __m128i {
    let lo = u64::from_le_bytes(s[..8].try_into().expect("8 bytes"));
    let hi = u32::from_le_bytes(s[8..].try_into().expect("4 bytes"));
    _mm_set_epi64x(i64::from(hi), lo as i64)
}

#[target_feature(enable = "avx2")]
fn scales_q2_k(b: &BlockQ2K, u: &mut Unpacked) {
    // SAFETY: `scales` holds 16 bytes.
    let s = unsafe { _mm_loadu_si128(b.scales.as_ptr().cast()) };
    let nib = _mm_set1_epi8(0x0F);
    let mv = _mm_and_si128(_mm_srli_epi16::<4>(s), nib);
    put_scales(
        u,
        f16_le(b.d),
        _mm_and_si128(s, nib),
        f16_le(b.dmin),
        1.0,
        mv,
        0,
    );
}

/// Scale `s` has its low nibble in byte `s % 8` (the high one from `s =
/// 8` on) and its top two bits in byte `8 + s % 4` at bit `2 · (s / 4)`
/// ([`super::super::super::kquants::scale_k3`]).
#[target_feature(enable = "avx2")]
fn scales_q3_k(b: &BlockQ3K, u: &mut Unpacked) {
    let x = scale_bytes(&b.scales);
    let nib = _mm_set1_epi8(0x0F);
    let low = _mm_unpacklo_epi64(
        _mm_and_si128(x, nib),
        _mm_and_si128(_mm_srli_epi16::<4>(x), nib),
    );
    let top = _mm_shuffle_epi8(
        x,
        _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11),
    );
    let top = _mm_and_si128(
        _mm_srlv_epi32(top, _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3),
    );
    let isc = _mm_sub_epi8(
        _mm_or_si128(low, _mm_slli_epi16::<4>(top)),
        _mm_set1_epi8(32),
    );
    let d = f16_le(b.d);
    put_scales(u, d, isc, d, 4.0, isc, 4);
}

/// Q4_K's and Q5_K's eight 6-bit (scale, min) pairs
/// ([`super::super::super::kquants::scale_min_k4`]), each on both of its
/// 16-weight halves.
#[target_feature(enable = "avx2")]
fn scales_k4(d: [u8; 2], dmin: [u8; 2], s: &[u8; 12], u: &mut Unpacked) {
    let word = |i: usize| u32::from_le_bytes(s[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let (a, b, c) = (word(0), word(1), word(2));
    let (six, nib, top) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x3030_3030);
    let sc = u64::from(a & six) | u64::from((c & nib) | ((a >> 2) & top)) << 32;
    let mn = u64::from(b & six) | u64::from(((c >> 4) & nib) | ((b >> 2) & top)) << 32;
    let twice = |v: u64| {
        let v = _mm_cvtsi64_si128(v as i64);
        _mm_unpacklo_epi8(v, v)
    };
    put_scales(u, f16_le(d), twice(sc), f16_le(dmin), 1.0, twice(mn), 0);
}

#[target_feature(enable = "avx2")]
fn scales_q6_k(b: &BlockQ6K, u: &mut Unpacked) {
    // SAFETY: `scales` holds 16 bytes.
    let isc = unsafe { _mm_loadu_si128(b.scales.as_ptr().cast()) };
    let d = f16_le(b.d);
    put_scales(u, d, isc, d, 32.0, isc, 32);
}

/// [`super::Unpack`] with AVX2: codes, sums and the k-quants' scales in
/// vectors, the lattice types' scales as [`super::unpack_row`] forms them,
/// so the result is its, bit for bit.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn unpack_row(ty: GgmlType, row: &[u8], out: &mut [Unpacked]) {
    type Part<B> = unsafe fn(&B, &mut Unpacked);
    /// A lattice type's row: its codes here, its scales as the scalar
    /// unpacker forms them.
    #[target_feature(enable = "avx2")]
    fn lattice<B: KScales + Lattice + LatticeInts>(row: &[u8], out: &mut [Unpacked]) {
        each(row, out, |b: &B, u| codes_lattice(b, u), KScales::scales);
    }
    fn each<B: KScales>(row: &[u8], out: &mut [Unpacked], codes: Part<B>, scales: Part<B>) {
        for_blocks(row, out, |b: &B, u| {
            // SAFETY: both are this file's AVX2 functions, and this runs
            // only inside `unpack_row`, whose caller has AVX2.
            unsafe {
                codes(b, u);
                scales(b, u);
            }
        });
    }
    // Each closure inherits this function's AVX2 and runs only inside it.
    match ty {
        GgmlType::Q2_K => each(row, out, |b, u| codes_q2_k(b, u), |b, u| scales_q2_k(b, u)),
        GgmlType::Q3_K => each(row, out, |b, u| codes_q3_k(b, u), |b, u| scales_q3_k(b, u)),
        GgmlType::Q4_K => each(
            row,
            out,
            |b: &BlockQ4K, u| codes_k4(&b.qs, None, u),
            |b, u| scales_k4(b.d, b.dmin, &b.scales, u),
        ),
        GgmlType::Q5_K => each(
            row,
            out,
            |b: &BlockQ5K, u| codes_k4(&b.qs, Some(&b.qh), u),
            |b, u| scales_k4(b.d, b.dmin, &b.scales, u),
        ),
        GgmlType::Q6_K => each(row, out, |b, u| codes_q6_k(b, u), |b, u| scales_q6_k(b, u)),
        GgmlType::IQ2_XXS => lattice::<BlockIq2Xxs>(row, out),
        GgmlType::IQ2_XS => lattice::<BlockIq2Xs>(row, out),
        GgmlType::IQ3_XXS => lattice::<BlockIq3Xxs>(row, out),
        GgmlType::IQ3_S => lattice::<BlockIq3S>(row, out),
        GgmlType::IQ2_S => lattice::<BlockIq2S>(row, out),
        GgmlType::IQ1_S => each(
            row,
            out,
            |b: &BlockIq1S, u| codes_iq1(b, u),
            KScales::scales,
        ),
        GgmlType::IQ1_M => each(
            row,
            out,
            |b: &BlockIq1M, u| codes_iq1(b, u),
            KScales::scales,
        ),
        _ => panic!("{ty} has no batched kernel"),
    }
}
