//! AVX2 dot products of ggml weight rows with Q8_K / Q8_0 activation rows,
//! and the per-type bodies the AVX-512 VNNI versions share (`avx512.rs`).
//!
//! Every body is generic over [`Mac`], the one instruction sequence that
//! differs: multiplying 32 unsigned weight bytes by 32 signed activation
//! bytes and summing each 4 adjacent products into an i32 lane. AVX2 does
//! it with `vpmaddubsw` + `vpmaddwd` (the pairs fit i16: no weight here
//! times 127 twice reaches 32767), VNNI with one `vpdpbusd`; both give the
//! same i32 lanes. Signed weights (Q3_K after its offset, Q4_0, Q8_0, the
//! IQ4 grids) go through the sign trick: |w| times a with w's sign, exact
//! because the activation quantizers never write -128.
//!
//! The bodies are `#[inline(always)]` without target features and run only
//! inlined into the `#[target_feature]` wrappers at the bottom of this file
//! and of `avx512.rs`, which is what lets the intrinsics inline.
//!
//! Per block each body forms the integer sums of the `_ref` (`reference.rs`)
//! lane by lane and adds `scale · sum` into an f32 accumulator with an FMA.

// `unsafe fn` bodies are wrapped whole in one `unsafe` block (see SAFETY).
#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};
use super::super::iquants::BlockIq4Xs;
use super::super::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::super::legacy::{
    BlockIq4Nl, BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, e8m0_half,
};
use crate::quant::avx2::{nibbles2, store_rows8, sum_rows8};

/// The multiply-accumulate of one ISA.
pub(crate) trait Mac {
    /// i32 lane k = `Σ u[4k + i] · s[4k + i]` (u unsigned, s signed bytes).
    ///
    /// # Safety
    /// The ISA of the implementation must be enabled in the caller.
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i;

    /// As [`Mac::dot`], lanes 0..4 (bytes 0..16) times `lo` and lanes 4..8
    /// times `hi`; `|lo|, |hi| ≤ 128`.
    ///
    /// # Safety
    /// As [`Mac::dot`].
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i;

    /// `acc +` [`Mac::dot`]`(u, s)`.
    ///
    /// # Safety
    /// As [`Mac::dot`].
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { _mm256_add_epi32(acc, Self::dot(u, s)) }
    }

    /// [`Mac::dot`]`(u0, s0) + dot(u1, s1)` where every `u0·s0 + u1·s1`
    /// byte pair sum, two of them together, fits an i16 (AVX2 adds the
    /// `vpmaddubsw` results before one `vpmaddwd`).
    ///
    /// # Safety
    /// As [`Mac::dot`].
    #[inline(always)]
    unsafe fn dot2(u0: __m256i, s0: __m256i, u1: __m256i, s1: __m256i) -> __m256i {
        // SAFETY: as the trait's.
        unsafe {
            let p16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
            _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
        }
    }

    /// `acc + vpmaddwd(p, sc)`: the i16 pairs of `p` times the i16 words
    /// of `sc`, summed into `acc`'s i32 lanes.
    ///
    /// # Safety
    /// As [`Mac::dot`].
    #[inline(always)]
    unsafe fn pairs_acc(acc: __m256i, p: __m256i, sc: __m256i) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc)) }
    }

    /// Bits `shift..shift + width` of every byte of `v` at `to..to +
    /// width`, every other bit zero (`shift + width ≤ 8`, `to + width ≤ 8`;
    /// the callers' arguments are constants once their loops unroll).
    ///
    /// # Safety
    /// As [`Mac::dot`].
    #[inline(always)]
    unsafe fn bits(v: __m256i, shift: i32, width: i32, to: i32) -> __m256i {
        // SAFETY: as the trait's.
        unsafe {
            let mask = _mm256_set1_epi8((((1 << width) - 1) << to) as i8);
            let moved = match shift.cmp(&to) {
                std::cmp::Ordering::Greater => shr(v, shift - to),
                std::cmp::Ordering::Less => shl(v, to - shift),
                std::cmp::Ordering::Equal => v,
            };
            _mm256_and_si256(moved, mask)
        }
    }

    /// Two Q5 blocks' nibbles (as [`nibbles2`] gives them: `lo` weights
    /// 0..16 of the first block then of the second, `hi` weights 16..32)
    /// with each weight's fifth bit, from `qh0` and `qh1`, added as 16.
    ///
    /// # Safety
    /// As [`Mac::dot`].
    #[inline(always)]
    unsafe fn fifth_bits2(lo: __m256i, hi: __m256i, qh0: u32, qh1: u32) -> (__m256i, __m256i) {
        // SAFETY: as the trait's.
        unsafe {
            let bits = _mm256_set_m128i(_mm_set1_epi32(qh1 as i32), _mm_set1_epi32(qh0 as i32));
            // each lane's bytes 0..8 from qh's byte 0 (weights 0..16) or 2
            // (16..32), bytes 8..16 from byte 1 or 3
            let low = _mm256_set_epi64x(0x0101_0101_0101_0101, 0, 0x0101_0101_0101_0101, 0);
            let high = _mm256_add_epi8(low, _mm256_set1_epi8(2));
            (
                _mm256_or_si256(lo, sixteen_where_set(bits, low)),
                _mm256_or_si256(hi, sixteen_where_set(bits, high)),
            )
        }
    }
}

/// `vpmaddubsw` + `vpmaddwd`.
#[derive(Debug)]
pub(crate) struct Avx2Mac;

impl Mac for Avx2Mac {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: callers run inlined into an AVX2 function.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        // SAFETY: callers run inlined into an AVX2 function.
        unsafe {
            let sc = _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16));
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc)
        }
    }
}

/// `vpdpbusd` in its VEX form (AVX-VNNI: Intel's client cores from Alder
/// Lake, AMD's from Zen 5), for CPUs without AVX-512: the same i32 lanes
/// as [`Avx2Mac`] in one instruction. Sub-block scales keep riding in
/// `vpmaddwd` ([`Avx2Mac::dot_scaled`]): `vpdpbusd` would need a `vpmulld`
/// for them.
#[derive(Debug)]
pub(crate) struct AvxVnniMac;

impl Mac for AvxVnniMac {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: callers run inlined into an AVX2 + AVX-VNNI function.
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        // SAFETY: as `dot` (AVX2 is part of it).
        unsafe { Avx2Mac::dot_scaled(u, s, lo, hi) }
    }

    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
    }

    #[inline(always)]
    unsafe fn dot2(u0: __m256i, s0: __m256i, u1: __m256i, s1: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { Self::dot_acc(Self::dot(u0, s0), u1, s1) }
    }
}

/// Signed weights `x` times activations `a`, through [`Mac::dot`].
#[inline(always)]
unsafe fn dot_signed<M: Mac>(x: __m256i, a: __m256i) -> __m256i {
    // SAFETY: callers run inlined into an AVX2 function.
    unsafe { M::dot(_mm256_abs_epi8(x), _mm256_sign_epi8(a, x)) }
}

/// Signed weights `x` times activations `a`, through [`Mac::dot_scaled`].
#[inline(always)]
unsafe fn dot_signed_scaled<M: Mac>(x: __m256i, a: __m256i, lo: i32, hi: i32) -> __m256i {
    // SAFETY: callers run inlined into an AVX2 function.
    unsafe { M::dot_scaled(_mm256_abs_epi8(x), _mm256_sign_epi8(a, x), lo, hi) }
}

#[inline(always)]
pub(crate) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: callers pass 32 readable bytes (a block field or code run).
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Activation codes 32·i.. of a Q8_K block.
#[inline(always)]
pub(crate) unsafe fn act(a: &BlockQ8K, i: usize) -> __m256i {
    // SAFETY: i < 8, so 32 bytes lie inside `qs`.
    unsafe { load(a.qs.as_ptr().add(32 * i).cast()) }
}

/// Bytes of `v` shifted right by `n` bits (as 16-bit lanes: callers mask).
#[inline(always)]
unsafe fn shr(v: __m256i, n: i32) -> __m256i {
    // SAFETY: callers run inlined into an AVX2 function.
    unsafe { _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)) }
}

/// The two little-endian f16 at `p` (4 bytes inside one block) widened with
/// F16C into lanes 0 and 1 (lanes 2, 3 zero). Written as `asm!` because
/// LLVM, seeing one lane used, narrows the intrinsics' load to a 16-bit
/// insert into whatever register is at hand, often the accumulator, which
/// chains every block's scale on the previous block's sum (a 4x slowdown
/// of the 32-weight types); `vmovd` from memory zeroes the register.
#[inline(always)]
unsafe fn f16x2(p: *const u8) -> __m128 {
    let out: __m128;
    // SAFETY: callers pass 4 readable bytes and run inlined into F16C code.
    unsafe {
        std::arch::asm!(
            "vmovd {o}, dword ptr [{p}]",
            "vcvtph2ps {o}, {o}",
            p = in(reg) p,
            o = out(xmm_reg) out,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    out
}

/// Lane `L` of `v` in all 8 lanes.
#[inline(always)]
pub(crate) unsafe fn lane<const L: i32>(v: __m128) -> __m256 {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        match L {
            0 => _mm256_broadcastss_ps(v),
            _ => _mm256_broadcastss_ps(_mm_shuffle_ps::<0b0101_0101>(v, v)),
        }
    }
}

/// A block's f16 pair at byte `at` times the activation scale `da`.
#[inline(always)]
pub(crate) unsafe fn scales_at<B>(w: &B, at: usize, da: f32) -> __m128 {
    // SAFETY: callers pass `at + 4 <= size_of::<B>()`.
    unsafe {
        _mm_mul_ps(
            f16x2(std::ptr::from_ref(w).cast::<u8>().add(at)),
            _mm_set1_ps(da),
        )
    }
}

/// Bytes of `v` shifted left by `n` bits (as 16-bit lanes: callers mask).
#[inline(always)]
unsafe fn shl(v: __m256i, n: i32) -> __m256i {
    // SAFETY: callers run inlined into an AVX2 function.
    unsafe { _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)) }
}

#[inline(always)]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: callers run inlined into an AVX2 function.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }
}

