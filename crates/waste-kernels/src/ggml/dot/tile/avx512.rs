//! The batched micro-kernel with AVX-512 VNNI: one i32 lane per token,
//! `vpdpbusd` of four unsigned activation codes of 16 tokens (one 64-byte
//! group of [`ActTile::a`]) with four codes of one weight row broadcast,
//! [`ROWS`] rows per pass so each activation load serves them all. Per
//! row, sub-block and tile: 4 `vpdpbusd`, a conversion and two FMAs for
//! 256 products.

use std::arch::x86_64::*;

use super::{ActTile, ROWS, TOKENS, Unpacked};

/// [`super::GemmTile`] with AVX-512 F + VNNI.
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI; `w.len() == ROWS · acts.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<1>(w, acts, tokens, out) }
}

/// [`gemm_tile`] for rows whose two 16-weight sub-blocks of each 32 share
/// their scale and min ([`super::paired`]): their integer sums added in
/// i32 and scaled once, which halves the conversions and FMAs that cost
/// the kernel about as much as its `vpdpbusd`s.
///
/// # Safety
/// As [`gemm_tile`]; `sc[2j] == sc[2j + 1]` and `m[2j] == m[2j + 1]` in
/// every block of `w`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn gemm_tile_paired(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // SAFETY: the caller's contract.
    unsafe { gemm::<2>(w, acts, tokens, out) }
}

/// The kernel, `S` sub-blocks (sharing their scale and min) per step: on
/// all 16 tokens of the tile, or on its first 8 in 256-bit registers when
/// no more are live (a prompt's tokens seldom fill an expert's last tile,
/// and half the lanes cost half: Zen 4 splits 512-bit operations, Intel
/// issues two 256-bit `vpdpbusd` a cycle). Where the rows' mins are only
/// their codes' offset ([`Unpacked::off`]), `off · Σ a` leaves the integer
/// sums once per tile and sub-block for all [`ROWS`] rows, instead of an
/// FMA by `m` per row.
///
/// # Safety
/// As [`gemm_tile_paired`] for `S == 2`, [`gemm_tile`] for `S == 1`, and
/// the features the callers enable.
#[inline(always)]
unsafe fn gemm<const S: usize>(
    w: &[Unpacked],
    acts: &[ActTile],
    tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    // Every row of a product is of one type: one offset.
    let off = w.first().map_or(0, |u| u.off);
    // SAFETY: the caller's contract.
    unsafe {
        match (tokens <= TOKENS / 2, off != 0) {
            (true, false) => gemm_lanes::<S, Half, false>(w, acts, off, out),
            (true, true) => gemm_lanes::<S, Half, true>(w, acts, off, out),
            (false, false) => gemm_lanes::<S, Full, false>(w, acts, off, out),
            (false, true) => gemm_lanes::<S, Full, true>(w, acts, off, out),
        }
    }
}

/// The tokens of a tile one kernel runs on: an i32 (f32) lane each (the
/// Q8_0 tile's kernel takes them too).
pub(in crate::ggml::dot) trait Lanes {
    type I: Copy;
    type F: Copy;
    /// The lanes' four activation codes each, at `p` (64-byte aligned).
    unsafe fn load_i(p: *const u8) -> Self::I;
    /// The lanes' f32 at `p` (64-byte aligned).
    unsafe fn load_f(p: *const f32) -> Self::F;
    unsafe fn store_f(p: *mut f32, v: Self::F);
    unsafe fn zero_f() -> Self::F;
    unsafe fn set1_i(v: i32) -> Self::I;
    unsafe fn set1_f(v: f32) -> Self::F;
    /// `acc + Σ a·w` per lane: unsigned `a`, four signed `w` broadcast.
    unsafe fn dpbusd(acc: Self::I, a: Self::I, w: i32) -> Self::I;
    unsafe fn cvt(v: Self::I) -> Self::F;
    /// f32 lanes holding integers, as i32.
    unsafe fn cvt_i(v: Self::F) -> Self::I;
    unsafe fn sub_i(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// `a · b + c`.
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `c − a · b`.
    unsafe fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
}

/// All 16 tokens.
pub(in crate::ggml::dot) struct Full;
/// The first 8.
pub(in crate::ggml::dot) struct Half;

// SAFETY (every method of both impls): inlined into the callers' AVX-512
// F/VL + VNNI code; pointers as each method's contract states.
impl Lanes for Full {
    type I = __m512i;
    type F = __m512;
    #[inline(always)]
    unsafe fn load_i(p: *const u8) -> __m512i {
        unsafe { _mm512_load_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m512 {
        unsafe { _mm512_load_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn set1_i(v: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn set1_f(v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn dpbusd(acc: __m512i, a: __m512i, w: i32) -> __m512i {
        unsafe { _mm512_dpbusd_epi32(acc, a, _mm512_set1_epi32(w)) }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn cvt_i(v: __m512) -> __m512i {
        unsafe { _mm512_cvtps_epi32(v) }
    }
    #[inline(always)]
    unsafe fn sub_i(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fnmadd_ps(a, b, c) }
    }
}

impl Lanes for Half {
    type I = __m256i;
    type F = __m256;
    #[inline(always)]
    unsafe fn load_i(p: *const u8) -> __m256i {
        unsafe { _mm256_load_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m256 {
        unsafe { _mm256_load_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn set1_i(v: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn set1_f(v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, w: i32) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(acc, a, _mm256_set1_epi32(w)) }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn cvt_i(v: __m256) -> __m256i {
        unsafe { _mm256_cvtps_epi32(v) }
    }
    #[inline(always)]
    unsafe fn sub_i(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fnmadd_ps(a, b, c) }
    }
}

/// [`gemm`] on the tokens of `L`: their lanes lead each 64-byte group of
/// [`ActTile::a`] and each run of 16 in `bsum` and `d`, and their products
/// lead each row's 16 in `out`; `off` the rows' [`Unpacked::off`].
///
/// # Safety
/// As [`gemm`].
#[inline(always)]
unsafe fn gemm_lanes<const S: usize, L: Lanes, const OFF: bool>(
    w: &[Unpacked],
    acts: &[ActTile],
    off: u32,
    out: &mut [f32; ROWS * TOKENS],
) {
    let nsb = acts.len();
    assert_eq!(w.len(), ROWS * nsb, "ROWS rows of nsb super-blocks");
    // SAFETY: the target features are enabled by the caller's contract;
    // every pointer read stays inside `acts[s]` or `w[r · nsb + s]`
    // (q: 16j + 4i + 4 ≤ 256; a: 64 (4j + i) + 64 ≤ 4096).
    unsafe {
        let mut acc = [L::zero_f(); ROWS];
        for (s, at) in acts.iter().enumerate() {
            let mut inner = [L::zero_f(); ROWS];
            for j in (0..16).step_by(S) {
                let ap = at.a.as_ptr().add(256 * j);
                let mut a = [L::set1_i(0); 8];
                for (i, a) in a.iter_mut().enumerate().take(4 * S) {
                    *a = L::load_i(ap.add(64 * i));
                }
                let mut bsum = L::load_f(at.bsum.as_ptr().add(TOKENS * j));
                if S == 2 {
                    bsum = L::add(bsum, L::load_f(at.bsum.as_ptr().add(TOKENS * (j + 1))));
                }
                // off · Σ a, exact: |Σ a| ≤ 32 · 128 and off < 128.
                let offset = if OFF {
                    L::cvt_i(L::mul(bsum, L::set1_f(off as f32)))
                } else {
                    L::set1_i(0)
                };
                for (r, inner) in inner.iter_mut().enumerate() {
                    let u = w.get_unchecked(r * nsb + s);
                    let q = u.q.as_ptr().add(16 * j).cast::<i32>();
                    let init = if S == 2 {
                        u.init[j] + u.init[j + 1]
                    } else {
                        u.init[j]
                    };
                    let mut dot = if OFF {
                        L::sub_i(L::set1_i(init), offset)
                    } else {
                        L::set1_i(init)
                    };
                    // two chains: `vpdpbusd`s in one chain wait on each
                    // other's latency
                    let mut odd = L::set1_i(0);
                    for i in 0..2 * S {
                        dot = L::dpbusd(dot, a[2 * i], q.add(2 * i).read_unaligned());
                        odd = L::dpbusd(odd, a[2 * i + 1], q.add(2 * i + 1).read_unaligned());
                    }
                    let dot = L::sub_i(dot, L::sub_i(L::set1_i(0), odd));
                    *inner = L::fmadd(L::cvt(dot), L::set1_f(u.sc[j]), *inner);
                    if !OFF {
                        *inner = L::fnmadd(bsum, L::set1_f(u.m[j]), *inner);
                    }
                }
            }
            let d = L::load_f(at.d.as_ptr());
            for (acc, inner) in acc.iter_mut().zip(inner) {
                *acc = L::fmadd(inner, d, *acc);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            L::store_f(out.as_mut_ptr().add(r * TOKENS), *acc);
        }
    }
}
