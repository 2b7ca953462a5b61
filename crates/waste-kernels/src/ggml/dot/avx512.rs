//! AVX-512 VNNI dot products of ggml weight rows: the AVX2 bodies of
//! `avx2.rs` with `vpdpbusd` (AVX512-VNNI + VL, on 256-bit vectors) as the
//! multiply-accumulate: one instruction per 32 weights instead of
//! `vpmaddubsw` + `vpmaddwd`, the same i32 lanes. Sub-block scales multiply
//! the i32 lanes (`vpmulld`) instead of riding in `vpmaddwd`.
//!
//! Q2_K, Q3_K and Q6_K (16-weight sub-blocks, their scales riding in
//! `vpmaddwd` after byte shuffles) take the AVX2 kernels in this table too:
//! `vpdpbusd` would need a `vpmulld` per 32 weights for the scales.
//! Without VNNI, the AVX-512 table takes the AVX2 kernels (as `quant`'s
//! does: F/BW/VL alone add nothing to these at 256 bits).
//!
//! The multi-row decode kernels of Q4_K, Q6_K and Q3_K (the tables'
//! `RowsQ8K`) run on 512-bit vectors in both AVX-512 tables: two 32-weight
//! sub-blocks per instruction, `vpmaddubsw` then the sub-blocks' scales as
//! i16 words applied and summed by [`Acc512`] (`vpdpwssd` with VNNI,
//! `vpmaddwd` + add without), four rows per call. On the VNNI table Q2_K
//! and Q3_K read a block's 64 `qs` bytes as one vector of four bit planes
//! against activations laid in that order once a call ([`plane_at`]),
//! which saves the shuffles that put two 32-byte halves together (Q3_K
//! one row at a time). Where 512-bit operations run as two halves Q3_K
//! and Q6_K decode one row at a time through the AVX2 bodies on
//! [`VnniGfniMac`] (the `_vnni256` kernels).

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::iquants::{BlockIq1M, BlockIq1S, BlockIq4Xs};
use super::super::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::super::legacy::{
    BlockIq4Nl, BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0,
};
use super::avx2::{
    Avx2Mac, Mac, NibbleBlock, iq4_nl, iq4_xs, offset_k_rows, one_row as one_row_body, one_row,
    prefetch_block, q4_0, q4_k, q5_k, q8_0, rows_wrappers, scales_at, scales_k4, unroll_rows,
    wrappers,
};
use super::avx2_iq::{iq1_m, iq1_s};

/// `vpdpbusd`.
#[derive(Debug)]
pub(crate) struct VnniMac;

impl Mac for VnniMac {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: callers run inlined into an AVX512-VNNI + VL function.
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        // SAFETY: callers run inlined into an AVX512-VNNI + VL function.
        unsafe {
            let sc = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
            _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), sc)
        }
    }

    /// The bits as byte masks, one masked `vpaddb` each (bit 4 is clear
    /// where it adds).
    #[inline(always)]
    unsafe fn fifth_bits2(lo: __m256i, hi: __m256i, qh0: u32, qh1: u32) -> (__m256i, __m256i) {
        // the low halves (weights 0..16) of both blocks, then the high ones
        let (low, high) = (
            (qh0 & 0xFFFF) | (qh1 << 16),
            (qh0 >> 16) | (qh1 & 0xFFFF_0000),
        );
        // SAFETY: callers run inlined into an AVX512-BW + VL function.
        unsafe {
            let sixteen = _mm256_set1_epi8(16);
            (
                _mm256_mask_add_epi8(lo, low, lo, sixteen),
                _mm256_mask_add_epi8(hi, high, hi, sixteen),
            )
        }
    }
}

/// VNNI and GFNI on 256-bit vectors, for the one-row Q3_K and Q6_K
/// kernels of CPUs that split 512-bit operations: sub-block scales as i16
/// words through `vpmaddubsw` + `vpdpwssd` (which LLVM may split back into
/// `vpmaddwd` + `vpaddd` where that shortens a chain), and a bit field
/// moved within its byte by one `vgf2p8affineqb` instead of a shift and a
/// mask. (Q4_K's bodies on it ran as the AVX2 ones: docs/BENCH.md, "K-quant
/// decode on 256-bit VNNI and GFNI".)
#[derive(Debug)]
pub(crate) struct VnniGfniMac;

/// The GF(2) matrix of `vgf2p8affineqb` that moves bits `shift..shift +
/// width` of a byte to `to..to + width` and clears the rest: output bit
/// `i` is the parity of the input masked by matrix byte `7 - i`.
const fn bit_move_matrix(shift: i32, width: i32, to: i32) -> i64 {
    let mut m = 0u64;
    let mut j = 0;
    while j < width {
        m |= (1u64 << (shift + j)) << (8 * (7 - (to + j)));
        j += 1;
    }
    m as i64
}

impl Mac for VnniGfniMac {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: callers run inlined into an AVX512-VNNI + VL function.
        unsafe { VnniMac::dot(u, s) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        // SAFETY: as `dot` (AVX2 is part of it).
        unsafe { Avx2Mac::dot_scaled(u, s, lo, hi) }
    }

    #[inline(always)]
    unsafe fn pairs_acc(acc: __m256i, p: __m256i, sc: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { _mm256_dpwssd_epi32(acc, p, sc) }
    }

    #[inline(always)]
    unsafe fn bits(v: __m256i, shift: i32, width: i32, to: i32) -> __m256i {
        // SAFETY: callers run inlined into a GFNI + AVX2 function.
        unsafe {
            if shift == to {
                // a plain mask runs on more ports than the affine
                Avx2Mac::bits(v, shift, width, to)
            } else {
                let m = _mm256_set1_epi64x(bit_move_matrix(shift, width, to));
                _mm256_gf2p8affine_epi64_epi8::<0>(v, m)
            }
        }
    }
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", VnniMac;
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
    iq1_s_q8k = iq1_s(BlockIq1S, BlockQ8K);
    iq1_m_q8k = iq1_m(BlockIq1M, BlockQ8K);
}

/// The 512-bit multiply-accumulate of the multi-row kernels: i16 pairs
/// (from `vpmaddubsw`) times i16 scales, summed into i32 lanes.
pub(crate) trait Acc512 {
    /// `acc + vpmaddwd(p, sc)`.
    ///
    /// # Safety
    /// The ISA of the implementation must be enabled in the caller.
    unsafe fn madd_acc(acc: __m512i, p: __m512i, sc: __m512i) -> __m512i;
}

/// AVX512BW: `vpmaddwd` + `vpaddd`.
#[derive(Debug)]
pub(crate) struct BwAcc;

impl Acc512 for BwAcc {
    #[inline(always)]
    unsafe fn madd_acc(acc: __m512i, p: __m512i, sc: __m512i) -> __m512i {
        // SAFETY: callers run inlined into an AVX512BW function.
        unsafe { _mm512_add_epi32(acc, _mm512_madd_epi16(p, sc)) }
    }
}

/// AVX512-VNNI: one `vpdpwssd`.
#[derive(Debug)]
pub(crate) struct VnniAcc;

impl Acc512 for VnniAcc {
    #[inline(always)]
    unsafe fn madd_acc(acc: __m512i, p: __m512i, sc: __m512i) -> __m512i {
        // SAFETY: callers run inlined into an AVX512-VNNI function.
        unsafe { _mm512_dpwssd_epi32(acc, p, sc) }
    }
}

/// The Q8_K activation codes 64·k.. (two 32-code sub-blocks).
#[inline(always)]
pub(crate) unsafe fn act64(a: &BlockQ8K, k: usize) -> __m512i {
    // SAFETY: k < 4, so 64 bytes lie inside `qs`.
    unsafe { _mm512_loadu_si512(a.qs.as_ptr().add(64 * k).cast()) }
}