/// The eight (scale, min) pairs of a Q4_K/Q5_K block at once: bytes 0..8
/// of the result are the scales, 8..16 the mins (what
/// [`super::super::kquants::scale_min_k4`] gives one by one).
#[inline(always)]
pub(crate) fn scales_k4(s: &[u8; 12]) -> [u8; 16] {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let out = [
        w0 & LOW6,
        (w2 & LOW4) | ((w0 >> 6) & LOW2) << 4,
        w1 & LOW6,
        ((w2 >> 4) & LOW4) | ((w1 >> 6) & LOW2) << 4,
    ];
    let mut b = [0u8; 16];
    for (b, w) in b.chunks_exact_mut(4).zip(out) {
        b.copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// The sixteen 6-bit scales of a Q3_K block, biased by 32, as four
/// little-endian words of four (scale s in byte s % 4 of word s / 4; what
/// [`super::super::kquants::scale_k3`] gives one by one, plus 32).
#[inline(always)]
pub(crate) fn scales_k3(s: &[u8; 12]) -> [u32; 4] {
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, top) = (word(0), word(1), word(2));
    [
        (w0 & LOW4) | (top & LOW2) << 4,
        (w1 & LOW4) | ((top >> 2) & LOW2) << 4,
        ((w0 >> 4) & LOW4) | ((top >> 4) & LOW2) << 4,
        ((w1 >> 4) & LOW4) | ((top >> 6) & LOW2) << 4,
    ]
}

/// A block's sixteen per-16 scales (i8 in `sc`) as `vpmaddwd` operands:
/// vector p (p < 8) holds scale 2p in its low 128 bits and 2p + 1 in its
/// high ones, as i16 (what weights 32p..32p + 32 take). Two permutes and
/// eight byte shuffles, instead of building each from scalars.
#[inline(always)]
unsafe fn scale_pairs(sc: __m128i) -> [__m256i; 8] {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let v = _mm256_cvtepi8_epi16(sc);
        let halves = [
            _mm256_permute2x128_si256::<0x00>(v, v),
            _mm256_permute2x128_si256::<0x11>(v, v),
        ];
        std::array::from_fn(|p| {
            let s = (p % 4) as i16;
            let pick = |e: i16| _mm_set1_epi16(((2 * e + 1) << 8) | (2 * e));
            let mask = _mm256_set_m128i(pick(2 * s + 1), pick(2 * s));
            _mm256_shuffle_epi8(halves[p / 4], mask)
        })
    }
}

/// `Σ u·s` per 4 bytes times the i16 scales of `sc` (AVX2: the pairs of
/// `vpmaddubsw` fit i16 for every weight here).
#[inline(always)]
unsafe fn madd_scaled(u: __m256i, s: __m256i, sc: __m256i) -> __m256i {
    // SAFETY: inlined into AVX2 code.
    unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc) }
}

/// Q2_K · Q8_K (AVX2 only: its per-16 scales ride in `vpmaddwd`; the
/// VNNI table takes this kernel too).
#[inline(always)]
pub(crate) unsafe fn q2_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    // SAFETY: inlined into an AVX2 + F16C function; every load is 32 bytes
    // inside a block field (16 for `scales`, 4 for the f16 pair).
    unsafe {
        let (m3, m4) = (_mm256_set1_epi8(3), _mm_set1_epi8(0x0F));
        let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (w, a) in w.iter().zip(a) {
            prefetch_block(w, ONE_ROW_AHEAD);
            let sc = _mm_loadu_si128(w.scales.as_ptr().cast());
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
            let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bs));
            let dd = scales_at(w, 80, a.d); // (d, dmin) · d_a
            acc_m = _mm256_fmadd_ps(lane::<1>(dd), m, acc_m);
            let scv = scale_pairs(_mm_and_si128(sc, m4));
            let mut isum = _mm256_setzero_si256();
            for h in 0..2 {
                let q = load(w.qs.as_ptr().add(32 * h));
                for s in 0..4 {
                    let u = _mm256_and_si256(shr(q, 2 * s as i32), m3);
                    let p = madd_scaled(u, act(a, 4 * h + s), scv[4 * h + s]);
                    isum = _mm256_add_epi32(isum, p);
                }
            }
            acc = _mm256_fmadd_ps(lane::<0>(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        hsum(acc) - hsum(acc_m)
    }
}

/// One Q3_K block's integer sum against its Q8_K block, 8 i32 lanes.
#[inline(always)]
unsafe fn q3_k_block<M: Mac>(w: &BlockQ3K, a: &BlockQ8K, bs: __m256i) -> __m256i {
    // SAFETY: as `q2_k`.
    unsafe {
        let [s0, s1, s2, s3] = scales_k3(&w.scales).map(|v| v as i32);
        let sc = _mm_sub_epi8(_mm_set_epi32(s3, s2, s1, s0), _mm_set1_epi8(32));
        let scv = scale_pairs(sc);
        // A weight is `u - 4` with `u` = low bits | high bit · 4 (0..8):
        // the codes meet the activations unsigned and -4 · Σ sc_j · bsum_j
        // (spread over 8 lanes) takes the offset out, as Q6_K's 32.
        let isum = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bs), 2),
        );
        let hm = load(w.hmask.as_ptr());
        // two chains of sums, so that a fused multiply-add's latency is
        // not the block's critical path
        let mut chains = [_mm256_setzero_si256(); 2];
        for h in 0..2 {
            let q = load(w.qs.as_ptr().add(32 * h));
            for s in 0..4 {
                let low = M::bits(q, 2 * s as i32, 2, 0);
                // the high bit: bit 4h + s of each hmask byte
                let high = M::bits(hm, (4 * h + s) as i32, 1, 2);
                let u = _mm256_or_si256(low, high);
                let p = _mm256_maddubs_epi16(u, act(a, 4 * h + s));
                chains[s & 1] = M::pairs_acc(chains[s & 1], p, scv[4 * h + s]);
            }
        }
        _mm256_add_epi32(isum, _mm256_add_epi32(chains[0], chains[1]))
    }
}

/// A k-quant whose codes carry an offset rather than a min (Q3_K, Q6_K):
/// a block's product is one i32 sum against the activations' block sums,
/// scaled by `d · d_a`.
pub(crate) trait OffsetK {
    /// The byte offset of the block's f16 `d`.
    const D_AT: usize;

    /// The block's integer sum against `a`, its offset taken out with
    /// `bs` (`a`'s 16 block sums).
    ///
    /// # Safety
    /// `M`'s ISA must be enabled in the caller.
    unsafe fn isum<M: Mac>(&self, a: &BlockQ8K, bs: __m256i) -> __m256i;
}

impl OffsetK for BlockQ3K {
    const D_AT: usize = 106;

    #[inline(always)]
    unsafe fn isum<M: Mac>(&self, a: &BlockQ8K, bs: __m256i) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { q3_k_block::<M>(self, a, bs) }
    }
}

impl OffsetK for BlockQ6K {
    const D_AT: usize = 206;

    #[inline(always)]
    unsafe fn isum<M: Mac>(&self, a: &BlockQ8K, bs: __m256i) -> __m256i {
        // SAFETY: as the trait's.
        unsafe { q6_k_block::<M>(self, a, bs) }
    }
}

/// Q3_K or Q6_K · Q8_K (AVX2 only, as Q2_K).
#[inline(always)]
pub(crate) unsafe fn offset_k<B: OffsetK>(w: &[B], a: &[BlockQ8K]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            let d = lane::<1>(scales_at(w, B::D_AT, a.d));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(w.isum::<Avx2Mac>(a, bs)), acc);
        }
        hsum(acc)
    }
}

/// The mins term of a Q4_K/Q5_K block: `Σ m_j · (bsum 2j + bsum 2j+1)`, as
/// 4 i32 lanes converted to f32.
#[inline(always)]
unsafe fn mins_k4(mins: &[u8], a: &BlockQ8K) -> __m128 {
    // SAFETY: `mins` has 8 bytes, `bsums` 32; inlined into AVX2 code.
    unsafe {
        let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
        let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        let m = _mm_cvtepu8_epi16(_mm_loadl_epi64(mins.as_ptr().cast()));
        _mm_cvtepi32_ps(_mm_madd_epi16(pairs, m))
    }
}

/// One Q4_K block against its Q8_K block: the integer sum (8 i32 lanes),
/// the mins term (4 f32 lanes, before `dmin`) and (d, dmin) · d_a.
#[inline(always)]
unsafe fn q4_k_block<M: Mac>(w: &BlockQ4K, a: &BlockQ8K) -> (__m256i, __m128, __m128) {
    // SAFETY: as `q2_k`.
    unsafe {
        let sm = scales_k4(&w.scales);
        let dd = scales_at(w, 0, a.d); // (d, dmin) · d_a
        let mins = mins_k4(&sm[8..], a);
        let mut isum = _mm256_setzero_si256();
        for k in 0..4 {
            let q = load(w.qs.as_ptr().add(32 * k));
            let lo = M::bits(q, 0, 4, 0);
            let hi = M::bits(q, 4, 4, 0);
            let (s0, s1) = (i32::from(sm[2 * k]), i32::from(sm[2 * k + 1]));
            let p0 = M::dot_scaled(lo, act(a, 2 * k), s0, s0);
            let p1 = M::dot_scaled(hi, act(a, 2 * k + 1), s1, s1);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        (isum, mins, dd)
    }
}

/// Q4_K · Q8_K.
#[inline(always)]
pub(crate) unsafe fn q4_k<M: Mac>(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm_setzero_ps());
        for (w, a) in w.iter().zip(a) {
            let (isum, mins, dd) = q4_k_block::<M>(w, a);
            let dmin = _mm_shuffle_ps::<0b0101_0101>(dd, dd);
            acc_m = _mm_fmadd_ps(dmin, mins, acc_m);
            acc = _mm256_fmadd_ps(lane::<0>(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        hsum(acc) - _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)))
    }
}

/// Q5_K · Q8_K.
#[inline(always)]
pub(crate) unsafe fn q5_k<M: Mac>(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let (m4, one) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
        let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm_setzero_ps());
        for (w, a) in w.iter().zip(a) {
            prefetch_block(w, ONE_ROW_AHEAD);
            let sm = scales_k4(&w.scales);
            let dd = scales_at(w, 0, a.d); // (d, dmin) · d_a
            let dmin = _mm_shuffle_ps::<0b0101_0101>(dd, dd);
            acc_m = _mm_fmadd_ps(dmin, mins_k4(&sm[8..], a), acc_m);
            let qh = load(w.qh.as_ptr());
            let mut isum = _mm256_setzero_si256();
            for k in 0..4 {
                let q = load(w.qs.as_ptr().add(32 * k));
                let h0 = _mm256_and_si256(shr(qh, 2 * k as i32), one);
                let h1 = _mm256_and_si256(shr(qh, 2 * k as i32 + 1), one);
                let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h0, 4));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                    _mm256_slli_epi16(h1, 4),
                );
                let (s0, s1) = (i32::from(sm[2 * k]), i32::from(sm[2 * k + 1]));
                let p0 = M::dot_scaled(lo, act(a, 2 * k), s0, s0);
                let p1 = M::dot_scaled(hi, act(a, 2 * k + 1), s1, s1);
                isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
            }
            let d = lane::<0>(dd);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
        }
        let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        hsum(acc) - _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)))
    }
}