/// `lo` in the low 256 bits of a 512-bit vector and `hi` above.
#[inline(always)]
pub(crate) unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: inlined into AVX-512F code.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// Q4_K · Q8_K for `R` rows at once (one activation row): each block's
/// activation codes are loaded once for all R rows, and its pair sums of
/// `bsums` computed once. Per row and 64 weights (a sub-block pair): one
/// 512-bit vector of both nibble planes, `vpmaddubsw` against the two
/// sub-blocks' codes, and the pair's two scales (a byte shuffle of the
/// row's eight) applied and summed by [`Acc512::madd_acc`].
#[inline(always)]
unsafe fn q4_k_rows<A: Acc512, const R: usize>(
    w: [&[BlockQ4K]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: inlined into an AVX512F/BW/VL + F16C function; every load is
    // inside a block field (64 bytes of `qs` per k < 4, 32 of the weights').
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        // Sub-block pair k: scale 2k in the low 256 bits, 2k + 1 above, as
        // i16 words picked out of each 128-bit lane's eight by `vpshufb`.
        let pick: [__m512i; 4] = std::array::from_fn(|k| {
            let w = |s: usize| _mm_set1_epi16((((2 * s + 1) << 8) | (2 * s)) as i16);
            let (lo, hi) = (w(2 * k), w(2 * k + 1));
            join(_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi))
        });
        let mut acc = [_mm512_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            let az: [__m512i; 4] = std::array::from_fn(|k| act64(a, k));
            let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            // bsum pair j: the sum of sub-block j's 32 codes
            let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let sm = scales_k4(&w.scales);
                let sm = _mm_loadu_si128(sm.as_ptr().cast());
                let dd = scales_at(w, 0, a.d); // (d, dmin) · d_a
                let mins = _mm_cvtepu8_epi16(_mm_srli_si128::<8>(sm));
                let m = _mm_cvtepi32_ps(_mm_madd_epi16(pairs, mins));
                acc_m[r] = _mm_fmadd_ps(_mm_shuffle_ps::<0b0101_0101>(dd, dd), m, acc_m[r]);
                let sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
                let mut isum = _mm512_setzero_si512();
                for (k, &ak) in az.iter().enumerate() {
                    let q = _mm256_loadu_si256(w.qs.as_ptr().add(32 * k).cast());
                    let z = _mm512_and_si512(join(q, _mm256_srli_epi16::<4>(q)), m4);
                    let sck = _mm512_shuffle_epi8(sc, pick[k]);
                    isum = A::madd_acc(isum, _mm512_maddubs_epi16(z, ak), sck);
                }
                let d = splat_lane::<0>(dd);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[r]);
            });
        }
        for r in 0..R {
            acc[r] = _mm512_sub_ps(acc[r], _mm512_zextps128_ps512(acc_m[r]));
        }
        row_sums(&acc, out);
    }
}

/// The low and high 256 bits of `v` added.
#[inline(always)]
unsafe fn half_sum(v: __m512) -> __m256 {
    // SAFETY: inlined into AVX-512F code.
    unsafe {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        _mm256_add_ps(_mm512_castps512_ps256(v), hi)
    }
}

/// Lane `L` of `v` in every lane of a 512-bit vector, through memory: a
/// broadcast load takes no shuffle slot where a register broadcast takes
/// one (docs/BENCH.md, "Which operations take a 512-bit shuffle slot on
/// Zen 5"); the volatile read keeps the compiler from forwarding the store
/// into a register broadcast.
#[inline(always)]
pub(crate) unsafe fn splat_lane<const L: usize>(v: __m128) -> __m512 {
    let mut slot = [0f32; 4];
    // SAFETY: 16 writable bytes, then lane L < 4 of them read; inlined
    // into AVX-512F code.
    unsafe {
        _mm_storeu_ps(slot.as_mut_ptr(), v);
        _mm512_set1_ps(slot.as_ptr().add(L).read_volatile())
    }
}

/// `out[r]` = the lane sum of `acc[r]`: four rows by one transposing tree
/// of adds (`vhaddps`) rather than four reductions, which on rows of a few
/// blocks are a noticeable share of the work.
#[inline(always)]
unsafe fn row_sums<const R: usize>(acc: &[__m512; R], out: &mut [f32]) {
    // SAFETY: inlined into AVX-512F code.
    unsafe {
        if R != 4 {
            for r in 0..R {
                out[r] = _mm512_reduce_add_ps(acc[r]);
            }
            return;
        }
        let a: &[__m512] = acc;
        let h = [
            half_sum(a[0]),
            half_sum(a[1]),
            half_sum(a[2]),
            half_sum(a[3]),
        ];
        // per 128-bit lane: the four rows' partial sums, in order
        let t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t));
        out[..4].copy_from_slice(&std::mem::transmute::<__m128, [f32; 4]>(t));
    }
}