/// One Q6_K block's integer sum against its Q8_K block (whose `bsums`
/// are `bs`), 8 i32 lanes: codes 0..64 unsigned, the -32 paid from the
/// block sums.
#[inline(always)]
unsafe fn q6_k_block<M: Mac>(w: &BlockQ6K, a: &BlockQ8K, bs: __m256i) -> __m256i {
    // SAFETY: as `q2_k`.
    unsafe {
        let sc = _mm_loadu_si128(w.scales.as_ptr().cast());
        let scv = scale_pairs(sc);
        // -32 · Σ sc_j · bsum_j, spread over 8 lanes
        let isum = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bs), 5),
        );
        let mut chains = [_mm256_setzero_si256(); 2]; // as Q3_K's
        for h in 0..2 {
            let q0 = load(w.ql.as_ptr().add(64 * h));
            let q1 = load(w.ql.as_ptr().add(64 * h + 32));
            let qh = load(w.qh.as_ptr().add(32 * h));
            for s in 0..4 {
                let src = if s & 1 == 0 { q0 } else { q1 };
                let low = M::bits(src, 4 * (s as i32 / 2), 4, 0);
                let high = M::bits(qh, 2 * s as i32, 2, 4);
                let u = _mm256_or_si256(low, high);
                let p = _mm256_maddubs_epi16(u, act(a, 4 * h + s));
                chains[s & 1] = M::pairs_acc(chains[s & 1], p, scv[4 * h + s]);
            }
        }
        _mm256_add_epi32(isum, _mm256_add_epi32(chains[0], chains[1]))
    }
}

/// The IQ4 grid in both 128-bit lanes.
#[inline(always)]
unsafe fn iq4_lut() -> __m256i {
    // SAFETY: the table is 16 bytes; inlined into AVX2 code.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast())) }
}

/// 16 nibble-packed bytes as 32 codes (low nibbles first), looked up in `lut`.
#[inline(always)]
unsafe fn nibbles(qs: *const u8, lut: __m256i) -> __m256i {
    // SAFETY: 16 readable bytes at `qs`; inlined into AVX2 code.
    unsafe {
        let q = _mm_loadu_si128(qs.cast());
        let m4 = _mm_set1_epi8(0x0F);
        let c = _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(q, 4), m4),
            _mm_and_si128(q, m4),
        );
        _mm256_shuffle_epi8(lut, c)
    }
}

/// IQ4_XS · Q8_K.
#[inline(always)]
pub(crate) unsafe fn iq4_xs<M: Mac>(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let lut = iq4_lut();
        let mut acc = _mm256_setzero_ps();
        for (w, a) in w.iter().zip(a) {
            prefetch_block(w, ONE_ROW_AHEAD);
            let scales_h = u16::from_le_bytes(w.scales_h);
            let mut isum = _mm256_setzero_si256();
            for j in 0..8 {
                let low = (w.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
                let ls = i32::from(low) | i32::from((scales_h >> (2 * j)) & 3) << 4;
                let x = nibbles(w.qs.as_ptr().add(16 * j), lut);
                let p = dot_signed_scaled::<M>(x, act(a, j), ls - 32, ls - 32);
                isum = _mm256_add_epi32(isum, p);
            }
            let d = lane::<0>(scales_at(w, 0, a.d));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
        }
        hsum(acc)
    }
}

/// One 32-weight block (signed codes `x`, f16 scale at `wd`, the first of
/// the block's bytes) against a Q8_0 block, scaled.
#[inline(always)]
unsafe fn block_q8_0<M: Mac>(x: __m256i, wd: *const u8, a: &BlockQ8_0, acc: __m256) -> __m256 {
    // SAFETY: inlined into AVX2 + F16C code; `a.qs` is 32 bytes.
    unsafe {
        let p = dot_signed::<M>(x, load(a.qs.as_ptr()));
        let d = lane::<0>(_mm_mul_ss(f16x2(wd), f16x2(a.d.as_ptr())));
        _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc)
    }
}

/// `Σ body(w_i, a_i, acc)` over a row's blocks, even blocks into one
/// accumulator and odd into another: a Q8_0 block is little work beside
/// its FMA, so on one chain each block waits on the last one's FMA (Zen 4,
/// one core, cache-resident Q8_0 rows of 2048 and 7168 columns: 27-29
/// GB/s on one chain, 33-35 on two). A macro, not a function taking a
/// closure: a closure does not take its caller's target features, and its
/// intrinsics would become calls.
macro_rules! two_chains {
    ($w:expr, $a:expr, |$wb:ident, $ab:ident, $acc:ident| $body:expr) => {{
        let (wp, ap) = ($w.chunks_exact(2), $a.chunks_exact(2));
        let (wr, ar) = (wp.remainder(), ap.remainder());
        let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (w2, a2) in wp.zip(ap) {
            even = {
                let ($wb, $ab, $acc) = (&w2[0], &a2[0], even);
                $body
            };
            odd = {
                let ($wb, $ab, $acc) = (&w2[1], &a2[1], odd);
                $body
            };
        }
        if let (Some($wb), Some($ab)) = (wr.first(), ar.first()) {
            let $acc = even;
            even = $body;
        }
        hsum(_mm256_add_ps(even, odd))
    }};
}

/// Q8_0 · Q8_0.
#[inline(always)]
pub(crate) unsafe fn q8_0<M: Mac>(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        two_chains!(w, a, |w, a, acc| {
            block_q8_0::<M>(load(w.qs.as_ptr()), w.d.as_ptr(), a, acc)
        })
    }
}

/// Q4_0 · Q8_0.
#[inline(always)]
pub(crate) unsafe fn q4_0<M: Mac>(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let (m4, eight) = (_mm_set1_epi8(0x0F), _mm256_set1_epi8(8));
        two_chains!(w, a, |w, a, acc| {
            let q = _mm_loadu_si128(w.qs.as_ptr().cast());
            let c = _mm256_set_m128i(
                _mm_and_si128(_mm_srli_epi16(q, 4), m4),
                _mm_and_si128(q, m4),
            );
            block_q8_0::<M>(_mm256_sub_epi8(c, eight), w.d.as_ptr(), a, acc)
        })
    }
}

/// IQ4_NL · Q8_0.
#[inline(always)]
pub(crate) unsafe fn iq4_nl<M: Mac>(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: as `q2_k`.
    unsafe {
        let lut = iq4_lut();
        two_chains!(w, a, |w, a, acc| {
            block_q8_0::<M>(nibbles(w.qs.as_ptr(), lut), w.d.as_ptr(), a, acc)
        })
    }
}

/// `#[target_feature]` wrappers over a row's bytes: `$name(row, acts)` runs
/// `$body::<$mac>` (a body in scope where the macro is used) on the row
/// viewed as blocks.
macro_rules! wrappers {
    ($features:literal; $($name:ident = $body:ident($block:ty, $act:ty);)*) => {$(
        /// # Safety
        /// The wrapper's target features must be available; `row` holds
        /// whole blocks, as many as `acts`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(row: &[u8], acts: &[$act]) -> f32 {
            let w: &[$block] = crate::ggml::blocks(row).expect("a ggml row holds whole blocks");
            debug_assert_eq!(w.len(), acts.len());
            // SAFETY: this function's features are the body's ISA.
            unsafe { $body(w, acts) }
        }
    )*};
    ($features:literal, $mac:ty; $($name:ident = $body:ident($block:ty, $act:ty);)*) => {$(
        /// # Safety
        /// The wrapper's target features must be available; `row` holds
        /// whole blocks, as many as `acts`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(row: &[u8], acts: &[$act]) -> f32 {
            let w: &[$block] = crate::ggml::blocks(row).expect("a ggml row holds whole blocks");
            debug_assert_eq!(w.len(), acts.len());
            // SAFETY: this function's features are the body's ISA.
            unsafe { $body::<$mac>(w, acts) }
        }
    )*};
}
pub(crate) use wrappers;

wrappers! {"avx2,fma,f16c";
    q2_k_q8k = q2_k(BlockQ2K, BlockQ8K);
    q3_k_q8k = offset_k(BlockQ3K, BlockQ8K);
    q6_k_q8k = offset_k(BlockQ6K, BlockQ8K);
}

wrappers! {"avx2,fma,f16c", Avx2Mac;
    q4_k_q8k = q4_k(BlockQ4K, BlockQ8K);
    q5_k_q8k = q5_k(BlockQ5K, BlockQ8K);
    iq4_xs_q8k = iq4_xs(BlockIq4Xs, BlockQ8K);
    q8_0_q8_0 = q8_0(BlockQ8_0, BlockQ8_0);
    q4_0_q8_0 = q4_0(BlockQ4_0, BlockQ8_0);
    iq4_nl_q8_0 = iq4_nl(BlockIq4Nl, BlockQ8_0);
    q5_0_q8_0 = one_row(BlockQ5_0, BlockQ8_0);
    q4_1_q8_0 = one_row(BlockQ4_1, BlockQ8_0);
    q5_1_q8_0 = one_row(BlockQ5_1, BlockQ8_0);
    mxfp4_q8_0 = one_row(BlockMxfp4, BlockQ8_0);
}

/// `$body` once for each row `$r` in 0..R (R ≤ 4 a constant), written
/// out rather than looped: each row's loads are then their own
/// instructions, each walking its row at a constant stride, which is
/// what the CPU's per-instruction stride prefetcher follows (a loop over
/// rows sends one load instruction jumping between four rows, and the
/// products of weights streamed from RAM ran at half the speed).
macro_rules! unroll_rows {
    ($n:expr, $r:ident => $body:block) => {{
        {
            let $r = 0;
            $body
        }
        if $n > 1 {
            let $r = 1;
            $body
        }
        if $n > 2 {
            let $r = 2;
            $body
        }
        if $n > 3 {
            let $r = 3;
            $body
        }
    }};
}
pub(crate) use unroll_rows;

/// Asks for the cache lines of the block `ahead` bytes past `w` (the
/// wrappers pass the same block of the row two groups of four rows
/// later): rows of a few blocks end before a stride prefetcher catches
/// on, and one core's plain read runs short of the memory's bandwidth
/// (`waste bench kernels` streaming, Q4_K 2048x768: 10.6 GB/s one group
/// ahead, 12.6 two groups ahead).
#[inline(always)]
pub(crate) unsafe fn prefetch_block<B>(w: &B, ahead: usize) {
    if ahead == 0 {
        return; // none asked
    }
    let p = std::ptr::from_ref(w).cast::<u8>().wrapping_add(ahead);
    crate::dense::prefetch_lines(p, std::mem::size_of::<B>());
}

/// Q4_K · Q8_K for `R` rows at once: [`q4_k`]'s block body, rows written
/// out (see [`unroll_rows`]). (Picking a row's scales by `vpshufb` from
/// one widened vector, as the 512-bit kernel does, ran 0.63-0.83 x the
/// scalar broadcasts here on AVX2.)
#[inline(always)]
pub(crate) unsafe fn q4_k_rows<const R: usize>(
    w: [&[BlockQ4K]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q2_k`.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let (isum, mins, dd) = q4_k_block::<Avx2Mac>(w, a);
                let dmin = _mm_shuffle_ps::<0b0101_0101>(dd, dd);
                acc_m[r] = _mm_fmadd_ps(dmin, mins, acc_m[r]);
                acc[r] = _mm256_fmadd_ps(lane::<0>(dd), _mm256_cvtepi32_ps(isum), acc[r]);
            });
        }
        for r in 0..R {
            let m = _mm_add_ps(acc_m[r], _mm_movehl_ps(acc_m[r], acc_m[r]));
            out[r] = hsum(acc[r]) - _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));
        }
    }
}

/// Q3_K or Q6_K · Q8_K for `R` rows at once: each block's `bsums` loaded
/// once for all R rows (the activation codes stay in L1 between rows).
#[inline(always)]
pub(crate) unsafe fn offset_k_rows<B: OffsetK, M: Mac, const R: usize>(
    w: [&[B]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q2_k`.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let d = lane::<1>(scales_at(w, B::D_AT, a.d));
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(w.isum::<M>(a, bs)), acc[r]);
            });
        }
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
    }
}

/// A 32-weight block that meets Q8_0 activations, as [`q8_0_rows`] sees it.
pub(crate) trait RowBlockQ8_0 {
    /// What an unsigned code exceeds its weight by (Q4_0: codes `q + 8`,
    /// Q5_0: `q + 16`): the codes meet the activations unsigned and
    /// `OFFSET · Σa` is taken off per block (once per activation block for
    /// all rows), instead of the sign trick. 0: the codes are the signed
    /// weights, or (with [`Self::MIN`]) unsigned with a min.
    const OFFSET: i8;
    /// The block holds an f16 min right after its f16 scale (Q4_1, Q5_1:
    /// `w = d·q + m`, q unsigned): per block `(m·d_a)·Σa` is added beside
    /// `(d·d_a)·Σ q·a`.
    const MIN: bool;
    /// The block's 32 codes: unsigned (`q + OFFSET`, or `q` with a min)
    /// where [`Self::OFFSET`] or [`Self::MIN`] say so, else the signed
    /// weights (`lut`: IQ4_NL's values, [`iq4_lut`]).
    ///
    /// # Safety
    /// Inlined into AVX2 code.
    unsafe fn codes(&self, lut: __m256i) -> __m256i;
    /// The block's f16 scale, its first two bytes (4 readable; with a min,
    /// bytes 2..4 are it); MXFP4's E8M0 exponent byte, read only through
    /// [`Self::scales`].
    fn d(&self) -> *const u8;
    /// The scale (lane 0) and, with [`Self::MIN`], the min (lane 1) as f32.
    ///
    /// # Safety
    /// Inlined into AVX2 + F16C code.
    #[inline(always)]
    unsafe fn scales(&self) -> __m128 {
        // SAFETY: 4 readable bytes at `d` (the method's contract).
        unsafe { f16x2(self.d()) }
    }
    /// The scales of eight blocks as f32, in
    /// [`crate::quant::avx2::ROWS8_LANE`]'s order (blocks 0, 2, 4, 6, 1,
    /// 3, 5, 7): the f16 at [`Self::d`] widened unless the type says
    /// otherwise.
    ///
    /// # Safety
    /// Inlined into AVX2 + F16C code.
    #[inline(always)]
    unsafe fn scales8(b: [&Self; 8]) -> __m256
    where
        Self: Sized,
    {
        // SAFETY: the caller's.
        unsafe { f16s8(b, 0) }
    }
    /// The table [`Self::codes`] looks nibbles up in: IQ4_NL's values
    /// unless the type says otherwise.
    ///
    /// # Safety
    /// Inlined into AVX2 code.
    #[inline(always)]
    unsafe fn lut() -> __m256i {
        // SAFETY: the caller's.
        unsafe { iq4_lut() }
    }
}

/// The f16 at byte `at` past [`RowBlockQ8_0::d`] of eight blocks as f32,
/// in [`crate::quant::avx2::ROWS8_LANE`]'s order.
///
/// # Safety
/// Inlined into AVX2 + F16C code; 2 readable bytes there in each block.
#[inline(always)]
unsafe fn f16s8<B: RowBlockQ8_0>(b: [&B; 8], at: usize) -> __m256 {
    let f = |r: usize| -> i16 {
        // SAFETY: the function's contract.
        i16::from_le_bytes(unsafe { std::ptr::read_unaligned(b[r].d().add(at).cast::<[u8; 2]>()) })
    };
    // SAFETY: inlined into AVX2 + F16C code.
    unsafe {
        _mm256_cvtph_ps(_mm_setr_epi16(
            f(0),
            f(2),
            f(4),
            f(6),
            f(1),
            f(3),
            f(5),
            f(7),
        ))
    }
}

/// MXFP4: IQ4_NL's layout under an E8M0 exponent, its nibbles through
/// ggml's doubled E2M1 values, the exponent halved to undo the doubling
/// ([`e8m0_half`], exact: a power of two).
impl RowBlockQ8_0 for BlockMxfp4 {
    const OFFSET: i8 = 0;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(&self, lut: __m256i) -> __m256i {
        // SAFETY: the block's 16 code bytes; inlined into AVX2 code.
        unsafe { nibbles(self.qs.as_ptr(), lut) }
    }
    #[inline(always)]
    fn d(&self) -> *const u8 {
        self.e.as_ptr()
    }
    #[inline(always)]
    unsafe fn scales(&self) -> __m128 {
        // SAFETY: inlined into AVX2 code.
        unsafe { _mm_set_ss(e8m0_half(self.e[0])) }
    }
    #[inline(always)]
    unsafe fn scales8(b: [&Self; 8]) -> __m256 {
        let f = |r: usize| e8m0_half(b[r].e[0]);
        // SAFETY: inlined into AVX2 code.
        unsafe { _mm256_setr_ps(f(0), f(2), f(4), f(6), f(1), f(3), f(5), f(7)) }
    }
    #[inline(always)]
    unsafe fn lut() -> __m256i {
        // SAFETY: the table is 16 bytes; inlined into AVX2 code.
        unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_MXFP4.as_ptr().cast())) }
    }
}

/// 16 nibble-packed bytes as 32 unsigned codes, low nibbles first.
#[inline(always)]
unsafe fn nibble_codes(qs: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes at `qs`; inlined into AVX2 code.
    unsafe {
        let q = _mm_loadu_si128(qs.cast());
        let m4 = _mm_set1_epi8(0x0F);
        _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(q, 4), m4),
            _mm_and_si128(q, m4),
        )
    }
}

/// A Q5 block's 32 codes: its nibbles with bit j of `qh` as weight j's
/// fifth bit ([`sixteen_where_set`]).
#[inline(always)]
unsafe fn five_bit_codes(qh: [u8; 4], qs: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes at `qs`; inlined into AVX2 code.
    unsafe {
        let byte_of_bit = _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        );
        let bits = _mm256_set1_epi32(i32::from_le_bytes(qh));
        _mm256_or_si256(nibble_codes(qs), sixteen_where_set(bits, byte_of_bit))
    }
}

/// `impl RowBlockQ8_0` for a block type: its constants and the body of
/// its `codes` (`$b` the block, `$lut` the table).
macro_rules! row_block {
    ($($block:ty: offset $offset:expr, min $min:expr, |$b:ident, $lut:ident| $codes:expr;)*) => {$(
        impl RowBlockQ8_0 for $block {
            const OFFSET: i8 = $offset;
            const MIN: bool = $min;
            #[inline(always)]
            unsafe fn codes(&self, $lut: __m256i) -> __m256i {
                let $b = self;
                // SAFETY: the fields read are the block's own; inlined
                // into AVX2 code.
                unsafe { $codes }
            }
            #[inline(always)]
            fn d(&self) -> *const u8 {
                self.d.as_ptr()
            }
        }
    )*};
}

row_block! {
    BlockQ8_0: offset 0, min false, |b, _lut| load(b.qs.as_ptr());
    BlockQ4_0: offset 8, min false, |b, _lut| nibble_codes(b.qs.as_ptr());
    BlockIq4Nl: offset 0, min false, |b, lut| nibbles(b.qs.as_ptr(), lut);
    BlockQ5_0: offset 16, min false, |b, _lut| five_bit_codes(b.qh, b.qs.as_ptr());
    BlockQ4_1: offset 0, min true, |b, _lut| nibble_codes(b.qs.as_ptr());
    BlockQ5_1: offset 0, min true, |b, _lut| five_bit_codes(b.qh, b.qs.as_ptr());
}