/// Q6_K · Q8_K for `R` rows at once: per row and 64 weights, both halves
/// of a 64-byte `ql` run (low or high nibbles) with their two-bit planes
/// of `qh`, against two 32-code sub-blocks; the four per-16 scales those
/// 64 weights take, one per 128-bit lane, by one `vpermw`; the -32 offset
/// paid from the block sums as in the AVX2 kernel.
#[inline(always)]
unsafe fn q6_k_rows<A: Acc512, const R: usize>(
    w: [&[BlockQ6K]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q4_k_rows` (64 bytes of `ql` per h < 2, 32 of `qh`).
    unsafe {
        let (m4, m3) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(3));
        let idx = per16_index();
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            let az: [__m512i; 4] = std::array::from_fn(|k| act64(a, k));
            let bs = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.scales.as_ptr().cast()));
                // -32 · Σ sc_j · bsum_j, spread over 8 lanes
                let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bs));
                let mut isum =
                    _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
                let sc = _mm512_zextsi256_si512(sc);
                for h in 0..2 {
                    let ql = _mm512_loadu_si512(w.ql.as_ptr().add(64 * h).cast());
                    let qh = _mm256_loadu_si256(w.qh.as_ptr().add(32 * h).cast());
                    let qh = join(qh, _mm256_srli_epi16::<2>(qh));
                    for p in 0..2 {
                        let (low, high) = if p == 0 {
                            (ql, qh)
                        } else {
                            (_mm512_srli_epi16::<4>(ql), _mm512_srli_epi16::<4>(qh))
                        };
                        let u = _mm512_or_si512(
                            _mm512_and_si512(low, m4),
                            _mm512_slli_epi16::<4>(_mm512_and_si512(high, m3)),
                        );
                        let sck = _mm512_permutexvar_epi16(idx[2 * h + p], sc);
                        let pr = _mm512_maddubs_epi16(u, az[2 * h + p]);
                        isum = A::madd_acc(isum, pr, sck);
                    }
                }
                let dd = scales_at(w, 206, a.d); // (_, d) · d_a
                let d = splat_lane::<1>(dd);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[r]);
            });
        }
        row_sums(&acc, out);
    }
}

/// Word i of vector (h, p) names scale 8h + 4p + i / 8: the four per-16
/// scales of sub-blocks 4h + 2p and 4h + 2p + 1, one per 128-bit lane
/// (`vpermw` indices for the 16-weight-scale types).
#[inline(always)]
unsafe fn per16_index() -> [__m512i; 4] {
    // SAFETY: 64-byte loads of 32 i16; inlined into AVX-512F code.
    unsafe {
        std::array::from_fn(|hp| {
            let words: [i16; 32] = std::array::from_fn(|i| (4 * hp + i / 8) as i16);
            _mm512_loadu_si512(words.as_ptr().cast())
        })
    }
}

/// A Q3_K block's sixteen 6-bit scales as bytes (what [`super::avx2::scales_k3`] gives
/// as words, plus 32 each), unpacked in a vector: the low nibbles of bytes
/// 0..8, then their high nibbles, each with its two top bits from byte
/// `8 + j % 4` shifted by `2 (j / 4)`.
#[inline(always)]
unsafe fn scales_k3_vec(s: &[u8; 12]) -> __m128i {
    // SAFETY: an 8-byte and a 4-byte load inside `s`; inlined into
    // AVX2/AVX-512 code.
    unsafe {
        let m4 = _mm_set1_epi8(0x0F);
        let x = _mm_loadl_epi64(s.as_ptr().cast());
        let low = _mm_unpacklo_epi64(
            _mm_and_si128(x, m4),
            _mm_and_si128(_mm_srli_epi16::<4>(x), m4),
        );
        let top = _mm_set1_epi32(s.as_ptr().add(8).cast::<i32>().read_unaligned());
        let top = _mm_and_si128(
            _mm_srlv_epi32(top, _mm_set_epi32(6, 4, 2, 0)),
            _mm_set1_epi8(3),
        );
        _mm_or_si128(low, _mm_slli_epi16::<4>(top))
    }
}

/// Σ over a block's four runs of 64 weights of their 2-bit codes (two
/// planes of a 32-byte run of `qs`, as Q2_K lays its codes and Q3_K its
/// low bits) times the activation runs `az`, each 16 weights' sum times
/// its scale (the i16 words of `sc` that `idx` picks, [`per16_index`]);
/// where `hm` is given (Q3_K's `hmask`, sub-block k's bit at bit k in the
/// low half and k + 1's in the high half), each code with its high bit as
/// bit 2.
#[inline(always)]
unsafe fn planes_dot<A: Acc512>(
    qs: &[u8; 64],
    hm: Option<__m512i>,
    sc: __m512i,
    idx: &[__m512i; 4],
    az: &[__m512i; 4],
) -> __m512i {
    // SAFETY: 32-byte loads inside `qs`; inlined into AVX-512F/BW code.
    unsafe {
        let (m3, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
        let mut isum = _mm512_setzero_si512();
        for h in 0..2 {
            let q = _mm256_loadu_si256(qs.as_ptr().add(32 * h).cast());
            let q = join(q, _mm256_srli_epi16::<2>(q));
            for p in 0..2 {
                let low = if p == 0 { q } else { _mm512_srli_epi16::<4>(q) };
                let low = _mm512_and_si512(low, m3);
                let u = match hm {
                    Some(hm) => {
                        // bit 4h + 2p of each byte moved to bit 2
                        let at2 = match 2 * h + p {
                            0 => _mm512_slli_epi16::<2>(hm),
                            1 => hm,
                            2 => _mm512_srli_epi16::<2>(hm),
                            _ => _mm512_srli_epi16::<4>(hm),
                        };
                        // low | (at2 & 4)
                        _mm512_ternarylogic_epi32::<0xF8>(low, at2, four)
                    }
                    None => low,
                };
                let sck = _mm512_permutexvar_epi16(idx[2 * h + p], sc);
                isum = A::madd_acc(isum, _mm512_maddubs_epi16(u, az[2 * h + p]), sck);
            }
        }
        isum
    }
}

/// A Q3_K block's sixteen signed scales as i16 words (the low 256 bits),
/// and what its codes' offset of 4 adds against activation block sums
/// `bsums`: `4 Σ_j s_j Σ a_j`, in the low eight i32 lanes (one
/// `vpmaddwd`), for the caller to take off once a block.
#[inline(always)]
unsafe fn q3_k_scales(w: &BlockQ3K, bsums: __m256i) -> (__m512i, __m512i) {
    // SAFETY: inlined into AVX-512F/BW code.
    unsafe {
        let sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(scales_k3_vec(&w.scales), _mm_set1_epi8(32)));
        let offset = _mm256_slli_epi32::<2>(_mm256_madd_epi16(sc16, bsums));
        (_mm512_zextsi256_si512(sc16), _mm512_zextsi256_si512(offset))
    }
}

/// Bits `2p..2p + 2` of every byte of `q` at bits 0..2 (the bits above
/// are the next planes': callers mask): bit plane `p` of 2-bit codes laid
/// as Q2_K's and Q3_K's `qs`.
#[inline(always)]
unsafe fn bit_plane(q: __m512i, p: usize) -> __m512i {
    // SAFETY: inlined into AVX-512BW code.
    unsafe {
        match p {
            0 => q,
            1 => _mm512_srli_epi16::<2>(q),
            2 => _mm512_srli_epi16::<4>(q),
            _ => _mm512_srli_epi16::<6>(q),
        }
    }
}

/// Q3_K · Q8_K for `R` rows at once: per row and 64 weights, two 2-bit
/// planes of a 32-byte `qs` run with the matching two bits of `hmask` as
/// bit 2, an unsigned code `u` in 0..8 whose weight is `u - 4`, met by one
/// `vpmaddubsw`; the four per-16 scales by one `vpermw`; the offset paid
/// once a block from the block sums (`4 Σ_j s_j Σ a_j`, one `vpmaddwd`).
#[inline(always)]
unsafe fn q3_k_rows<A: Acc512, const R: usize>(
    w: [&[BlockQ3K]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q4_k_rows` (32 bytes of `qs` per h < 2, 32 of `hmask`).
    unsafe {
        let idx = per16_index();
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            let az: [__m512i; 4] = std::array::from_fn(|k| act64(a, k));
            let bsums = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let (sc, offset) = q3_k_scales(w, bsums);
                let hm = _mm256_loadu_si256(w.hmask.as_ptr().cast());
                // sub-block k's high bit at bit k in the low half, k + 1's
                // at bit k in the high half
                let hm = join(hm, _mm256_srli_epi16::<1>(hm));
                let isum = planes_dot::<A>(&w.qs, Some(hm), sc, &idx, &az);
                let isum = _mm512_sub_epi32(isum, offset);
                let dd = scales_at(w, 106, a.d); // (_, d) · d_a
                let d = splat_lane::<1>(dd);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[r]);
            });
        }
        row_sums(&acc, out);
    }
}

/// A Q8_K block's codes re-laid for one kernel's vector order, by runs of
/// 8 codes ([`laid_codes`]).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct LaidCodes(pub(crate) [i8; 256]);

thread_local! {
    /// The buffer of the last re-laid activations, kept for the next.
    static LAID_CODES: std::cell::Cell<Vec<LaidCodes>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// The codes of `acts`, run `r` (codes `8r..8r + 8`) of each block at byte
/// `at(r)`, in this thread's buffer: give it back with [`keep_laid`].
pub(crate) fn laid_codes(acts: &[BlockQ8K], at: impl Fn(usize) -> usize) -> Vec<LaidCodes> {
    let mut codes = LAID_CODES.take();
    codes.clear();
    codes.extend(acts.iter().map(|a| {
        let mut c = [0i8; 256];
        for (r, run) in a.qs.chunks_exact(8).enumerate() {
            c[at(r)..][..8].copy_from_slice(run);
        }
        LaidCodes(c)
    }));
    codes
}

/// Returns [`laid_codes`]' buffer for the next call on this thread.
pub(crate) fn keep_laid(codes: Vec<LaidCodes>) {
    LAID_CODES.set(codes);
}

/// Q2_K's and Q3_K's plane order: run `p` (64 bytes) holds codes `32p..32p
/// + 32`, then `128 + 32p..128 + 32p + 32`, the weights whose low bits are
/// bit plane `p` of the block's 64 `qs` bytes read as one vector.
fn plane_at(r: usize) -> usize {
    let c = 8 * r;
    let (h, p, l) = (c / 128, (c % 128) / 32, c % 32);
    64 * p + 32 * h + l
}

/// `vpermw` indices of plane `p`'s four per-16 scales, one a 128-bit lane:
/// sub-blocks `2p`, `2p + 1` (weights `32p..`) and `8 + 2p`, `9 + 2p`
/// (weights `128 + 32p..`).
#[inline(always)]
unsafe fn plane_index() -> [__m512i; 4] {
    // SAFETY: 64-byte loads of 32 i16; inlined into AVX-512F code.
    unsafe {
        std::array::from_fn(|p| {
            let words: [i16; 32] =
                std::array::from_fn(|i| (8 * (i / 16) + 2 * p + (i / 8) % 2) as i16);
            _mm512_loadu_si512(words.as_ptr().cast())
        })
    }
}

/// One Q3_K row · Q8_K in plane order: per block, its 64 `qs` bytes as one
/// vector, each bit plane `p` (two bits of every byte) with its high bits
/// from `hmask` (bit `p` for the first 128 weights, `4 + p` for the rest)
/// against the activations' run `p` ([`plane_at`]); the per-16 scales by
/// one `vpermw` a plane, the offset once a block from the block sums
/// ([`q3_k_scales`]). Reading the planes so needs no shuffle to put two
/// 32-byte halves together, where the natural order needs two a block.
/// Returns the row's lanes.
#[inline(always)]
unsafe fn q3_k_row_planes<A: Acc512>(
    w: &[BlockQ3K],
    acts: &[BlockQ8K],
    codes: &[LaidCodes],
    idx: &[__m512i; 4],
) -> __m512 {
    // SAFETY: 64 bytes of `qs`, 32 of `hmask` and `bsums`, aligned runs of
    // `codes`; inlined into AVX-512F/BW code.
    unsafe {
        let (m3, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
        let mut acc = _mm512_setzero_ps();
        for ((w, a), c) in w.iter().zip(acts).zip(codes) {
            let (sc, offset) = q3_k_scales(w, _mm256_loadu_si256(a.bsums.as_ptr().cast()));
            let hm = _mm256_loadu_si256(w.hmask.as_ptr().cast());
            // weight 32p + l's high bit at bit p of byte l in the low
            // half, 128 + 32p + l's at bit p in the high half
            let hm = join(hm, _mm256_srli_epi16::<4>(hm));
            let q = _mm512_loadu_si512(w.qs.as_ptr().cast());
            let mut isum = _mm512_setzero_si512();
            for (p, idx) in idx.iter().enumerate() {
                let low = bit_plane(q, p);
                // bit p of each byte moved to bit 2
                let at2 = match p {
                    0 => _mm512_slli_epi16::<2>(hm),
                    1 => _mm512_slli_epi16::<1>(hm),
                    2 => hm,
                    _ => _mm512_srli_epi16::<1>(hm),
                };
                // (low & 3) | (at2 & 4)
                let u = _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(low, m3), at2, four);
                let az = _mm512_load_si512(c.0.as_ptr().add(64 * p).cast());
                let sck = _mm512_permutexvar_epi16(*idx, sc);
                isum = A::madd_acc(isum, _mm512_maddubs_epi16(u, az), sck);
            }
            let isum = _mm512_sub_epi32(isum, offset);
            let d = splat_lane::<1>(scales_at(w, 106, a.d)); // d · d_a
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc);
        }
        acc
    }
}

/// Q3_K rows · Q8_K on the VNNI table: one row at a time (on Zen 5
/// 1.02-1.08 x four rows at a time; Q2_K and Q6_K lost so and keep four:
/// docs/BENCH.md, "Q3_K one row at a time"), each in plane order
/// ([`q3_k_row_planes`]), the activations laid so once a call.
///
/// # Safety
/// The features below available; `w` holds `out.len()` rows of `rb`
/// bytes, each as many whole blocks as `acts`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) unsafe fn q3_k_rows_vnni(w: &[u8], rb: usize, acts: &[BlockQ8K], out: &mut [f32]) {
    let codes = laid_codes(acts, plane_at);
    // SAFETY: this function's features are the body's ISA.
    unsafe {
        let idx = plane_index();
        for (r, o) in out.iter_mut().enumerate() {
            let row: &[BlockQ3K] =
                crate::ggml::blocks(&w[r * rb..][..rb]).expect("a ggml row holds whole blocks");
            assert_eq!(row.len(), acts.len(), "row and activations disagree");
            *o = _mm512_reduce_add_ps(q3_k_row_planes::<VnniAcc>(row, acts, &codes, &idx));
        }
    }
    keep_laid(codes);
}

/// Q2_K rows · Q8_K on the VNNI table: four rows at a time (their
/// activation loads shared), each block's `qs` read as one vector of four
/// bit planes against the activations laid so once a call
/// ([`plane_at`]).
///
/// # Safety
/// The features below available; `w` holds `out.len()` rows of `rb`
/// bytes, each as many whole blocks as `acts`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) unsafe fn q2_k_rows_vnni(w: &[u8], rb: usize, acts: &[BlockQ8K], out: &mut [f32]) {
    let codes = laid_codes(acts, plane_at);
    let c = Some(codes.as_slice());
    let row = |r: usize| -> &[BlockQ2K] {
        let w: &[BlockQ2K] =
            crate::ggml::blocks(&w[r * rb..][..rb]).expect("a ggml row holds whole blocks");
        assert_eq!(w.len(), acts.len(), "row and activations disagree");
        w
    };
    // SAFETY: this function's features are the body's ISA.
    unsafe {
        // see `prefetch_block`
        let ahead = 8 * rb;
        let mut r = 0;
        while r + 4 <= out.len() {
            let w = [row(r), row(r + 1), row(r + 2), row(r + 3)];
            q2_k_rows_in::<VnniAcc, 4>(w, acts, c, ahead, &mut out[r..]);
            r += 4;
        }
        match out.len() - r {
            0 => {}
            1 => q2_k_rows_in::<VnniAcc, 1>([row(r)], acts, c, 0, &mut out[r..]),
            2 => q2_k_rows_in::<VnniAcc, 2>([row(r), row(r + 1)], acts, c, 0, &mut out[r..]),
            _ => q2_k_rows_in::<VnniAcc, 3>(
                [row(r), row(r + 1), row(r + 2)],
                acts,
                c,
                0,
                &mut out[r..],
            ),
        }
    }
    keep_laid(codes);
}

/// `[0, s, 2s, 3s]` in dword s < 16: a Q2_K code times its 4-bit scale.
static Q2_SCALED: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut s = 0;
    while s < 16 {
        t[s] = ((s << 8) | ((2 * s) << 16) | ((3 * s) << 24)) as u32;
        s += 1;
    }
    t
};

/// Per bit plane `p` of a Q2_K block's 64 `qs` bytes read as one vector
/// ([`plane_at`]' order: bytes 0..32 are weights `32p..`, bytes 32..64
/// weights `128 + 32p..`), byte `4 · (16-weight group)`: the group's
/// `[0, s, 2s, 3s]` in [`Q2_SCALED`]'s order.
static Q2_PLANE_AT: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut p = 0;
    while p < 4 {
        let mut i = 0;
        while i < 64 {
            t[p][i] = (4 * (8 * (i / 32) + 2 * p + (i % 32) / 16)) as u8;
            i += 1;
        }
        p += 1;
    }
    t
};

/// Σ code · scale · a of a Q2_K block's `qs`, its four bit planes from
/// one 64-byte load against activation runs `az` in plane order
/// ([`plane_at`]), with the block's scales: each code times its group's
/// 4-bit scale made at once by one `vpermb` into the block's 16 groups'
/// `[0, s, 2s, 3s]` (at most 45: an unsigned byte), then one `vpdpbusd`
/// (one `vpmaddubsw` + `vpmaddwd` with a `vpermw` of the scales before).
#[inline(always)]
unsafe fn q2_scaled_dot(qs: &[u8; 64], scales: __m128i, az: &[__m512i; 4]) -> __m512i {
    // SAFETY: a 64-byte load of `qs`; 64-byte loads of the tables;
    // inlined into AVX512-VBMI/VNNI code.
    unsafe {
        let table = _mm512_permutexvar_epi32(
            _mm512_cvtepu8_epi32(_mm_and_si128(scales, _mm_set1_epi8(0x0F))),
            _mm512_loadu_si512(Q2_SCALED.as_ptr().cast()),
        );
        let m3 = _mm512_set1_epi8(3);
        let mut isum = _mm512_setzero_si512();
        let q = _mm512_loadu_si512(qs.as_ptr().cast());
        for p in 0..4 {
            let bits = bit_plane(q, p);
            let at = _mm512_loadu_si512(Q2_PLANE_AT[p].as_ptr().cast());
            // (bits & 3) | at
            let idx = _mm512_ternarylogic_epi32::<0xEA>(bits, m3, at);
            isum = _mm512_dpbusd_epi32(isum, _mm512_permutexvar_epi8(idx, table), az[p]);
        }
        isum
    }
}

/// Q2_K · Q8_K for `R` rows at once: per row and 64 weights, two 2-bit
/// planes of a 32-byte `qs` run (laid as Q3_K's low bits) against two
/// 32-code sub-blocks, the four per-16 scales by one `vpermw` after
/// `vpmaddubsw`; the mins against the block sums by one
/// `vpmaddwd` a block, kept apart and taken off once at the end.
#[inline(always)]
unsafe fn q2_k_rows<A: Acc512, const R: usize>(
    w: [&[BlockQ2K]; R],
    acts: &[BlockQ8K],
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: the caller's.
    unsafe { q2_k_rows_in::<A, R>(w, acts, None, ahead, out) }
}