/// `R` rows of a Q8_0-paired type (Q8_0, Q4_0, IQ4_NL, Q5_0, Q4_1, Q5_1)
/// times one Q8_0 activation row: each activation block loaded and its
/// scale widened once for the R rows, two accumulators per row (even and
/// odd blocks, as [`two_chains`]). Per row the same operations in the same
/// order as [`q8_0`], [`q4_0`] and [`iq4_nl`], so each result is theirs
/// bit for bit (Q4_0's `Σ (q − 8)·a` is the same integer either way); the
/// one-row kernel of Q5_0, Q4_1 and Q5_1 ([`one_row`]).
#[inline(always)]
pub(crate) unsafe fn q8_0_rows<B: RowBlockQ8_0, M: Mac, const R: usize>(
    w: [&[B]; R],
    acts: &[BlockQ8_0],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q2_k`; a prefetch never faults.
    unsafe {
        let lut = B::lut();
        // a macro, not a closure: a closure does not take this function's
        // target features, and its intrinsics would become calls
        macro_rules! block {
            ($b:expr, $acc:ident) => {{
                let b = $b;
                let a = &acts[b];
                let av = load(a.qs.as_ptr());
                let da = f16x2(a.d.as_ptr());
                // `OFFSET · Σa`, or with a min `Σa` (as f32 too), per
                // lane: the same for every row
                let a_off = if B::OFFSET != 0 {
                    M::dot(_mm256_set1_epi8(B::OFFSET), av)
                } else if B::MIN {
                    M::dot(_mm256_set1_epi8(1), av)
                } else {
                    _mm256_setzero_si256()
                };
                let (asum, da_all) = if B::MIN {
                    (_mm256_cvtepi32_ps(a_off), _mm_broadcastss_ps(da))
                } else {
                    (_mm256_setzero_ps(), da)
                };
                unroll_rows!(R, r => {
                    let w = &w[r][b];
                    _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(w).cast::<i8>().wrapping_add(ahead));
                    let x = w.codes(lut);
                    let p = if B::OFFSET != 0 {
                        _mm256_sub_epi32(M::dot(x, av), a_off)
                    } else if B::MIN {
                        M::dot(x, av)
                    } else {
                        dot_signed::<M>(x, av)
                    };
                    if B::MIN {
                        // lanes (d·d_a, m·d_a); the block's sum formed
                        // apart from the accumulator, one add on its chain
                        let dm = _mm_mul_ps(w.scales(), da_all);
                        let v = _mm256_fmadd_ps(
                            lane::<1>(dm),
                            asum,
                            _mm256_mul_ps(lane::<0>(dm), _mm256_cvtepi32_ps(p)),
                        );
                        $acc[r] = _mm256_add_ps($acc[r], v);
                    } else {
                        let d = lane::<0>(_mm_mul_ss(w.scales(), da));
                        $acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), $acc[r]);
                    }
                });
            }};
        }
        let (mut even, mut odd) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        let mut b = 0;
        while b + 2 <= acts.len() {
            block!(b, even);
            block!(b + 1, odd);
            b += 2;
        }
        if b < acts.len() {
            block!(b, even);
        }
        for r in 0..R {
            out[r] = hsum(_mm256_add_ps(even[r], odd[r]));
        }
    }
}

/// One row of a Q8_0-paired type through [`q8_0_rows`] (the row kernel of
/// the types whose blocks need its offset or min terms: Q5_0, Q4_1, Q5_1),
/// asking for its blocks [`ONE_ROW_AHEAD`] bytes ahead.
#[inline(always)]
pub(crate) unsafe fn one_row<M: Mac>(w: &[impl RowBlockQ8_0], acts: &[BlockQ8_0]) -> f32 {
    let mut out = [0f32];
    // SAFETY: the caller's (as `q2_k`).
    unsafe { q8_0_rows::<_, M, 1>([w], acts, ONE_ROW_AHEAD, &mut out) };
    out[0]
}

/// A Q8_0-paired block of 16 nibble bytes (Q4_0, IQ4_NL; Q5_0, Q4_1 and
/// Q5_1, whose fifth bits or mins come on top): weight `j` in the low
/// nibble of byte `j`, weight `j + 16` in its high nibble.
pub(crate) trait NibbleBlock: RowBlockQ8_0 {
    /// The 16 nibble bytes.
    fn qs(&self) -> *const u8;
    /// The codes of two blocks, [`nibble_rows8`]'s operands: weights 0..16
    /// of `w0` then of `w1`, and weights 16..32 of each (the 4-bit types'
    /// nibbles, the Q5 types' with their fifth bits).
    ///
    /// # Safety
    /// Inlined into AVX2 code.
    #[inline(always)]
    unsafe fn pair<M: Mac>(w0: &Self, w1: &Self) -> (__m256i, __m256i) {
        // SAFETY: 16 nibble bytes in each block.
        unsafe { nibbles2(w0.qs(), w1.qs()) }
    }
}

/// `impl NibbleBlock` for block types with a `qs` field; `fifth bits`:
/// with the Q5 types' `qh` on top.
macro_rules! nibble_block {
    ($($block:ty;)*) => {$(
        impl NibbleBlock for $block {
            #[inline(always)]
            fn qs(&self) -> *const u8 {
                self.qs.as_ptr()
            }
        }
    )*};
    ($($block:ty: fifth bits;)*) => {$(
        impl NibbleBlock for $block {
            #[inline(always)]
            fn qs(&self) -> *const u8 {
                self.qs.as_ptr()
            }
            #[inline(always)]
            unsafe fn pair<M: Mac>(w0: &Self, w1: &Self) -> (__m256i, __m256i) {
                // SAFETY: as the trait's.
                unsafe {
                    let (lo, hi) = nibbles2(w0.qs(), w1.qs());
                    M::fifth_bits2(lo, hi, u32::from_le_bytes(w0.qh), u32::from_le_bytes(w1.qh))
                }
            }
        }
    )*};
}

nibble_block! {
    BlockQ4_0;
    BlockIq4Nl;
    BlockMxfp4;
    BlockQ4_1;
}
nibble_block! {
    BlockQ5_0: fifth bits;
    BlockQ5_1: fifth bits;
}

/// 16 in byte `j` of each lane where bit `j % 8` of byte `idx[j]` of that
/// lane of `bits` is set, else 0 (ggml's `bytes_from_bits_32`: the byte
/// spread by a shuffle, every other bit set by an OR, then a compare).
#[inline(always)]
unsafe fn sixteen_where_set(bits: __m256i, idx: __m256i) -> __m256i {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let spread = _mm256_shuffle_epi8(bits, idx);
        let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
        let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// Eight rows of a 4-bit Q8_0-paired type against one activation row, two
/// rows to a register (row `2p` in the low 128 bits, `2p + 1` in the high):
/// per block the eight integer sums are reduced to one vector of eight
/// rows, so the scales are widened, multiplied and accumulated once for
/// the eight (the per-row scale work is what bounds [`q8_0_rows`] on these
/// 18-byte blocks). Lane `l` of the accumulator holds row
/// [`crate::quant::avx2::ROWS8_LANE`]`[l]`. The integer sums are the one-row kernels';
/// the f32 order differs (one FMA of each block's row total). Block `b`
/// of row `i` is at `rows[i] + b · stride` (in blocks): 1 row-major, 16
/// on rows interleaved by sixteen. The blocks' products are added to
/// `acc` (lanes as [`store_rows8`] takes them), so a row may be taken in
/// runs of blocks in the order of one pass.
///
/// # Safety
/// AVX2, FMA, F16C and `M`'s ISA must be enabled in the caller; every
/// block `rows[i] + b · stride` for `b < acts.len()` lies inside one
/// matrix.
#[inline(always)]
pub(crate) unsafe fn nibble_rows8<B: NibbleBlock, M: Mac>(
    rows: [*const B; 8],
    stride: usize,
    acts: &[BlockQ8_0],
    ahead: usize,
    acc: &mut __m256,
) {
    // SAFETY: as `q2_k`; a prefetch never faults; every block has 16
    // nibble bytes and its scale (an f16 followed by readable bytes, or
    // MXFP4's exponent byte, read by `scales8`).
    unsafe {
        let lut = B::lut();
        for (b, a) in acts.iter().enumerate() {
            let alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.qs.as_ptr().cast()));
            let ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.qs.as_ptr().add(16).cast()));
            let mut s = [_mm256_setzero_si256(); 4];
            let block = |r: usize| -> &B { &*rows[r].add(b * stride) };
            for (p, s) in s.iter_mut().enumerate() {
                let (w0, w1) = (block(2 * p), block(2 * p + 1));
                _mm_prefetch::<_MM_HINT_T0>(
                    std::ptr::from_ref(w0).cast::<i8>().wrapping_add(ahead),
                );
                _mm_prefetch::<_MM_HINT_T0>(
                    std::ptr::from_ref(w1).cast::<i8>().wrapping_add(ahead),
                );
                let (lo, hi) = B::pair::<M>(w0, w1);
                *s = if B::OFFSET != 0 || B::MIN {
                    // q·a pairs ≤ 2·31·127: two of them still fit an i16.
                    M::dot2(lo, alo, hi, ahi)
                } else {
                    let (xl, xh) = (_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
                    _mm256_add_epi32(dot_signed::<M>(xl, alo), dot_signed::<M>(xh, ahi))
                };
            }
            let h = sum_rows8(s);
            // `OFFSET · Σ a` (Q4_0, Q5_0) or `Σ a` (with mins), in every lane
            let a_off = if B::OFFSET != 0 || B::MIN {
                let k = if B::MIN { 1 } else { B::OFFSET };
                let a8 = M::dot(_mm256_set1_epi8(k), load(a.qs.as_ptr()));
                let t = _mm_add_epi32(_mm256_castsi256_si128(a8), _mm256_extracti128_si256(a8, 1));
                let t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
                let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0b01>(t));
                _mm256_broadcastd_epi32(t)
            } else {
                _mm256_setzero_si256()
            };
            // Σ (q − 8)·a = Σ q·a − 8·Σ a, the same for every row.
            let h = if B::OFFSET != 0 {
                _mm256_sub_epi32(h, a_off)
            } else {
                h
            };
            let da = lane::<0>(f16x2(a.d.as_ptr()));
            let blocks = std::array::from_fn(&block);
            let d = B::scales8(blocks);
            *acc = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(h), *acc);
            if B::MIN {
                // each row's `m · d_a · Σ a`, the min right after the scale
                let sum = _mm256_cvtepi32_ps(a_off);
                *acc = _mm256_fmadd_ps(_mm256_mul_ps(f16s8(blocks, 2), da), sum, *acc);
            }
        }
    }
}

/// Blocks of a group of sixteen interleaved rows that [`nibble_rows8`]
/// takes for one half of it before the other half (9 KiB of the group's
/// bytes: the second half finds them in L1; a whole row of 7168 columns
/// each, the group's 64 KiB came back from L2, 0.8 x row-major there).
const INTERLEAVED_RUN: usize = 32;

/// The `#[target_feature]` wrappers of the 4-bit Q8_0-paired types: rows
/// eight at a time ([`nibble_rows8`]), then four and the rest
/// ([`q8_0_rows`]).
macro_rules! nibble_rows_wrappers {
    ($features:literal, $mac:ty; $($name:ident = $block:ty, interleaved $il:literal;)*) => {$(
        /// # Safety
        /// The wrapper's target features must be available; `w` holds
        /// `out.len()` rows of `rb` bytes, each as many whole blocks as
        /// `acts` (interleaved by sixteen where the name says, from a
        /// group's first row).
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(w: &[u8], rb: usize, acts: &[BlockQ8_0], out: &mut [f32]) {
            let row = |r: usize| -> &[$block] {
                let w: &[$block] =
                    crate::ggml::blocks(&w[r * rb..][..rb]).expect("a ggml row holds whole blocks");
                assert_eq!(w.len(), acts.len(), "row and activations disagree");
                w
            };
            // SAFETY: this function's features are the bodies' ISA; the
            // blocks each call reads lie in its rows (sized by `row`, or a
            // group's 16 rows of `rb` bytes).
            unsafe {
                let mut r = 0;
                if $il {
                    let bs = std::mem::size_of::<$block>();
                    assert!(rb == acts.len() * bs && w.len() >= out.len() * rb, "rows and activations disagree");
                    while r + 16 <= out.len() {
                        let group = w.as_ptr().add(r * rb).cast::<$block>();
                        let mut acc = [_mm256_setzero_ps(); 2];
                        for c0 in (0..acts.len()).step_by(INTERLEAVED_RUN) {
                            let run = &acts[c0..(c0 + INTERLEAVED_RUN).min(acts.len())];
                            for (half, acc) in acc.iter_mut().enumerate() {
                                let first = group.add(16 * c0 + 8 * half);
                                let rows = std::array::from_fn(|i| first.add(i));
                                // one stream: the hardware's to follow
                                // (see `avx512::nibble_rows16`)
                                nibble_rows8::<$block, $mac>(rows, 16, run, 0, acc);
                            }
                        }
                        store_rows8(acc[0], &mut out[r..]);
                        store_rows8(acc[1], &mut out[r + 8..]);
                        r += 16;
                    }
                }
                while r + 8 <= out.len() {
                    let rows = std::array::from_fn(|i| row(r + i).as_ptr());
                    let mut acc = _mm256_setzero_ps();
                    // two groups of eight ahead, as `prefetch_block`
                    nibble_rows8::<$block, $mac>(rows, 1, acts, 16 * rb, &mut acc);
                    store_rows8(acc, &mut out[r..]);
                    r += 8;
                }
                if r + 4 <= out.len() {
                    q8_0_rows::<$block, $mac, 4>([row(r), row(r + 1), row(r + 2), row(r + 3)], acts, 0, &mut out[r..]);
                    r += 4;
                }
                match out.len() - r {
                    0 => {}
                    1 => q8_0_rows::<$block, $mac, 1>([row(r)], acts, 0, &mut out[r..]),
                    2 => q8_0_rows::<$block, $mac, 2>([row(r), row(r + 1)], acts, 0, &mut out[r..]),
                    _ => q8_0_rows::<$block, $mac, 3>([row(r), row(r + 1), row(r + 2)], acts, 0, &mut out[r..]),
                }
            }
        }
    )*};
}

nibble_rows_wrappers! {"avx2,fma,f16c", Avx2Mac;
    q5_0_rows8_q8_0 = BlockQ5_0, interleaved false;
    q4_1_rows8_q8_0 = BlockQ4_1, interleaved false;
    q5_1_rows8_q8_0 = BlockQ5_1, interleaved false;
    q4_0_rows8_q8_0 = BlockQ4_0, interleaved false;
    iq4_nl_rows8_q8_0 = BlockIq4Nl, interleaved false;
    mxfp4_rows8_q8_0 = BlockMxfp4, interleaved false;
    q4_0_rows8_interleaved_q8_0 = BlockQ4_0, interleaved true;
    iq4_nl_rows8_interleaved_q8_0 = BlockIq4Nl, interleaved true;
    mxfp4_rows8_interleaved_q8_0 = BlockMxfp4, interleaved true;
}

/// How far ahead of the block it reads a kernel that walks a matrix one
/// row at a time prefetches: rows lie back to back, so this is one linear
/// stream, and a few KiB cover the memory's latency. (Zen 3, one core,
/// `waste bench kernels` streaming: Q6_K 151936x2048 13.2-14.6 GB/s at
/// 2-8 KiB against 10.6-11.5 without the prefetch and 9.7-10.7 four rows
/// at a time; Q5_K 1.13-1.24 x, Q2_K 1.02-1.12 x and IQ4_XS 1.07-1.10 x
/// their row kernels without it. The lattice IQ types, bound by their
/// table lookups, ran 0.95-1.0 x with it and go without. The VNNI table
/// runs these Q2_K, Q5_K and IQ4_XS row bodies too, so it prefetches the
/// same; that is not measured on an AVX-512 machine.)
pub(crate) const ONE_ROW_AHEAD: usize = 4096;

/// `#[target_feature]` wrappers of the multi-row bodies over a matrix's
/// bytes (a [`super::RowsQ8K`]): rows of `rb` bytes back to back, four at
/// a time, then the rest; or, where a row is shorter than `$four_from`
/// bytes, one at a time with a linear prefetch `$one_ahead` bytes ahead
/// ([`ONE_ROW_AHEAD`]; 0: none): four
/// short rows are four short streams, each over before the per-block
/// prefetch of [`prefetch_block`] has run far enough ahead, and one stream
/// is what the memory serves fastest. `$body<$g,>` names the body's type
/// parameters before its row count.
macro_rules! rows_wrappers {
    ($features:literal; $($name:ident = $body:ident<$($g:ty,)*>($block:ty, $act:ty), four rows from $four_from:expr, one row ahead $one_ahead:expr;)*) => {$(
        /// # Safety
        /// The wrapper's target features must be available; `w` holds
        /// `out.len()` rows of `rb` bytes, each as many whole blocks as
        /// `acts`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            w: &[u8],
            rb: usize,
            acts: &[$act],
            out: &mut [f32],
        ) {
            let row = |r: usize| -> &[$block] {
                let w: &[$block] = crate::ggml::blocks(&w[r * rb..][..rb])
                    .expect("a ggml row holds whole blocks");
                assert_eq!(w.len(), acts.len(), "row and activations disagree");
                w
            };
            // SAFETY: this function's features are the body's ISA.
            unsafe {
                let mut r = 0;
                let four_from: usize = $four_from;
                if rb < four_from {
                    let ahead: usize = $one_ahead;
                    while r < out.len() {
                        $body::<$($g,)* 1>([row(r)], acts, ahead, &mut out[r..]);
                        r += 1;
                    }
                    return;
                }
                // see `prefetch_block`
                let ahead = 8 * rb;
                while r + 4 <= out.len() {
                    let w = [row(r), row(r + 1), row(r + 2), row(r + 3)];
                    $body::<$($g,)* 4>(w, acts, ahead, &mut out[r..]);
                    r += 4;
                }
                match out.len() - r {
                    0 => {}
                    1 => $body::<$($g,)* 1>([row(r)], acts, 0, &mut out[r..]),
                    2 => $body::<$($g,)* 2>([row(r), row(r + 1)], acts, 0, &mut out[r..]),
                    _ => $body::<$($g,)* 3>([row(r), row(r + 1), row(r + 2)], acts, 0, &mut out[r..]),
                }
            }
        }
    )*};
}
pub(crate) use rows_wrappers;