/// [`q2_k_rows`]; where `codes` (the activations' codes in plane order,
/// [`plane_at`]) are given, each code times its scale by
/// [`q2_scaled_dot`] (VBMI and VNNI only).
#[inline(always)]
unsafe fn q2_k_rows_in<A: Acc512, const R: usize>(
    w: [&[BlockQ2K]; R],
    acts: &[BlockQ8K],
    codes: Option<&[LaidCodes]>,
    ahead: usize,
    out: &mut [f32],
) {
    // SAFETY: as `q4_k_rows` (32 bytes of `qs` per h < 2, the 16 bytes of
    // `scales`, the f16 pair at byte 80 of 84).
    unsafe {
        let m4 = _mm_set1_epi8(0x0F);
        let idx = per16_index();
        let mut acc = [_mm512_setzero_ps(); R];
        let mut acc_m = [_mm256_setzero_ps(); R];
        for (b, a) in acts.iter().enumerate() {
            let az: [__m512i; 4] = match codes {
                Some(c) => {
                    std::array::from_fn(|p| _mm512_load_si512(c[b].0[64 * p..].as_ptr().cast()))
                }
                None => std::array::from_fn(|k| act64(a, k)),
            };
            let bsums = _mm256_loadu_si256(a.bsums.as_ptr().cast());
            unroll_rows!(R, r => {
                let w = &w[r][b];
                prefetch_block(w, ahead);
                let sm = _mm_loadu_si128(w.scales.as_ptr().cast());
                let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(sm), m4));
                let dd = scales_at(w, 80, a.d); // (d, dmin) · d_a
                let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums));
                let dmin = _mm256_broadcastss_ps(_mm_shuffle_ps::<0b0101_0101>(dd, dd));
                acc_m[r] = _mm256_fmadd_ps(dmin, m, acc_m[r]);
                let isum = if codes.is_some() {
                    q2_scaled_dot(&w.qs, sm, &az)
                } else {
                    let sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)));
                    planes_dot::<A>(&w.qs, None, sc, &idx, &az)
                };
                let d = splat_lane::<0>(dd);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[r]);
            });
        }
        for r in 0..R {
            acc[r] = _mm512_sub_ps(acc[r], _mm512_zextps256_ps512(acc_m[r]));
        }
        row_sums(&acc, out);
    }
}

// Four rows at a time at every length: on 512-bit vectors the rows'
// shared activation loads and scale picks are what the AVX-512 tables
// gained from (Zen 5); one row at a time is not measured there.
rows_wrappers! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c";
    q4_k_rows_bw = q4_k_rows<BwAcc,>(BlockQ4K, BlockQ8K), four rows from 0, one row ahead 0;
    q6_k_rows_bw = q6_k_rows<BwAcc,>(BlockQ6K, BlockQ8K), four rows from 0, one row ahead 0;
    q3_k_rows_bw = q3_k_rows<BwAcc,>(BlockQ3K, BlockQ8K), four rows from 0, one row ahead 0;
    q2_k_rows_bw = q2_k_rows<BwAcc,>(BlockQ2K, BlockQ8K), four rows from 0, one row ahead 0;
}

// One row at a time, as on AVX2 (`avx2.rs`'s reasons), but with no
// software prefetch: on the CPUs that take these (Zen 4) the hardware's
// follows the one stream, and a prefetch 1-8 KiB ahead cost Q6_K 13-30 %
// and Q3_K 3-10 % (docs/BENCH.md, "K-quant rows without a software
// prefetch on Zen 4"). (Q4_K's AVX2 body built so, and without the
// prefetch, ran 0.9-1.1 x the AVX2 wrapper: it keeps that one.)
rows_wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c";
    q6_k_rows_vnni256 = offset_k_rows<BlockQ6K, VnniGfniMac,>(BlockQ6K, BlockQ8K), four rows from usize::MAX, one row ahead 0;
    q3_k_rows_vnni256 = offset_k_rows<BlockQ3K, VnniGfniMac,>(BlockQ3K, BlockQ8K), four rows from usize::MAX, one row ahead 0;
}

// (The VNNI table's Q3_K is `q3_k_rows_vnni` above.)
rows_wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c";
    q4_k_rows_vnni = q4_k_rows<VnniAcc,>(BlockQ4K, BlockQ8K), four rows from 0, one row ahead 0;
    q6_k_rows_vnni = q6_k_rows<VnniAcc,>(BlockQ6K, BlockQ8K), four rows from 0, one row ahead 0;
}

/// A nibble-packed Q8_0-paired block ([`NibbleBlock`]) as the unsigned
/// operand of `vpdpbusd`: each nibble's code `u` (with Q5_0's and Q5_1's
/// fifth bit), whose weight is `u - OFF` (Q4_1, Q5_1: `d·u + m`, the min
/// added per block).
pub(crate) trait UnsignedNibbles: NibbleBlock + crate::ggml::GgmlBlock {
    /// What a code exceeds its weight by.
    const OFF: i32;
    /// Nibble to code where that is not the identity (IQ4_NL's values plus
    /// 128, all in 1..=241).
    const CODES: Option<[u8; 16]>;
    /// Whether the block holds a fifth bit per weight (Q5_0, Q5_1): bit `j`
    /// of the little-endian u32 at [`Self::qh`], weight `j`'s 16.
    const FIFTH: bool = false;
    /// The fifth bits (read only where [`Self::FIFTH`]).
    fn qh(&self) -> *const u8 {
        std::ptr::null()
    }
    /// Sixteen rows' scales as f32 from the 32 bits at each one's
    /// [`super::avx2::RowBlockQ8_0::d`]: the low f16 widened unless the type says
    /// otherwise.
    ///
    /// # Safety
    /// Inlined into AVX-512 F + F16C code.
    #[inline(always)]
    unsafe fn scales16(d32: __m512i) -> __m512 {
        // SAFETY: the caller's.
        unsafe { _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32)) }
    }
}

/// A 16-value table of signed weights as [`UnsignedNibbles::CODES`]
/// (each plus 128).
const fn plus_128(values: &[i8; 16]) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (values[i] as i16 + 128) as u8;
        i += 1;
    }
    t
}

/// MXFP4 as IQ4_NL, through its own values; its scale the E8M0 byte.
impl UnsignedNibbles for BlockMxfp4 {
    const OFF: i32 = 128;
    const CODES: Option<[u8; 16]> = Some(plus_128(&crate::ggml::grids::KVALUES_MXFP4));
    #[inline(always)]
    unsafe fn scales16(d32: __m512i) -> __m512 {
        // SAFETY: inlined into AVX-512 F code.
        unsafe {
            // `e8m0_half`'s bits: (e − 1) << 23, or the subnormals 2^-128
            // and 2^-127 for e = 0 and 1
            let e = _mm512_and_si512(d32, _mm512_set1_epi32(0xFF));
            let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
            let tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
            let is_normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
            _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_normal, tiny, normal))
        }
    }
}

impl UnsignedNibbles for BlockQ4_0 {
    const OFF: i32 = 8;
    const CODES: Option<[u8; 16]> = None;
}

impl UnsignedNibbles for BlockQ5_0 {
    const OFF: i32 = 16;
    const CODES: Option<[u8; 16]> = None;
    const FIFTH: bool = true;
    fn qh(&self) -> *const u8 {
        self.qh.as_ptr()
    }
}

impl UnsignedNibbles for BlockQ4_1 {
    const OFF: i32 = 0;
    const CODES: Option<[u8; 16]> = None;
}

impl UnsignedNibbles for BlockQ5_1 {
    const OFF: i32 = 0;
    const CODES: Option<[u8; 16]> = None;
    const FIFTH: bool = true;
    fn qh(&self) -> *const u8 {
        self.qh.as_ptr()
    }
}

/// `vpmultishiftqb` controls that put the fifth bit of weight `4j + i`
/// (`half` 0) or `16 + 4j + i` (`half` 1) of each of a qword's two rows at
/// bit 4 of byte `i` of that row's lane, from the rows' `qh` words:
/// `[j][half]`.
const FIFTH_PICKS: [[[i8; 64]; 2]; 4] = {
    let mut p = [[[0i8; 64]; 2]; 4];
    let mut j = 0;
    while j < 4 {
        let mut half = 0;
        while half < 2 {
            let mut k = 0;
            while k < 64 {
                // byte k % 8 of its qword: lane (k % 8) / 4 of the two, byte i
                let (lane, i) = ((k % 8) / 4, k % 4);
                let bit = 32 * lane + 16 * half + 4 * j + i;
                p[j][half][k] = ((bit + 64 - 4) % 64) as i8;
                k += 1;
            }
            half += 1;
        }
        j += 1;
    }
    p
};

impl UnsignedNibbles for BlockIq4Nl {
    const OFF: i32 = 128;
    const CODES: Option<[u8; 16]> = Some(plus_128(&crate::ggml::grids::KVALUES_IQ4NL));
}

/// Activation blocks per pass of [`nibble_rows16`]: its per-block sums
/// and scales live on the stack.
const ACT_CHUNK: usize = 256;

/// The most bytes of 16 rows [`nibble_rows16`] asks into L1 ahead of
/// their use; more, beside the rows it is reading, would push those out.
const L1_AHEAD: usize = 12 << 10;

/// Sixteen rows of a 4-bit Q8_0-paired type at a time against one
/// activation row, each row in its own i32 lane: per block, the rows' 16
/// nibble bytes are loaded four rows to a register and transposed in
/// 32-bit groups (a 4×4 transpose in each 128-bit lane), so lane `r` of
/// the j-th vector holds row r's bytes 4j..4j + 4; each group of four
/// activation codes is broadcast and met by one `vpdpbusd` with the
/// codes unsigned ([`UnsignedNibbles`]), `OFF · Σ a` taken off once per
/// block for all rows; the rows' 16 scales come by one gather and are
/// applied by one FMA. No horizontal sums and one scale conversion per 16
/// rows: the per-block scale work is what bounds the one-row kernels on
/// these 18-byte blocks. Rows past the last 16 go one at a time
/// (`one_row`). The integer sums are the one-row kernels'; the f32 order
/// differs (each block's sum times `d_w · d_a`, added in block order).
///
/// # Safety
/// AVX-512 F/BW/VL + VNNI and F16C must be enabled in the caller; `w`
/// holds `out.len()` rows of `rb` bytes, each as many whole blocks of `B`
/// as `acts`.
#[inline(always)]
unsafe fn nibble_rows16<B: UnsignedNibbles, const IL: bool>(
    w: &[u8],
    rb: usize,
    acts: &[BlockQ8_0],
    out: &mut [f32],
    one_row: unsafe fn(&[B], &[BlockQ8_0]) -> f32,
) {
    let bs = size_of::<B>();
    let nb = acts.len();
    assert!(
        w.len() >= out.len() * rb && rb == nb * bs,
        "rows and activations disagree"
    );
    assert!(
        16 * rb <= i32::MAX as usize,
        "row offsets fit the gather's i32"
    );
    let groups = out.len() / 16;
    // SAFETY: the caller's ISA; every load lies in row g + p < out.len()
    // (a block's 16 nibble bytes, or the 4 bytes at its scale, inside the
    // block: the scale leads it), in `acts`, or on the stack arrays below.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let codes = B::CODES.map(|t| _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().cast())));
        // where row i of a group and its block b lie: `IL`, the rows
        // interleaved by sixteen (`crate::ggml::layout`), else row-major
        let (row_stride, block_stride) = if IL { (bs, 16 * bs) } else { (rb, bs) };
        let step = _mm512_set1_epi32(row_stride as i32);
        let row_at = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            step,
        );
        // see the prefetch below
        let l1 = 16 * rb <= L1_AHEAD;
        let (mut da, mut corr, mut sums) =
            ([0f32; ACT_CHUNK], [0i32; ACT_CHUNK], [0f32; ACT_CHUNK]);
        for c0 in (0..nb).step_by(ACT_CHUNK) {
            let chunk = &acts[c0..(c0 + ACT_CHUNK).min(nb)];
            for (b, a) in chunk.iter().enumerate() {
                da[b] = crate::ggml::f16_le(a.d);
                let sum = a.qs.iter().map(|&q| i32::from(q as i8)).sum::<i32>();
                corr[b] = -B::OFF * sum;
                sums[b] = sum as f32;
            }
            for g in 0..groups {
                let first = w.as_ptr().add(16 * g * rb + c0 * block_stride);
                let mut acc = if c0 == 0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(out.as_ptr().add(16 * g))
                };
                // Row-major: 16 rows ahead, a block's share of them per
                // block: sixteen streams are more than the hardware's
                // prefetchers follow; the next 16 into L1 where two groups
                // fit, else the 16 after them into L2 alone (Zen 4, one
                // core, streaming, Q4_0: rows of 768 columns 16 GB/s into
                // L1 against 12 into L2; of 2048 and 7168 columns 10 into
                // L1, 14-15 into L2 one group ahead, 16-18 two groups
                // ahead; without, 6-8 on the first two and 13 on the
                // last). Interleaved, the one stream is the hardware's to
                // follow: a prefetch 1-16 KiB ahead ran it 0.75-0.9 x.
                let next = first.wrapping_add(if l1 { 16 * rb } else { 32 * rb });
                let share = (16 * rb).div_ceil(chunk.len());
                for (b, a) in chunk.iter().enumerate() {
                    if !IL {
                        let p = next.wrapping_add(b * share);
                        if l1 {
                            crate::dense::prefetch_lines(p, share);
                        } else {
                            crate::dense::prefetch_lines_l2(p, share);
                        }
                    }
                    let blk = &*first.add(b * block_stride).cast::<B>();
                    let qs = blk.qs();
                    let row = |r: usize| _mm_loadu_si128(qs.add(r * row_stride).cast());
                    // lane L of four[i] is row i + 4L
                    let four: [__m512i; 4] = std::array::from_fn(|i| {
                        let v = _mm512_castsi128_si512(row(i));
                        let v = _mm512_inserti32x4::<1>(v, row(i + 4));
                        let v = _mm512_inserti32x4::<2>(v, row(i + 8));
                        _mm512_inserti32x4::<3>(v, row(i + 12))
                    });
                    let t0 = _mm512_unpacklo_epi32(four[0], four[1]);
                    let t1 = _mm512_unpackhi_epi32(four[0], four[1]);
                    let t2 = _mm512_unpacklo_epi32(four[2], four[3]);
                    let t3 = _mm512_unpackhi_epi32(four[2], four[3]);
                    // bytes 4j..4j + 4 of row r in lane r
                    let by4 = [
                        _mm512_unpacklo_epi64(t0, t2),
                        _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3),
                        _mm512_unpackhi_epi64(t1, t3),
                    ];
                    let ap = a.qs.as_ptr().cast::<i32>();
                    let (mut lo, mut hi) = (_mm512_set1_epi32(corr[b]), _mm512_setzero_si512());
                    // the 16 rows' fifth bits, row r's u32 in lane r
                    let qh = if B::FIFTH {
                        _mm512_i32gather_epi32::<1>(row_at, blk.qh().cast())
                    } else {
                        _mm512_setzero_si512()
                    };
                    for (j, q) in by4.iter().enumerate() {
                        let (mut l, mut h) = (
                            _mm512_and_si512(*q, m4),
                            _mm512_and_si512(_mm512_srli_epi16::<4>(*q), m4),
                        );
                        if let Some(t) = codes {
                            (l, h) = (_mm512_shuffle_epi8(t, l), _mm512_shuffle_epi8(t, h));
                        }
                        if B::FIFTH {
                            // (a macro: a closure's intrinsics would become calls)
                            macro_rules! fifth {
                                ($half:expr) => {
                                    _mm512_and_si512(
                                        _mm512_multishift_epi64_epi8(
                                            _mm512_loadu_si512(
                                                FIFTH_PICKS[j][$half].as_ptr().cast(),
                                            ),
                                            qh,
                                        ),
                                        _mm512_set1_epi8(0x10),
                                    )
                                };
                            }
                            (l, h) = (_mm512_or_si512(l, fifth!(0)), _mm512_or_si512(h, fifth!(1)));
                        }
                        // weights 4j.. in the low nibbles, 16 + 4j.. in the high
                        lo = _mm512_dpbusd_epi32(
                            lo,
                            l,
                            _mm512_set1_epi32(ap.add(j).read_unaligned()),
                        );
                        hi = _mm512_dpbusd_epi32(
                            hi,
                            h,
                            _mm512_set1_epi32(ap.add(j + 4).read_unaligned()),
                        );
                    }
                    // each row's scale (with a min, the min in the high half)
                    let d16 = _mm512_i32gather_epi32::<1>(row_at, blk.d().cast());
                    let dw = B::scales16(d16);
                    let scale = _mm512_mul_ps(dw, _mm512_set1_ps(da[b]));
                    acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), acc);
                    if B::MIN {
                        let mw =
                            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(d16)));
                        let min = _mm512_mul_ps(mw, _mm512_set1_ps(da[b]));
                        acc = _mm512_fmadd_ps(min, _mm512_set1_ps(sums[b]), acc);
                    }
                }
                _mm512_storeu_ps(out.as_mut_ptr().add(16 * g), acc);
            }
        }
        for (r, o) in out.iter_mut().enumerate().skip(16 * groups) {
            let row: &[B] =
                crate::ggml::blocks(&w[r * rb..][..rb]).expect("a ggml row holds whole blocks");
            *o = one_row(row, acts);
        }
    }
}