// On AVX2 a k-quant block is enough arithmetic that the activation loads
// four rows share save little, while one stream reads faster (Zen 3, one
// core, streaming, every shape of 768-7168 columns: Q6_K 1.1-1.4 x, Q4_K
// 1.0-1.25 x, Q3_K 1.0-1.4 x four rows at a time); Q8_0's cheap blocks
// gain from four long rows (2048x7168: 17.4-19.0 GB/s four at a time,
// 13.1-15.9 one) and lose on short ones (2048x768: 9.1-10.1 against
// 13.0-14.9).
rows_wrappers! {"avx2,fma,f16c";
    q4_k_rows_q8k = q4_k_rows<>(BlockQ4K, BlockQ8K), four rows from usize::MAX, one row ahead ONE_ROW_AHEAD;
    q6_k_rows_q8k = offset_k_rows<BlockQ6K, Avx2Mac,>(BlockQ6K, BlockQ8K), four rows from usize::MAX, one row ahead ONE_ROW_AHEAD;
    q3_k_rows_q8k = offset_k_rows<BlockQ3K, Avx2Mac,>(BlockQ3K, BlockQ8K), four rows from usize::MAX, one row ahead ONE_ROW_AHEAD;
    q8_0_rows_q8_0 = q8_0_rows<BlockQ8_0, Avx2Mac,>(BlockQ8_0, BlockQ8_0), four rows from 4096, one row ahead ONE_ROW_AHEAD;
}

// The AVX-VNNI table's (`avx2-vnni`, CPUs with AVX-VNNI and no AVX-512):
// the bodies above on [`AvxVnniMac`], for the types where one `vpdpbusd`
// per 32 weights beat `vpmaddubsw` + `vpmaddwd` (docs/BENCH.md,
// "AVX-VNNI"); the others keep the AVX2 kernels there.
wrappers! {"avx2,fma,f16c,avxvnni", AvxVnniMac;
    q8_0_q8_0_avx_vnni = q8_0(BlockQ8_0, BlockQ8_0);
    q4_0_q8_0_avx_vnni = q4_0(BlockQ4_0, BlockQ8_0);
    iq4_nl_q8_0_avx_vnni = iq4_nl(BlockIq4Nl, BlockQ8_0);
    q5_0_q8_0_avx_vnni = one_row(BlockQ5_0, BlockQ8_0);
    q4_1_q8_0_avx_vnni = one_row(BlockQ4_1, BlockQ8_0);
    q5_1_q8_0_avx_vnni = one_row(BlockQ5_1, BlockQ8_0);
    mxfp4_q8_0_avx_vnni = one_row(BlockMxfp4, BlockQ8_0);
}

rows_wrappers! {"avx2,fma,f16c,avxvnni";
    q8_0_rows_q8_0_avx_vnni = q8_0_rows<BlockQ8_0, AvxVnniMac,>(BlockQ8_0, BlockQ8_0), four rows from 4096, one row ahead ONE_ROW_AHEAD;
}

nibble_rows_wrappers! {"avx2,fma,f16c,avxvnni", AvxVnniMac;
    q5_0_rows8_q8_0_avx_vnni = BlockQ5_0, interleaved false;
    q4_1_rows8_q8_0_avx_vnni = BlockQ4_1, interleaved false;
    q5_1_rows8_q8_0_avx_vnni = BlockQ5_1, interleaved false;
    q4_0_rows8_q8_0_avx_vnni = BlockQ4_0, interleaved false;
    iq4_nl_rows8_q8_0_avx_vnni = BlockIq4Nl, interleaved false;
    mxfp4_rows8_q8_0_avx_vnni = BlockMxfp4, interleaved false;
    q4_0_rows8_interleaved_q8_0_avx_vnni = BlockQ4_0, interleaved true;
    iq4_nl_rows8_interleaved_q8_0_avx_vnni = BlockIq4Nl, interleaved true;
    mxfp4_rows8_interleaved_q8_0_avx_vnni = BlockMxfp4, interleaved true;
}

/// A group's eight (scale, min) pairs of Q4_K, one row to a 32-bit lane,
/// from the block's three scale words `w0`, `w1`, `w2` (as `scales_k4`
/// takes them, lane-wise): the scales 0..4 and 4..8 and the mins 0..4 and
/// 4..8, one 6-bit field per byte. Also the 512-bit kernel's.
macro_rules! k4_fields {
    ($and:ident, $srli:ident, $select:expr, $set1:ident, $w0:expr, $w1:expr, $w2:expr) => {{
        let (low6, low4) = ($set1(0x3f3f_3f3f), $set1(0x0f0f_0f0f));
        let (w0, w1, w2) = ($w0, $w1, $w2);
        // bits 0..4 from the third word, 4..6 from bits 6..8 of the first
        // or second (two below, once shifted), and no higher
        let high = |lo4, top| $and($select(low4, lo4, $srli::<2>(top)), low6);
        (
            $and(w0, low6),
            high(w2, w0),
            $and(w1, low6),
            high($srli::<4>(w2), w1),
        )
    }};
}
pub(crate) use k4_fields;

/// The f16 in the low half of each 32-bit lane of `v`, as f32 (a
/// word-major block column's `d` for eight rows).
#[inline(always)]
unsafe fn low_f16_lanes(v: __m256i) -> __m256 {
    // SAFETY: register operations only; inlined into AVX2 + F16C code.
    unsafe {
        let v = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
        let packed = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        _mm256_cvtph_ps(packed)
    }
}

/// `vpshufb` patterns: pattern `s` puts byte `s` of each 32-bit lane
/// into both its i16 words (zero-extended).
const WORD_BYTE_PICKS: [[i8; 32]; 4] = {
    let mut p = [[-1i8; 32]; 4];
    let mut s = 0;
    while s < 4 {
        let mut i = 0;
        while i < 32 {
            if i % 2 == 0 {
                p[s][i] = (i / 4 % 4 * 4 + s) as i8;
            }
            i += 1;
        }
        s += 1;
    }
    p
};

/// Activation rows the AVX2 word-major kernels meet at once: the decoded
/// words and scales of a block column serve them all. Past these the
/// sums spill from the sixteen registers: Q4_K ran 0.90-0.93 x at four
/// against three, IQ4_XS 1.05-1.06 x at four (docs/BENCH.md).
const Q4_K_WORD_TOKENS: usize = 3;
const IQ4_XS_WORD_TOKENS: usize = 4;

/// A word-major product's operands and shapes ([`RowsTokensQ8K`]):
/// `tokens` activation rows of `nb` blocks, `rows` weight rows of `rb`
/// bytes in `groups` whole groups of sixteen and a tail.
///
/// [`RowsTokensQ8K`]: super::RowsTokensQ8K
#[derive(Clone, Copy)]
pub(crate) struct Words<'a> {
    pub w: &'a [u8],
    pub rb: usize,
    pub nb: usize,
    pub rows: usize,
    pub groups: usize,
    pub tokens: usize,
    pub acts: &'a [BlockQ8K],
    /// How far past a block column's start to ask its lines into L1 before
    /// reading it, in bytes (0: none); on a group's first run of tokens
    /// only, the later runs finding the group in cache.
    pub ahead: usize,
}

impl<'a> Words<'a> {
    /// Checks the shapes of `out = w · acts` for blocks of `bs` bytes.
    pub(crate) fn new(
        w: &'a [u8],
        rb: usize,
        bs: usize,
        acts: &'a [BlockQ8K],
        out: &[f32],
    ) -> Self {
        let nb = rb / bs;
        assert!(
            nb > 0 && rb == nb * bs && acts.len().is_multiple_of(nb),
            "rows and activations disagree"
        );
        let tokens = acts.len() / nb;
        assert!(
            tokens > 0 && out.len().is_multiple_of(tokens),
            "one output row per activation row"
        );
        let rows = out.len() / tokens;
        assert!(w.len() >= rows * rb, "too few rows");
        Self {
            w,
            rb,
            nb,
            rows,
            groups: rows / 16,
            tokens,
            acts,
            ahead: 0,
        }
    }

    /// These words read with lines asked `bytes` ahead ([`Self::ahead`]).
    pub(crate) fn prefetching(self, bytes: usize) -> Self {
        Self {
            ahead: bytes,
            ..self
        }
    }

    /// `f(rows, acts, out)` for each activation row: the rows past the
    /// last group of sixteen, the token's blocks, its outputs for them.
    pub(crate) fn tail(&self, out: &mut [f32], mut f: impl FnMut(&[u8], &[BlockQ8K], &mut [f32])) {
        let r = 16 * self.groups;
        for (t, out) in out.chunks_exact_mut(self.rows).enumerate() {
            f(
                &self.w[r * self.rb..self.rows * self.rb],
                &self.acts[t * self.nb..][..self.nb],
                &mut out[r..],
            );
        }
    }
}

/// Runs `$body::<T>($s, $out, g, t0)` on every group `g` of sixteen rows
/// and every run `t0..t0 + T` of up to `$max` (at most 4) activation rows,
/// the runs inside the group so that its rows stay in the L1 cache across
/// them.
macro_rules! word_groups {
    ($s:expr, $max:expr, $body:ident, $out:expr) => {{
        let s = $s;
        for g in 0..s.groups {
            let mut t0 = 0;
            while t0 < s.tokens {
                let t = (s.tokens - t0).min($max);
                match t {
                    1 => $body::<1>(s, $out, g, t0),
                    2 => $body::<2>(s, $out, g, t0),
                    3 => $body::<3>(s, $out, g, t0),
                    _ => $body::<4>(s, $out, g, t0),
                }
                t0 += t;
            }
        }
    }};
}
pub(crate) use word_groups;

/// Q4_K · Q8_K on rows word-major by sixteen ([`RowLayout::Words16`]),
/// eight rows to a 256-bit vector, one row to a 32-bit lane, for one or
/// more activation rows ([`RowsTokensQ8K`]): word `j` of a block column is
/// one load per eight rows, its low and high nibbles met by the broadcast
/// activation words of their two sub-blocks in `vpmaddubsw`, eight such
/// summed in i16 (at most 8 · 2 · 15 · 127 = 30480) and then scaled and
/// widened by the sub-block's scales in `vpmaddwd`; the mins from the
/// block sums by `vpmaddwd`; no horizontal sums, and the nibbles and
/// scale fields decoded for eight rows and up to [`Q4_K_WORD_TOKENS`]
/// activation rows at once. Rows past the last sixteen go to
/// [`q4_k_rows_q8k`]. The integer sums are the row kernels'; the f32 order
/// differs.
///
/// [`RowLayout::Words16`]: crate::ggml::layout::RowLayout::Words16
/// [`RowsTokensQ8K`]: super::RowsTokensQ8K
///
/// # Safety
/// AVX2, FMA and F16C must be available; `w` holds the rows laid so from
/// a group's first row, each as many whole blocks as each activation row.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_rows16_words_q8k(
    w: &[u8],
    rb: usize,
    acts: &[BlockQ8K],
    out: &mut [f32],
) {
    const BS: usize = size_of::<BlockQ4K>();
    let s = Words::new(w, rb, BS, acts, out);

    /// The group `g`'s rows times the activation rows `t0..t0 + T`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn body<const T: usize>(s: Words<'_>, out: &mut [f32], g: usize, t0: usize) {
        let Words {
            w,
            rb,
            nb,
            rows,
            acts,
            ..
        } = s;
        let select = |m: __m256i, a: __m256i, b: __m256i| {
            _mm256_or_si256(_mm256_and_si256(m, a), _mm256_andnot_si256(m, b))
        };
        // SAFETY: the kernel's ISA; every load lies in the group's 16
        // rows (word j < 36 of a block column of 16 · 144 bytes), in
        // `acts` (token t0 + t < tokens, block b < nb), or on the
        // stack; every store in `out` (row 16g + 15 < rows).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let pick = |s: usize| _mm256_loadu_si256(WORD_BYTE_PICKS[s].as_ptr().cast());
            let low8 = _mm256_set1_epi32(0x00ff_00ff);
            let mut acc = [[_mm256_setzero_ps(); T]; 2];
            for b in 0..nb {
                let column = w.as_ptr().add(16 * g * rb + 16 * b * BS);
                let a: [&BlockQ8K; T] = std::array::from_fn(|t| &acts[(t0 + t) * nb + b]);
                let ap = a.map(|a| a.qs.as_ptr().cast::<i32>());
                for (half, acc) in acc.iter_mut().enumerate() {
                    let word = |j: usize| _mm256_loadu_si256(column.add(64 * j + 32 * half).cast());
                    let (sc_lo, sc_hi, mn_lo, mn_hi) = k4_fields!(
                        _mm256_and_si256,
                        _mm256_srli_epi32,
                        select,
                        _mm256_set1_epi32,
                        word(1),
                        word(2),
                        word(3)
                    );
                    let mut tot = [_mm256_setzero_si256(); T];
                    for k in 0..4 {
                        let mut lo = [_mm256_setzero_si256(); T];
                        let mut hi = [_mm256_setzero_si256(); T];
                        for j in 0..8 {
                            let q = word(4 + 8 * k + j);
                            let l = _mm256_and_si256(q, m4);
                            let h = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                            for t in 0..T {
                                let al = _mm256_set1_epi32(ap[t].add(16 * k + j).read_unaligned());
                                let ah =
                                    _mm256_set1_epi32(ap[t].add(16 * k + 8 + j).read_unaligned());
                                lo[t] = _mm256_add_epi16(lo[t], _mm256_maddubs_epi16(l, al));
                                hi[t] = _mm256_add_epi16(hi[t], _mm256_maddubs_epi16(h, ah));
                            }
                        }
                        let sc = if k < 2 { sc_lo } else { sc_hi };
                        let (s0, s1) = (
                            _mm256_shuffle_epi8(sc, pick(2 * k % 4)),
                            _mm256_shuffle_epi8(sc, pick((2 * k + 1) % 4)),
                        );
                        for t in 0..T {
                            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(lo[t], s0));
                            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(hi[t], s1));
                        }
                    }
                    // Σ m_j · p_j: the mins as i16 pairs (j, j + 2)
                    // against the sums paired so
                    let mins_of = [mn_lo, mn_hi]
                        .map(|m| (_mm256_and_si256(m, low8), _mm256_srli_epi16::<8>(m)));
                    // (d, dmin) of the eight rows
                    let h = word(0);
                    let (d, dmin) = (low_f16_lanes(h), low_f16_lanes(_mm256_srli_epi32::<16>(h)));
                    for t in 0..T {
                        let bs = &a[t].bsums;
                        let p = |j: usize| i32::from(bs[2 * j]) + i32::from(bs[2 * j + 1]);
                        let pair = |j: usize| _mm256_set1_epi32((p(j) & 0xffff) | (p(j + 2) << 16));
                        let mut mins = _mm256_setzero_si256();
                        for (i, (even, odd)) in mins_of.into_iter().enumerate() {
                            let mn = |x, j| _mm256_madd_epi16(x, pair(j));
                            mins = _mm256_add_epi32(mins, mn(even, 4 * i));
                            mins = _mm256_add_epi32(mins, mn(odd, 4 * i + 1));
                        }
                        let da = _mm256_set1_ps(a[t].d);
                        acc[t] = _mm256_fmadd_ps(
                            _mm256_mul_ps(d, da),
                            _mm256_cvtepi32_ps(tot[t]),
                            acc[t],
                        );
                        acc[t] = _mm256_fnmadd_ps(
                            _mm256_mul_ps(dmin, da),
                            _mm256_cvtepi32_ps(mins),
                            acc[t],
                        );
                    }
                }
            }
            for (half, acc) in acc.into_iter().enumerate() {
                for (t, acc) in acc.into_iter().enumerate() {
                    let at = (t0 + t) * rows + 16 * g + 8 * half;
                    _mm256_storeu_ps(out.as_mut_ptr().add(at), acc);
                }
            }
        }
    }
    // SAFETY: this function's ISA.
    unsafe {
        word_groups!(s, Q4_K_WORD_TOKENS, body, &mut *out);
        s.tail(out, |w, a, o| q4_k_rows_q8k(w, rb, a, o));
    }
}