/// `#[target_feature]` wrappers of [`nibble_rows16`] (a [`super::RowsQ8_0`]).
macro_rules! nibble_rows16_wrappers {
    ($($name:ident = $block:ty, $one_row:ident, interleaved $il:literal;)*) => {$(
        /// # Safety
        /// AVX-512 F/BW/VL + VNNI, AVX2, FMA and F16C must be available;
        /// `w` holds `out.len()` rows of `rb` bytes, each as many whole
        /// blocks as `acts` (interleaved by sixteen where the name says,
        /// from a group's first row).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
        pub(crate) unsafe fn $name(w: &[u8], rb: usize, acts: &[BlockQ8_0], out: &mut [f32]) {
            /// The one-row body on this table's ISA.
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
            unsafe fn one_row(w: &[$block], a: &[BlockQ8_0]) -> f32 {
                // SAFETY: this function's features are the body's ISA.
                unsafe { $one_row::<VnniMac>(w, a) }
            }
            // SAFETY: this function's features are the body's ISA; the
            // caller's shapes.
            unsafe { nibble_rows16::<$block, $il>(w, rb, acts, out, one_row) }
        }
    )*};
}

nibble_rows16_wrappers! {
    q4_0_rows16_vnni = BlockQ4_0, q4_0, interleaved false;
    iq4_nl_rows16_vnni = BlockIq4Nl, iq4_nl, interleaved false;
    q4_0_rows16_interleaved_vnni = BlockQ4_0, q4_0, interleaved true;
    iq4_nl_rows16_interleaved_vnni = BlockIq4Nl, iq4_nl, interleaved true;
    q5_0_rows16_vnni = BlockQ5_0, one_row_body, interleaved false;
    q4_1_rows16_vnni = BlockQ4_1, one_row_body, interleaved false;
    q5_1_rows16_vnni = BlockQ5_1, one_row_body, interleaved false;
    mxfp4_rows16_vnni = BlockMxfp4, one_row_body, interleaved false;
    mxfp4_rows16_interleaved_vnni = BlockMxfp4, one_row_body, interleaved true;
}

/// `vpshufb` patterns: pattern `s` zero-extends byte `s` of each 32-bit
/// lane to the lane.
const LANE_BYTE_PICKS: [[i8; 64]; 4] = {
    let mut p = [[-1i8; 64]; 4];
    let mut s = 0;
    while s < 4 {
        let mut i = 0;
        while i < 64 {
            p[s][i] = (i / 4 % 4 * 4 + s) as i8;
            i += 4;
        }
        s += 1;
    }
    p
};

/// Activation rows a word-major kernel meets at once: the decoded words
/// and scales of a block column serve them all. Four keep the sums and
/// accumulators of every row in registers (32 of them).
const WORD_TOKENS: usize = 4;

/// Q4_K · Q8_K on rows word-major by sixteen ([`RowLayout::Words16`]), one
/// row to each 32-bit lane of a 512-bit vector, for one or more activation
/// rows ([`RowsTokensQ8K`](super::RowsTokensQ8K)): word `j` of a block
/// column is one 64-byte load, its low and high nibbles met by the
/// broadcast activation words of their two sub-blocks in `vpdpbusd`, each
/// sub-block's sums times its scales (`vpmulld`), the mins from the block
/// sums by `vpdpwssd`; the scale fields decoded for the sixteen rows at
/// once and, like the nibbles, for up to [`WORD_TOKENS`] activation rows
/// at once; no horizontal sums, no transposes, and one stream for the
/// hardware to follow, each block column's lines asked for `AHEAD` bytes
/// ahead where that is not 0 (the hardware's prefetch alone does not keep
/// up on some CPUs: [`super::WORDS_AHEAD`]). Rows past the last sixteen
/// go to [`super::avx2::q4_k_rows_q8k`]. The integer sums are the row
/// kernels'; the f32 order differs.
///
/// [`RowLayout::Words16`]: crate::ggml::layout::RowLayout::Words16
///
/// # Safety
/// AVX-512 F/BW/VL + VNNI, AVX2, FMA and F16C must be available; `w`
/// holds the rows laid so from a group's first row, each as many whole
/// blocks as each activation row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_rows16_words_vnni<const AHEAD: usize>(
    w: &[u8],
    rb: usize,
    acts: &[BlockQ8K],
    out: &mut [f32],
) {
    const BS: usize = size_of::<BlockQ4K>();
    let s = super::avx2::Words::new(w, rb, BS, acts, out).prefetching(AHEAD);

    /// The group `g`'s rows times the activation rows `t0..t0 + T`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    unsafe fn body<const T: usize>(
        s: super::avx2::Words<'_>,
        out: &mut [f32],
        g: usize,
        t0: usize,
    ) {
        let super::avx2::Words {
            w,
            rb,
            nb,
            rows,
            acts,
            ahead,
            ..
        } = s;
        let ahead = if t0 == 0 { ahead } else { 0 };
        let select =
            |m: __m512i, a: __m512i, b: __m512i| _mm512_ternarylogic_epi32::<0xCA>(m, a, b);
        // SAFETY: the kernel's ISA; every load lies in the group's 16
        // rows (word j < 36 of a block column of 16 · 144 bytes), in
        // `acts` (token t0 + t < tokens, block b < nb), or on the
        // stack; every store in `out` (row 16g + 15 < rows).
        unsafe {
            let m4 = _mm512_set1_epi8(0x0F);
            let low8 = _mm512_set1_epi32(0x00ff_00ff);
            let pick = LANE_BYTE_PICKS.map(|p| _mm512_loadu_si512(p.as_ptr().cast()));
            let mut acc = [_mm512_setzero_ps(); T];
            for b in 0..nb {
                let column = w.as_ptr().add(16 * g * rb + 16 * b * BS);
                if ahead > 0 {
                    crate::dense::prefetch_lines(column.wrapping_add(ahead), 16 * BS);
                }
                let word = |j: usize| _mm512_loadu_si512(column.add(64 * j).cast());
                let a: [&BlockQ8K; T] = std::array::from_fn(|t| &acts[(t0 + t) * nb + b]);
                let ap = a.map(|a| a.qs.as_ptr().cast::<i32>());
                let (sc_lo, sc_hi, mn_lo, mn_hi) = super::avx2::k4_fields!(
                    _mm512_and_si512,
                    _mm512_srli_epi32,
                    select,
                    _mm512_set1_epi32,
                    word(1),
                    word(2),
                    word(3)
                );
                let mut tot = [_mm512_setzero_si512(); T];
                for k in 0..4 {
                    let mut lo = [_mm512_setzero_si512(); T];
                    let mut hi = [_mm512_setzero_si512(); T];
                    for j in 0..8 {
                        let q = word(4 + 8 * k + j);
                        let l = _mm512_and_si512(q, m4);
                        let h = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
                        for t in 0..T {
                            let al = _mm512_set1_epi32(ap[t].add(16 * k + j).read_unaligned());
                            let ah = _mm512_set1_epi32(ap[t].add(16 * k + 8 + j).read_unaligned());
                            lo[t] = _mm512_dpbusd_epi32(lo[t], l, al);
                            hi[t] = _mm512_dpbusd_epi32(hi[t], h, ah);
                        }
                    }
                    // the words in memory order: scheduled freely, the
                    // eight of one k went after the next eight's, which
                    // halved the speed from memory (docs/BENCH.md)
                    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
                    let sc = if k < 2 { sc_lo } else { sc_hi };
                    let (s0, s1) = (
                        _mm512_shuffle_epi8(sc, pick[2 * k % 4]),
                        _mm512_shuffle_epi8(sc, pick[(2 * k + 1) % 4]),
                    );
                    for t in 0..T {
                        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(lo[t], s0));
                        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(hi[t], s1));
                    }
                }
                // Σ m_j · p_j (p_j the sub-block's 32-sum): the mins as
                // i16 pairs (j, j + 2) against the sums paired so
                let (even_lo, odd_lo) =
                    (_mm512_and_si512(mn_lo, low8), _mm512_srli_epi16::<8>(mn_lo));
                let (even_hi, odd_hi) =
                    (_mm512_and_si512(mn_hi, low8), _mm512_srli_epi16::<8>(mn_hi));
                // (d, dmin) of the sixteen rows
                let h = word(0);
                let f16s = |v: __m512i| _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
                let (d, dmin) = (f16s(h), f16s(_mm512_srli_epi32::<16>(h)));
                for t in 0..T {
                    let bs = &a[t].bsums;
                    let p = |j: usize| i32::from(bs[2 * j]) + i32::from(bs[2 * j + 1]);
                    let pair = |j: usize| _mm512_set1_epi32((p(j) & 0xffff) | (p(j + 2) << 16));
                    let mut mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), even_lo, pair(0));
                    mins = _mm512_dpwssd_epi32(mins, odd_lo, pair(1));
                    mins = _mm512_dpwssd_epi32(mins, even_hi, pair(4));
                    mins = _mm512_dpwssd_epi32(mins, odd_hi, pair(5));
                    let da = _mm512_set1_ps(a[t].d);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(tot[t]), acc[t]);
                    acc[t] =
                        _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(mins), acc[t]);
                }
            }
            for (t, acc) in acc.into_iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add((t0 + t) * rows + 16 * g), acc);
            }
        }
    }
    // SAFETY: this function's ISA.
    unsafe {
        super::avx2::word_groups!(s, WORD_TOKENS, body, &mut *out);
        s.tail(out, |w, a, o| super::avx2::q4_k_rows_q8k(w, rb, a, o));
    }
}