/// IQ4_XS · Q8_K on rows word-major by sixteen ([`RowLayout::Words16`]),
/// as [`q4_k_rows16_words_q8k`] lays the work out: word 0 of a block
/// column holds the rows' `d` and high scale bits, word 1 their low scale
/// bits, words 2-33 their codes; each word's nibbles looked up as signed
/// values, met by the broadcast activation words in `vpmaddubsw` (on their
/// magnitudes, the activations taking their signs: at most 2 · 127 · 127)
/// and scaled and widened at once by `vpmaddwd` with the sub-block's scale
/// in both i16 halves of each row's lane. Rows past the last sixteen go
/// one at a time ([`iq4_xs_q8k`]). The integer sums are the row kernels';
/// the f32 order differs.
///
/// [`RowLayout::Words16`]: crate::ggml::layout::RowLayout::Words16
///
/// # Safety
/// As [`q4_k_rows16_words_q8k`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_xs_rows16_words_q8k(
    w: &[u8],
    rb: usize,
    acts: &[BlockQ8K],
    out: &mut [f32],
) {
    const BS: usize = size_of::<BlockIq4Xs>();
    let s = Words::new(w, rb, BS, acts, out);

    /// The group `g`'s rows times the activation rows `t0..t0 + T`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn body<const T: usize>(s: Words<'_>, out: &mut [f32], g: usize, t0: usize) {
        let Words {
            w,
            rb,
            nb,
            rows,
            acts,
            ..
        } = s;
        // SAFETY: the kernel's ISA; every load lies in the group's 16
        // rows (word j < 34 of a block column of 16 · 136 bytes), in
        // `acts` (token t0 + t < tokens, block b < nb), or on the
        // stack; every store in `out` (row 16g + 15 < rows).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let lut = iq4_lut();
            let (low4, low2) = (_mm256_set1_epi32(15), _mm256_set1_epi32(3));
            let mut acc = [[_mm256_setzero_ps(); T]; 2];
            for b in 0..nb {
                let column = w.as_ptr().add(16 * g * rb + 16 * b * BS);
                let a: [&BlockQ8K; T] = std::array::from_fn(|t| &acts[(t0 + t) * nb + b]);
                let ap = a.map(|a| a.qs.as_ptr().cast::<i32>());
                for (half, acc) in acc.iter_mut().enumerate() {
                    let word = |j: usize| _mm256_loadu_si256(column.add(64 * j + 32 * half).cast());
                    let h = word(0);
                    // sub-block j's scale: bits 4j.. of word 1, 16 + 2j.. of word 0
                    let (mut lo, mut hi) = (word(1), _mm256_srli_epi32::<16>(h));
                    let mut tot = [_mm256_setzero_si256(); T];
                    for j in 0..8 {
                        let ls = _mm256_or_si256(
                            _mm256_and_si256(lo, low4),
                            _mm256_slli_epi32::<4>(_mm256_and_si256(hi, low2)),
                        );
                        let sc = _mm256_sub_epi16(
                            _mm256_or_si256(ls, _mm256_slli_epi32::<16>(ls)),
                            _mm256_set1_epi16(32),
                        );
                        (lo, hi) = (_mm256_srli_epi32::<4>(lo), _mm256_srli_epi32::<2>(hi));
                        for k in 0..4 {
                            let q = word(2 + 4 * j + k);
                            let xl = _mm256_shuffle_epi8(lut, _mm256_and_si256(q, m4));
                            let xh = _mm256_shuffle_epi8(
                                lut,
                                _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                            );
                            let (ml, mh) = (_mm256_abs_epi8(xl), _mm256_abs_epi8(xh));
                            for t in 0..T {
                                let al = _mm256_set1_epi32(ap[t].add(8 * j + k).read_unaligned());
                                let ah =
                                    _mm256_set1_epi32(ap[t].add(8 * j + 4 + k).read_unaligned());
                                let pl = _mm256_maddubs_epi16(ml, _mm256_sign_epi8(al, xl));
                                let ph = _mm256_maddubs_epi16(mh, _mm256_sign_epi8(ah, xh));
                                tot[t] = _mm256_add_epi32(
                                    tot[t],
                                    _mm256_add_epi32(
                                        _mm256_madd_epi16(pl, sc),
                                        _mm256_madd_epi16(ph, sc),
                                    ),
                                );
                            }
                        }
                    }
                    let d = low_f16_lanes(h);
                    for t in 0..T {
                        let d = _mm256_mul_ps(d, _mm256_set1_ps(a[t].d));
                        acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(tot[t]), acc[t]);
                    }
                }
            }
            for (half, acc) in acc.into_iter().enumerate() {
                for (t, acc) in acc.into_iter().enumerate() {
                    let at = (t0 + t) * rows + 16 * g + 8 * half;
                    _mm256_storeu_ps(out.as_mut_ptr().add(at), acc);
                }
            }
        }
    }
    // SAFETY: this function's ISA.
    unsafe {
        word_groups!(s, IQ4_XS_WORD_TOKENS, body, &mut *out);
        s.tail(out, |w, a, o| {
            for (r, o) in o.iter_mut().enumerate() {
                *o = iq4_xs_q8k(&w[r * rb..][..rb], a);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::kquants::{scale_k3, scale_min_k4};
    use super::*;

    #[test]
    fn word_scale_unpacking_is_the_scalar_one_for_every_byte_pattern() {
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            let mut b = [0u8; 12];
            for v in &mut b {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *v = (s >> 56) as u8;
            }
            let (k4, k3) = (scales_k4(&b), scales_k3(&b));
            for j in 0..8 {
                assert_eq!((k4[j], k4[8 + j]), scale_min_k4(j, &b), "{b:?} {j}");
            }
            for j in 0..16 {
                let v = (k3[j / 4] >> (8 * (j % 4))) as u8;
                assert_eq!(v as i8 - 32, scale_k3(j, &b), "{b:?} {j}");
            }
        }
    }

    /// The multi-row Q8_0-paired kernels of four rows and fewer give each
    /// row the one-row kernel's result bit for bit (Q8_0 at every row
    /// count; Q4_0 and IQ4_NL below eight rows: from eight on their rows go
    /// through `nibble_rows8`, whose f32 order differs and which
    /// tests/ggml_dot.rs holds to the scalar reference).
    #[test]
    fn q8_0_paired_multi_row_kernels_are_the_one_row_kernels_bit_for_bit() {
        if !(is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"))
        {
            eprintln!("SKIPPED: no AVX2/FMA/F16C");
            return;
        }
        let mut s = 0x0123_4567_89ab_cdefu64;
        let mut next = move || {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            s >> 24
        };
        // f16 scales of either sign in [2^-8, 2^-4): finite, normal.
        let f16 = move |r: u64| -> [u8; 2] {
            let bits = ((r & 1) << 15) | ((7 + (r >> 1) % 4) << 10) | ((r >> 8) & 0x3ff);
            (bits as u16).to_le_bytes()
        };
        let blocks = 5;
        let acts: Vec<BlockQ8_0> = (0..blocks)
            .map(|_| BlockQ8_0 {
                d: f16(next()),
                // -127..=127, as Q8_0's quantizer writes (never -128).
                qs: std::array::from_fn(|_| ((next() % 255) as i32 - 127) as i8 as u8),
            })
            .collect();
        type Rows = unsafe fn(&[u8], usize, &[BlockQ8_0], &mut [f32]);
        type One = unsafe fn(&[u8], &[BlockQ8_0]) -> f32;
        let all: &[usize] = &[1, 2, 3, 4, 5, 7, 9, 12];
        let below8: &[usize] = &[1, 2, 3, 4, 5, 6, 7];
        let kernels: [(&str, usize, Rows, One, &[usize]); 3] = [
            ("Q8_0", 34, q8_0_rows_q8_0, q8_0_q8_0, all),
            ("Q4_0", 18, q4_0_rows8_q8_0, q4_0_q8_0, below8),
            ("IQ4_NL", 18, iq4_nl_rows8_q8_0, iq4_nl_q8_0, below8),
        ];
        for (name, size, rows_kernel, one, counts) in kernels {
            for &rows in counts {
                let rb = blocks * size;
                let w: Vec<u8> = (0..rows * blocks)
                    .flat_map(|_| {
                        let mut b = f16(next()).to_vec();
                        b.extend((2..size).map(|_| next() as u8));
                        b
                    })
                    .collect();
                let mut got = vec![0f32; rows];
                // SAFETY: AVX2, FMA and F16C checked above; `w` holds
                // `rows` rows of `blocks` whole blocks, as many as `acts`.
                unsafe { rows_kernel(&w, rb, &acts, &mut got) };
                for (r, g) in got.iter().enumerate() {
                    // SAFETY: as above.
                    let want = unsafe { one(&w[r * rb..][..rb], &acts) };
                    assert_eq!(g.to_bits(), want.to_bits(), "{name} {rows} rows, row {r}");
                }
            }
        }
    }
}