/// IQ4_XS · Q8_K on rows word-major by sixteen ([`RowLayout::Words16`]),
/// as [`q4_k_rows16_words_vnni`] lays the work out: each word's nibbles
/// looked up as unsigned codes (IQ4_NL's values plus 128,
/// [`UnsignedNibbles`]), met by the broadcast activation words in
/// `vpdpbusd`; each sub-block's sums less 128 times its activations' sum
/// (from the block sums), then times its scale (`vpmulld`). Rows past the
/// last sixteen go one at a time ([`iq4_xs_q8k`]). The integer sums are
/// the row kernels'; the f32 order differs.
///
/// [`RowLayout::Words16`]: crate::ggml::layout::RowLayout::Words16
///
/// # Safety
/// As [`q4_k_rows16_words_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn iq4_xs_rows16_words_vnni<const AHEAD: usize>(
    w: &[u8],
    rb: usize,
    acts: &[BlockQ8K],
    out: &mut [f32],
) {
    const BS: usize = size_of::<BlockIq4Xs>();
    const OFF: i32 = <BlockIq4Nl as UnsignedNibbles>::OFF;
    let s = super::avx2::Words::new(w, rb, BS, acts, out).prefetching(AHEAD);

    /// The group `g`'s rows times the activation rows `t0..t0 + T`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    unsafe fn body<const T: usize>(
        s: super::avx2::Words<'_>,
        out: &mut [f32],
        g: usize,
        t0: usize,
    ) {
        let super::avx2::Words {
            w,
            rb,
            nb,
            rows,
            acts,
            ahead,
            ..
        } = s;
        let ahead = if t0 == 0 { ahead } else { 0 };
        // SAFETY: the kernel's ISA; every load lies in the group's 16
        // rows (word j < 34 of a block column of 16 · 136 bytes), in
        // `acts` (token t0 + t < tokens, block b < nb), or on the
        // stack; every store in `out` (row 16g + 15 < rows).
        unsafe {
            let m4 = _mm512_set1_epi8(0x0F);
            let table = <BlockIq4Nl as UnsignedNibbles>::CODES.expect("IQ4_NL's codes");
            let codes = _mm512_broadcast_i32x4(_mm_loadu_si128(table.as_ptr().cast()));
            let (low4, low2) = (_mm512_set1_epi32(15), _mm512_set1_epi32(3));
            let mut acc = [_mm512_setzero_ps(); T];
            for b in 0..nb {
                let column = w.as_ptr().add(16 * g * rb + 16 * b * BS);
                if ahead > 0 {
                    crate::dense::prefetch_lines(column.wrapping_add(ahead), 16 * BS);
                }
                let word = |j: usize| _mm512_loadu_si512(column.add(64 * j).cast());
                let a: [&BlockQ8K; T] = std::array::from_fn(|t| &acts[(t0 + t) * nb + b]);
                let ap = a.map(|a| a.qs.as_ptr().cast::<i32>());
                let h = word(0);
                // sub-block j's scale: bits 4j.. of word 1, 16 + 2j.. of word 0
                let (mut lo, mut hi) = (word(1), _mm512_srli_epi32::<16>(h));
                let mut tot = [_mm512_setzero_si512(); T];
                for j in 0..8 {
                    let ls = _mm512_or_si512(
                        _mm512_and_si512(lo, low4),
                        _mm512_slli_epi32::<4>(_mm512_and_si512(hi, low2)),
                    );
                    let sc = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
                    (lo, hi) = (_mm512_srli_epi32::<4>(lo), _mm512_srli_epi32::<2>(hi));
                    let mut s: [__m512i; T] = std::array::from_fn(|t| {
                        let sum = i32::from(a[t].bsums[2 * j]) + i32::from(a[t].bsums[2 * j + 1]);
                        _mm512_set1_epi32(-OFF * sum)
                    });
                    for k in 0..4 {
                        let q = word(2 + 4 * j + k);
                        let ul = _mm512_shuffle_epi8(codes, _mm512_and_si512(q, m4));
                        let uh = _mm512_shuffle_epi8(
                            codes,
                            _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4),
                        );
                        for t in 0..T {
                            let al = _mm512_set1_epi32(ap[t].add(8 * j + k).read_unaligned());
                            let ah = _mm512_set1_epi32(ap[t].add(8 * j + 4 + k).read_unaligned());
                            s[t] = _mm512_dpbusd_epi32(s[t], ul, al);
                            s[t] = _mm512_dpbusd_epi32(s[t], uh, ah);
                        }
                    }
                    for t in 0..T {
                        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(s[t], sc));
                    }
                }
                let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
                for t in 0..T {
                    let d = _mm512_mul_ps(d, _mm512_set1_ps(a[t].d));
                    acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(tot[t]), acc[t]);
                }
            }
            for (t, acc) in acc.into_iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add((t0 + t) * rows + 16 * g), acc);
            }
        }
    }
    // SAFETY: this function's ISA.
    unsafe {
        super::avx2::word_groups!(s, WORD_TOKENS, body, &mut *out);
        s.tail(out, |w, a, o| {
            for (r, o) in o.iter_mut().enumerate() {
                *o = iq4_xs_q8k(&w[r * rb..][..rb], a);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[target_feature(enable = "avx2")]
    unsafe fn bits_avx2(v: __m256i, shift: i32, width: i32, to: i32) -> __m256i {
        // SAFETY: AVX2 is this function's.
        unsafe { Avx2Mac::bits(v, shift, width, to) }
    }

    #[target_feature(enable = "avx2,gfni")]
    unsafe fn bits_gfni(v: __m256i, shift: i32, width: i32, to: i32) -> __m256i {
        // SAFETY: GFNI and AVX2 are this function's.
        unsafe { VnniGfniMac::bits(v, shift, width, to) }
    }

    /// Both ways of moving a bit field give the scalar shift and mask, for
    /// every byte value and every field that fits a byte.
    #[test]
    fn bit_fields_move_as_the_scalar_shift_and_mask_for_every_byte() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("gfni")) {
            eprintln!("SKIPPED: no AVX2 + GFNI");
            return;
        }
        for width in 1..=8 {
            for shift in 0..=8 - width {
                for to in 0..=8 - width {
                    let mask = ((1u32 << width) - 1) as u8;
                    for chunk in 0..8u8 {
                        let bytes: [u8; 32] = std::array::from_fn(|i| 32 * chunk + i as u8);
                        let want = bytes.map(|b| ((b >> shift) & mask) << to);
                        // SAFETY: the features were detected above.
                        let (a, g) = unsafe {
                            let v = _mm256_loadu_si256(bytes.as_ptr().cast());
                            (
                                bits_avx2(v, shift, width, to),
                                bits_gfni(v, shift, width, to),
                            )
                        };
                        for (name, got) in [("avx2", a), ("gfni", g)] {
                            let mut out = [0u8; 32];
                            // SAFETY: 32 writable bytes.
                            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), got) };
                            assert_eq!(out, want, "{name}: shift {shift} width {width} to {to}");
                        }
                    }
                }
            }
        }
    }
}
