//! AVX-512 dot products of the lattice i-quants (IQ2_XXS, IQ2_XS,
//! IQ3_XXS, IQ3_S) with Q8_K activation rows: the AVX2 bodies' arithmetic
//! (`avx2_iq.rs`) on 512-bit vectors, two 32-weight groups at a time, and
//! two blocks at a time ([`Source`]).
//!
//! Per 64 weights:
//! - the grid magnitudes, two ways:
//!   - with AVX512-VBMI ([`Coded`], the VNNI table), from level codes:
//!     each grid is re-expressed at build time as 2- or 3-bit level codes
//!     per magnitude, 16 bits an entry, in two byte tables ([`CodedGrid`]:
//!     8 registers for IQ2_XXS and IQ3_XXS, 16 for IQ2_XS and IQ3_S); one
//!     `vpermi2b` per 128 entries looks up 64 entries' code bytes, one
//!     `vpermt2b` gathers them into words of four codes, and per 64
//!     weights one `vpmultishiftqb` brings each code to its byte and one
//!     `vpermb` maps it to its level. On Zen 4 this ran IQ3_XXS and IQ3_S
//!     at 2.0-2.2 x the lookups below, IQ2_XXS at 1.5 x and IQ2_XS at 1.2 x
//!     (docs/BENCH.md);
//!   - without VBMI ([`Masked`]): IQ3_XXS's 256-entry grid held in 16
//!     registers and looked up by `vpermt2d` and blends ([`lookup`]); the
//!     others by the AVX2 bodies' scalar loads, joined;
//! - the 64 sign bits, which in weight order are exactly an AVX-512 byte
//!   mask, negate the activations with one masked subtract; the whole
//!   block's [`KSIGNS`](super::super::grids::KSIGNS) bytes are made at
//!   once on vectors (one `vpermi2b` over the 128-byte table with VBMI,
//!   parity arithmetic without);
//! - `vpmaddubsw`, then the groups' odd scales, as i16 words picked from
//!   the block's scales made once, applied and summed by [`Acc512`]
//!   (`vpdpwssd` with VNNI, `vpmaddwd` + add without); or, for the IQ2
//!   types' and IQ3_XXS's rows on the VNNI table, in lane order ([`Lanes`]): the
//!   entries laid so that each 32-bit lane of one `vpdpbusd` a vector
//!   stays in one scale group, and the scales applied by one `vpmulld`
//!   a block (the activations laid the same way once a call).
//!
//! The multi-row entry points ([`rows_wrappers`]) keep the code tables in
//! registers across rows (loaded once a row, they cost rows of 2048
//! weights, eight blocks, 10-25 %), and run the rows as one stream of
//! pairs ([`body`]).

use std::arch::x86_64::*;

use super::super::GgmlType;
use super::super::act::BlockQ8K;
use super::super::grids::{IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS};
use super::super::iquants::{BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs};
use super::avx2::{scales_at, wrappers};
use super::avx2_iq::{Lattice, odd_scales};
use super::avx512::{Acc512, BwAcc, LaidCodes, VnniAcc, act64, join, keep_laid, laid_codes};
use super::reference::LatticeInts;
use super::tile::Unpacked;

/// A lattice type as the 512-bit bodies take it, by block and by pair of
/// 32-weight groups.
trait Masked: Lattice {
    /// The block's 256 sign bits, 64 a pair of groups (bit i of word k:
    /// weight 64k + i negative).
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    unsafe fn block_signs(&self) -> [u64; 4];

    /// Groups 2k and 2k + 1's odd scales as i16 words, weights 16q..16q
    /// + 16 of the pair's in 128-bit lane q.
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    unsafe fn pair_scales(&self, k: usize) -> __m512i;

    /// Groups 2k and 2k + 1's grid magnitudes.
    ///
    /// # Safety
    /// AVX512F/BW/VL and AVX2 must be enabled in the caller.
    #[inline(always)]
    unsafe fn grid_pair(&self, k: usize) -> __m512i {
        // SAFETY: as the trait's.
        unsafe { join(self.grid(2 * k), self.grid(2 * k + 1)) }
    }
}

/// The 16 entries of a 4-byte grid at the indices (below `grid.len()`) in
/// the i32 lanes of `idx`, looked up in registers: `vpermt2d` over each 32
/// entries, then blends by the index's higher bits.
#[inline(always)]
unsafe fn lookup<const N: usize>(grid: &[u32; N], idx: __m512i) -> __m512i {
    const { assert!(N.is_multiple_of(32) && N <= 512) };
    // SAFETY: the loads cover the N entries 16 at a time; inlined into
    // AVX-512 code.
    unsafe {
        let t = |i: usize| _mm512_loadu_si512(grid.as_ptr().add(16 * i).cast());
        let mut r = [_mm512_setzero_si512(); 16];
        for (j, r) in r.iter_mut().enumerate().take(N / 32) {
            *r = _mm512_permutex2var_epi32(t(2 * j), idx, t(2 * j + 1));
        }
        let mut n = N / 32;
        let mut bit = 5;
        while n > 1 {
            let k = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(1 << bit));
            for j in 0..n / 2 {
                r[j] = _mm512_mask_blend_epi32(k, r[2 * j], r[2 * j + 1]);
            }
            n /= 2;
            bit += 1;
        }
        r[0]
    }
}

/// The [`KSIGNS`] bytes of eight sign words (`aux`, four 7-bit indices
/// each at bits 7l) made at once: each word's indices spread to its four
/// bytes, then [`ksigns32`]: the parity of each byte's bits into its bit 7
/// (folding by 4, 2, 1 leaves it in bit 0; bits shifted in from the next
/// byte only reach bits 1..8).
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
unsafe fn ksign_bytes(aux: __m256i) -> [u64; 4] {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let field = |n: i32, m: i32| {
            _mm256_and_si256(
                _mm256_sllv_epi32(aux, _mm256_set1_epi32(n)),
                _mm256_set1_epi32(m),
            )
        };
        ksigns32(_mm256_or_si256(
            _mm256_or_si256(field(0, 0x7F), field(1, 0x7F00)),
            _mm256_or_si256(field(2, 0x7F_0000), field(3, 0x7F00_0000)),
        ))
    }
}

/// [`KSIGNS`] of each byte of `idx` (7-bit indices).
///
/// [`KSIGNS`]: super::super::grids::KSIGNS
#[inline(always)]
unsafe fn ksigns32(idx: __m256i) -> [u64; 4] {
    // SAFETY: inlined into AVX2 code.
    unsafe {
        let mut p = _mm256_xor_si256(idx, _mm256_srli_epi16(idx, 4));
        p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 2));
        p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 1));
        let parity = _mm256_slli_epi16(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7);
        std::mem::transmute::<__m256i, [u64; 4]>(_mm256_or_si256(idx, parity))
    }
}

/// The eight sign-and-scale words of an IQ2_XXS block (its odd u32s).
#[inline(always)]
unsafe fn iq2_xxs_aux(w: &BlockIq2Xxs) -> __m256i {
    // SAFETY: the 64 bytes of `qs`; inlined into AVX-512 code.
    unsafe {
        let qs = _mm512_loadu_si512(w.qs.as_ptr().cast());
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
        _mm512_castsi512_si256(_mm512_permutexvar_epi32(odd, qs))
    }
}

/// Pair k's scales from eight words with a 4-bit scale `s` in bits
/// 28..32 each: `2s + 1` of word 2k in the low 256 bits, of 2k + 1 above.
/// The same odd scales for every pair, which the unrolled body makes once.
#[inline(always)]
unsafe fn top_scales(aux: __m256i, k: usize) -> __m512i {
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let s = _mm256_srli_epi32(aux, 28);
        let odd = _mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1));
        let words = _mm512_castsi256_si512(_mm256_or_si256(odd, _mm256_slli_epi32(odd, 16)));
        let (lo, hi) = (2 * k as i32, 2 * k as i32 + 1);
        let at = _mm512_setr_epi32(
            lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi,
        );
        _mm512_permutexvar_epi32(at, words)
    }
}

impl Masked for BlockIq2Xxs {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: as the trait's.
        unsafe { ksign_bytes(iq2_xxs_aux(self)) }
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        // SAFETY: as the trait's.
        unsafe { top_scales(iq2_xxs_aux(self), k) }
    }
}

impl Masked for BlockIq2Xs {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: the 64 bytes of `qs`; AVX-512 code.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr().cast());
            ksigns32(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)))
        }
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        let at = [0, 1, 2, 3].map(|q| (4 * k + q) as u8);
        // SAFETY: as the trait's.
        unsafe { pick_scales(odd_scales(u64::from_le_bytes(self.scales)), at) }
    }
}

impl Masked for BlockIq3Xxs {
    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        // SAFETY: the 32 bytes of `scales_and_signs`; as the trait's.
        unsafe { top_scales(_mm256_loadu_si256(self.scales_and_signs.as_ptr().cast()), k) }
    }

    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        // SAFETY: the 32 bytes of `scales_and_signs`; AVX2 code.
        unsafe { ksign_bytes(_mm256_loadu_si256(self.scales_and_signs.as_ptr().cast())) }
    }

    #[inline(always)]
    unsafe fn grid_pair(&self, k: usize) -> __m512i {
        // SAFETY: 16 bytes at 16k < 64; inlined into AVX-512 code.
        unsafe {
            let q = _mm_loadu_si128(self.qs.as_ptr().add(16 * k).cast());
            lookup(&IQ3XXS_GRID, _mm512_cvtepu8_epi32(q))
        }
    }
}

impl Masked for BlockIq3S {
    #[inline(always)]
    unsafe fn block_signs(&self) -> [u64; 4] {
        bytemuck::cast(self.signs)
    }

    #[inline(always)]
    unsafe fn pair_scales(&self, k: usize) -> __m512i {
        let odd = |n: u8| [n, n, n + 1, n + 1];
        // SAFETY: as the trait's.
        unsafe {
            pick_scales(
                odd_scales(u64::from(u32::from_le_bytes(self.scales))),
                odd(2 * k as u8),
            )
        }
    }
}

/// Bytes `at[q]` of `odd` (odd scales, one a byte) in every i16 word of
/// 128-bit lane q: the same odd scales for every pair, which the unrolled
/// body makes once.
#[inline(always)]
unsafe fn pick_scales(odd: __m128i, at: [u8; 4]) -> __m512i {
    // 0xFF in the high byte: zero
    let b = |q: usize| ((0xFF00 | u64::from(at[q])) * 0x0001_0001_0001_0001) as i64;
    // SAFETY: inlined into AVX-512 code.
    unsafe {
        let pick = _mm512_setr_epi64(b(0), b(0), b(1), b(1), b(2), b(2), b(3), b(3));
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(odd), pick)
    }
}

/// A block's sign masks ([`Masked::block_signs`]) and its magnitudes, 64
/// weights a vector.
type Parts = ([u64; 4], [__m512i; 4]);

/// Where blocks' signs and magnitudes come from: the scalar loads and
/// register lookups of [`Masked`], or the level codes of [`Coded`]. Two
/// blocks at a time, so that lookups of 32 entries a block fill a vector.
///
/// Made in two steps, the first (`front`: the loads and table lookups, a
/// chain of ~40 cycles on Zen 5, whose shuffles take 5 each) one pair
/// ahead of the second (`parts`), so that a pair's products do not wait
/// for its own lookups: a pair is ~100 vector operations, about all the
/// vector scheduler holds, so the core cannot find the next pair's
/// lookups by itself.
trait Source<B> {
    /// What the first step leaves for the second.
    type Front: Copy;

    /// The first step for blocks `w[0]` and `w[1]`.
    ///
    /// # Safety
    /// The ISA of the implementation must be enabled in the caller.
    unsafe fn front(w: [&B; 2]) -> Self::Front;

    /// The parts of blocks `w[0]` and `w[1]`, from their `front`.
    ///
    /// # Safety
    /// As `front`'s.
    unsafe fn parts(w: [&B; 2], front: Self::Front) -> [Parts; 2];
}

/// [`Masked`]'s own parts (AVX512F/BW/VL).
struct Lookup;

impl<B: Masked> Source<B> for Lookup {
    type Front = ();

    #[inline(always)]
    unsafe fn front(_: [&B; 2]) {}

    #[inline(always)]
    unsafe fn parts(w: [&B; 2], (): ()) -> [Parts; 2] {
        #[inline(always)]
        unsafe fn one<B: Masked>(w: &B) -> Parts {
            // SAFETY: as the trait's.
            unsafe {
                (
                    w.block_signs(),
                    [
                        w.grid_pair(0),
                        w.grid_pair(1),
                        w.grid_pair(2),
                        w.grid_pair(3),
                    ],
                )
            }
        }
        // SAFETY: as the trait's.
        unsafe { [one(w[0]), one(w[1])] }
    }
}

/// [`Coded`]'s parts (AVX512-VBMI).
struct Vbmi;

impl<B: Coded> Source<B> for Vbmi {
    type Front = B::Front;

    #[inline(always)]
    unsafe fn front(w: [&B; 2]) -> B::Front {
        // SAFETY: as the trait's.
        unsafe { B::coded_front(w) }
    }

    #[inline(always)]
    unsafe fn parts(w: [&B; 2], front: B::Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe { B::coded_back(w, front) }
    }
}

/// One block's product, times `d · d_a`, added to `acc`.
#[inline(always)]
unsafe fn add_block<A: Acc512, B: Masked>(
    acc: __m512,
    w: &B,
    a: &BlockQ8K,
    (signs, grid): Parts,
) -> __m512 {
    // SAFETY: inlined into AVX-512 code; loads inside the blocks.
    unsafe {
        let mut isum = _mm512_setzero_si512();
        for k in 0..4 {
            let sc = w.pair_scales(k);
            let x = act64(a, k);
            let x = _mm512_mask_sub_epi8(x, signs[k], _mm512_setzero_si512(), x);
            isum = A::madd_acc(isum, _mm512_maddubs_epi16(grid[k], x), sc);
        }
        let d = _mm512_broadcastss_ps(scales_at(w, 0, a.d));
        _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc)
    }
}

/// How a stream of blocks meets its activations: each block's product
/// with its column's, added to its row's sum.
trait Products<B> {
    /// Blocks a row.
    fn cols(&self) -> usize;

    /// The product of block `w` (in column `col`), its parts `p`, times
    /// `d · d_a`, added to `acc`.
    ///
    /// # Safety
    /// The implementation's ISA must be enabled in the caller.
    unsafe fn add(&self, acc: __m512, w: &B, col: usize, p: Parts) -> __m512;
}

/// The Q8_K activations as they are, against parts in weight order.
struct Natural<'a, A>(&'a [BlockQ8K], std::marker::PhantomData<A>);

impl<A: Acc512, B: Masked> Products<B> for Natural<'_, A> {
    fn cols(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    unsafe fn add(&self, acc: __m512, w: &B, col: usize, p: Parts) -> __m512 {
        // SAFETY: as the trait's.
        unsafe { add_block::<A, B>(acc, w, &self.0[col], p) }
    }
}

/// A lattice type's rows (`w`, whole rows of `prod.cols()` blocks) into
/// `out`, their parts from `S`, their products by `prod`. The rows are one
/// stream of pairs of blocks, a pair across two rows where a row has an
/// odd count (rows of 768 weights: three blocks), so that no lookup is
/// wasted on an odd block and the pairs' two steps overlap from row to
/// row.
#[inline(always)]
unsafe fn body<S: Source<B>, B: Masked>(w: &[B], prod: &impl Products<B>, out: &mut [f32]) {
    let cols = prod.cols();
    assert!(
        cols > 0 && w.len() == cols * out.len(),
        "rows of whole blocks"
    );
    // SAFETY: inlined into the wrappers' AVX-512 code; `w` and the
    // activations are whole blocks, every load inside one.
    unsafe {
        /// Where the stream is: the row's sum so far, its row and column.
        struct At {
            acc: __m512,
            row: usize,
            col: usize,
        }
        /// Block `w`'s product, then its row's sum where the row ends.
        #[inline(always)]
        unsafe fn add<B: Masked>(
            at: &mut At,
            w: &B,
            prod: &impl Products<B>,
            out: &mut [f32],
            p: Parts,
        ) {
            // SAFETY: as `body`'s.
            unsafe {
                at.acc = prod.add(at.acc, w, at.col, p);
                at.col += 1;
                if at.col == prod.cols() {
                    out[at.row] = B::FACTOR * _mm512_reduce_add_ps(at.acc);
                    *at = At {
                        acc: _mm512_setzero_ps(),
                        row: at.row + 1,
                        col: 0,
                    };
                }
            }
        }
        let mut at = At {
            acc: _mm512_setzero_ps(),
            row: 0,
            col: 0,
        };
        let pairs = w.len() / 2;
        if pairs > 0 {
            let pair = |i: usize| [&w[2 * i], &w[2 * i + 1]];
            let mut this = S::front(pair(0));
            for i in 0..pairs {
                let next = if i + 1 < pairs {
                    S::front(pair(i + 1))
                } else {
                    this
                };
                let [p0, p1] = S::parts(pair(i), this);
                add(&mut at, &w[2 * i], prod, out, p0);
                add(&mut at, &w[2 * i + 1], prod, out, p1);
                this = next;
            }
        }
        // the last block of an odd count: made beside a copy of itself
        if w.len() % 2 == 1 {
            let t = w.len() - 1;
            let [p, _] = S::parts([&w[t], &w[t]], S::front([&w[t], &w[t]]));
            add(&mut at, &w[t], prod, out, p);
        }
    }
}

/// A lattice type's row · Q8_K from its grid lookups.
#[inline(always)]
unsafe fn pairs<A: Acc512>(w: &[impl Masked], a: &[BlockQ8K]) -> f32 {
    let mut out = 0.0;
    let prod = Natural::<A>(a, std::marker::PhantomData);
    // SAFETY: as `body`'s (AVX512F/BW/VL).
    unsafe { body::<Lookup, _>(w, &prod, std::slice::from_mut(&mut out)) };
    out
}

/// A lattice type's rows · Q8_K from their level codes.
#[inline(always)]
unsafe fn coded_rows<A: Acc512>(w: &[impl Coded], a: &[BlockQ8K], out: &mut [f32]) {
    let prod = Natural::<A>(a, std::marker::PhantomData);
    // SAFETY: as `body`'s (AVX512-VBMI too).
    unsafe { body::<Vbmi, _>(w, &prod, out) }
}

/// A lattice type's row · Q8_K from its level codes.
#[inline(always)]
unsafe fn coded<A: Acc512>(w: &[impl Coded], a: &[BlockQ8K]) -> f32 {
    let mut out = 0.0;
    // SAFETY: as `coded_rows`'.
    unsafe { coded_rows::<A>(w, a, std::slice::from_mut(&mut out)) };
    out
}

/// A lattice type whose pairs are also made in lane order ([`LANES_XXS`]):
/// vector k of a block holds the k-th 8 weights of each of its groups (an
/// IQ2 type's entry k, IQ3_XXS's entries 2k and 2k + 1), so that each
/// 32-bit lane of `vpdpbusd`'s sums stays in one scale group and the
/// scales meet the sums once a block, not once a vector.
trait Lanes: Coded {
    /// Two blocks' first step in lane order.
    ///
    /// # Safety
    /// AVX512F/BW/VL/VBMI and AVX2 must be enabled in the caller.
    unsafe fn lanes_front(w: [&Self; 2]) -> Self::Front;

    /// The block's odd scales by lane: lane 2m + h of `[0]` has the scale
    /// of group m's entries 0 and 1, of `[1]` of its entries 2 and 3.
    ///
    /// # Safety
    /// AVX512F/BW/VL/VBMI and AVX2 must be enabled in the caller.
    unsafe fn lane_scales(&self) -> [__m512i; 2];
}

impl Lanes for BlockIq2Xxs {
    #[inline(always)]
    unsafe fn lanes_front(w: [&Self; 2]) -> Iq2Front {
        // SAFETY: as the trait's.
        unsafe { iq2_xxs_front(w, &LANES_XXS) }
    }

    #[inline(always)]
    unsafe fn lane_scales(&self) -> [__m512i; 2] {
        // SAFETY: the 64 bytes of `qs`; as the trait's.
        unsafe {
            // group m's sign-and-scale word is u32 2m + 1
            let qs = _mm512_loadu_si512(self.qs.as_ptr().cast());
            let at = _mm512_setr_epi32(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
            let v = lane_top_scales(_mm512_permutexvar_epi32(at, qs));
            [v, v]
        }
    }
}

/// `2s + 1` of each 32-bit lane's scale `s`.
#[inline(always)]
unsafe fn odd_lanes(s: __m512i) -> __m512i {
    // SAFETY: inlined into AVX512F code.
    unsafe { _mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1)) }
}

/// The odd scales (`2s + 1`, `s` in bits 28..32) of the sign-and-scale
/// words in `words`' lanes (IQ2_XXS's and IQ3_XXS's, each group's moved to
/// its lanes by the caller).
#[inline(always)]
unsafe fn lane_top_scales(words: __m512i) -> __m512i {
    // SAFETY: inlined into AVX512F code.
    unsafe { odd_lanes(_mm512_srli_epi32(words, 28)) }
}

/// IQ3_XXS in lane order: its entries are 4 weights, one lane, so vector
/// k of a block holds entries 2k and 2k + 1 of each group (lanes 2m, 2m + 1
/// group m's): the indices in that order by one `vpermb` a block, the signs
/// and the activations as IQ2_XXS's (a sign byte and 8 activation codes per
/// 64-bit word m: group m's).
impl Lanes for BlockIq3Xxs {
    #[inline(always)]
    unsafe fn lanes_front(w: [&Self; 2]) -> Self::Front {
        // SAFETY: as the trait's.
        unsafe { iq3_xxs_front::<true>(w) }
    }

    #[inline(always)]
    unsafe fn lane_scales(&self) -> [__m512i; 2] {
        // SAFETY: the 32 bytes of `scales_and_signs`; as the trait's.
        unsafe {
            // group m's sign-and-scale word is u32 m
            let words = _mm256_loadu_si256(self.scales_and_signs.as_ptr().cast());
            let at = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
            let v = lane_top_scales(_mm512_permutexvar_epi32(at, _mm512_castsi256_si512(words)));
            [v, v]
        }
    }
}

/// IQ3_XXS's index bytes in lane order: position `16k + 2m + h` takes
/// entry `2k + h` of group m (byte `8m + 2k + h` of `qs`).
static IQ3XXS_LANE_INDICES: [u8; 64] = {
    let mut p = [0u8; 64];
    let mut e = 0;
    while e < 64 {
        let (k, m, h) = (e / 16, e % 16 / 2, e % 2);
        p[e] = (8 * m + 2 * k + h) as u8;
        e += 1;
    }
    p
};

impl Lanes for BlockIq2Xs {
    #[inline(always)]
    unsafe fn lanes_front(w: [&Self; 2]) -> Iq2Front {
        // SAFETY: as the trait's.
        unsafe { iq2_xs_front(w, &LANES_XS) }
    }

    #[inline(always)]
    unsafe fn lane_scales(&self) -> [__m512i; 2] {
        // SAFETY: as the trait's.
        unsafe {
            // scale byte m (two 16-weight scales of group m) in the low
            // byte of lanes 2m and 2m + 1
            let bytes = _mm512_set1_epi64(i64::from_le_bytes(self.scales));
            let at = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
            let b = _mm512_maskz_permutexvar_epi8(0x1111_1111_1111_1111, at, bytes);
            [
                odd_lanes(_mm512_and_si512(b, _mm512_set1_epi32(15))),
                odd_lanes(_mm512_srli_epi32(b, 4)),
            ]
        }
    }
}

/// [`Lanes`]' pairs (AVX512-VBMI).
struct VbmiLanes;

impl<B: Lanes> Source<B> for VbmiLanes {
    type Front = B::Front;

    #[inline(always)]
    unsafe fn front(w: [&B; 2]) -> B::Front {
        // SAFETY: as the trait's.
        unsafe { B::lanes_front(w) }
    }

    #[inline(always)]
    unsafe fn parts(w: [&B; 2], front: B::Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe { B::coded_back(w, front) }
    }
}

/// The lattice types' lane order: vector k, 64-bit word m holds codes
/// `32m + 8k..32m + 8k + 8`.
fn lane_at(r: usize) -> usize {
    let (m, k) = (r / 4, r % 4);
    64 * k + 8 * m
}

/// The Q8_K activations in lane order ([`Lanes`]).
struct InLanes<'a> {
    acts: &'a [BlockQ8K],
    codes: &'a [LaidCodes],
}

impl<B: Lanes> Products<B> for InLanes<'_> {
    fn cols(&self) -> usize {
        self.acts.len()
    }

    #[inline(always)]
    unsafe fn add(&self, acc: __m512, w: &B, col: usize, (signs, grid): Parts) -> __m512 {
        // SAFETY: aligned 64-byte loads inside `codes[col]`; inlined into
        // AVX512-VNNI/VBMI code.
        unsafe {
            let codes = self.codes[col].0.as_ptr();
            let mut sums = [_mm512_setzero_si512(); 2];
            for k in 0..4 {
                let x = _mm512_load_si512(codes.add(64 * k).cast());
                let x = _mm512_mask_sub_epi8(x, signs[k], _mm512_setzero_si512(), x);
                sums[k / 2] = _mm512_dpbusd_epi32(sums[k / 2], grid[k], x);
            }
            let [s0, s1] = w.lane_scales();
            let isum = _mm512_add_epi32(
                _mm512_mullo_epi32(sums[0], s0),
                _mm512_mullo_epi32(sums[1], s1),
            );
            let d = _mm512_broadcastss_ps(scales_at(w, 0, self.acts[col].d));
            _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc)
        }
    }
}

/// A lattice type's rows · Q8_K in lane order ([`Lanes`]).
#[inline(always)]
unsafe fn lanes_rows<A: Acc512>(w: &[impl Lanes], a: &[BlockQ8K], out: &mut [f32]) {
    let codes = laid_codes(a, lane_at);
    let prod = InLanes {
        acts: a,
        codes: &codes,
    };
    // SAFETY: as `body`'s (AVX512-VNNI/VBMI too).
    unsafe { body::<VbmiLanes, _>(w, &prod, out) };
    keep_laid(codes);
}

/// A lattice grid as level codes, for lookups by `vpermi2b`: magnitude j
/// of entry e is `levels[c]` for the code c (2 bits for IQ2's 3 levels, 3
/// for IQ3's 8) at bits `bits · j` of `lo[e] | hi[e] << 8`. The byte
/// tables of a 512-entry grid fill eight registers where its entries
/// filled 32 (IQ2) or 16 (IQ3), and one lookup serves 64 entries.
#[repr(C, align(64))]
struct CodedGrid<const N: usize> {
    lo: [u8; N],
    hi: [u8; N],
    /// `levels[c & (2^bits - 1)]` at byte c, for `vpermb`.
    levels: [u8; 64],
    /// The `vpermt2b` indices that gather the looked-up code bytes (`lo`
    /// below 64, `hi` from 64) into 16-bit codes, four a 64-bit word: a
    /// block's 64 IQ3 entries in two vectors; IQ2's 32 in the first (the
    /// second block of a pair 32 bytes on, [`magnitudes`]).
    spread: [[u8; 64]; 2],
    /// Per output vector v (weights 64v..64v + 64), the `vpmultishiftqb`
    /// shifts that bring each of its magnitudes' codes to the bottom of
    /// its byte, from the word of its entry (IQ3: in vector `v / 2`).
    shifts: [[u8; 8]; 4],
}

/// [`CodedGrid`] of a grid whose entries hold `per` magnitudes (8 or 4)
/// of `levels` (3 or 8 of them: 2 or 3 bits a code), byte j magnitude j,
/// for index vectors in entry order. A magnitude outside `levels` fails
/// the build.
const fn coded_grid<const N: usize>(grid: &[u64; N], per: usize, levels: &[u8]) -> CodedGrid<N> {
    let bits = if levels.len() <= 4 { 2 } else { 3 };
    let mut g = CodedGrid {
        lo: [0; N],
        hi: [0; N],
        levels: [0; 64],
        spread: [[0; 64]; 2],
        shifts: [[0; 8]; 4],
    };
    let mut e = 0;
    while e < N {
        let mut code = 0u16;
        let mut j = 0;
        while j < per {
            let v = (grid[e] >> (8 * j)) as u8;
            let mut c = 0;
            while levels[c] != v {
                c += 1; // out of bounds (a build error) past the last level
            }
            code |= (c as u16) << (bits * j);
            j += 1;
        }
        g.lo[e] = code as u8;
        g.hi[e] = (code >> 8) as u8;
        e += 1;
    }
    let mut c = 0;
    while c < 64 {
        let l = c % (1 << bits);
        g.levels[c] = if l < levels.len() { levels[l] } else { 0 };
        c += 1;
    }
    // an output word (8 magnitudes) holds `epw` entries; a spread word
    // holds 4 entries: those of `outs` output words
    let epw = 8 / per;
    let outs = 4 / epw;
    let mut v = 0;
    while v < 4 {
        let mut q = 0;
        while q < 8 {
            let mut u = 0;
            while u < epw {
                let e = (8 * v + q) * epw + u;
                let slot = (v % outs) * epw + u;
                let at = &mut g.spread[v / outs];
                at[8 * q + 2 * slot] = e as u8;
                at[8 * q + 2 * slot + 1] = 64 + e as u8;
                u += 1;
            }
            q += 1;
        }
        let mut j = 0;
        while j < 8 {
            let slot = (v % outs) * epw + j / per;
            g.shifts[v][j] = (16 * slot + bits * (j % per)) as u8;
            j += 1;
        }
        v += 1;
    }
    g
}

/// A 4-byte grid widened for [`coded_grid`].
const fn widen<const N: usize>(grid: &[u32; N]) -> [u64; N] {
    let mut w = [0u64; N];
    let mut e = 0;
    while e < N {
        w[e] = grid[e] as u64;
        e += 1;
    }
    w
}

/// The `vpermt2b` indices that gather two IQ2_XXS blocks' entry indices
/// (entry 4g + l's at byte l of the block's 64-bit word g; the other half
/// holds the group's signs and scale) into 64 bytes in entry order.
static XXS_INDICES: [u8; 64] = {
    let mut p = [0u8; 64];
    let mut e = 0;
    while e < 64 {
        p[e] = (64 * (e / 32) + 8 * (e % 32 / 4) + e % 4) as u8;
        e += 1;
    }
    p
};

const IQ2_LEVELS: [u8; 3] = [0x08, 0x19, 0x2b];
const IQ3XXS_LEVELS: [u8; 8] = [4, 12, 20, 28, 36, 44, 52, 62];
const IQ3S_LEVELS: [u8; 8] = [1, 3, 5, 7, 9, 11, 13, 15];

static IQ2XXS_CODED: CodedGrid<256> = coded_grid(&IQ2XXS_GRID, 8, &IQ2_LEVELS);
static IQ2XS_CODED: CodedGrid<512> = coded_grid(&IQ2XS_GRID, 8, &IQ2_LEVELS);
static IQ3XXS_CODED: CodedGrid<256> = coded_grid(&widen(&IQ3XXS_GRID), 4, &IQ3XXS_LEVELS);
static IQ3S_CODED: CodedGrid<512> = coded_grid(&widen(&IQ3S_GRID), 4, &IQ3S_LEVELS);

/// The code bytes of `table` (256 or 512 entries) at the indices whose low
/// 8 bits are the bytes of `idx` and whose bit 8 is the matching bit of
/// `high`: two `vpermi2b` per 256 entries, blended by bit 7, then bit 8.
#[inline(always)]
unsafe fn lookup_codes<const N: usize>(table: &[u8; N], idx: __m512i, high: u64) -> __m512i {
    const { assert!(N == 256 || N == 512) };
    // SAFETY: the loads cover the N bytes of `table`; inlined into
    // AVX512-VBMI code.
    unsafe {
        let t = |i: usize| _mm512_loadu_si512(table.as_ptr().add(64 * i).cast());
        let bit7 = _mm512_movepi8_mask(idx);
        let half = |h: usize| {
            let a = _mm512_permutex2var_epi8(t(4 * h), idx, t(4 * h + 1));
            let b = _mm512_permutex2var_epi8(t(4 * h + 2), idx, t(4 * h + 3));
            _mm512_mask_blend_epi8(bit7, a, b)
        };
        if N == 256 {
            half(0)
        } else {
            _mm512_mask_blend_epi8(high, half(0), half(1))
        }
    }
}

/// The blocks' level codes from their entries' indices (`idx`, `high` as
/// [`lookup_codes`]'; a second block's entries from byte 32 where the
/// grid's entries are 8 magnitudes): the code bytes looked up and gathered
/// into words of four codes (`vpermt2b`), the layout [`levels`] takes.
#[inline(always)]
unsafe fn code_words<const N: usize, const B: usize>(
    g: &CodedGrid<N>,
    idx: __m512i,
    high: u64,
) -> [__m512i; 2] {
    // SAFETY: 64-byte loads of the 64-byte tables; inlined into
    // AVX512-VBMI code.
    unsafe {
        let lo = lookup_codes(&g.lo, idx, high);
        let hi = lookup_codes(&g.hi, idx, high);
        let spread = |s: usize| _mm512_loadu_si512(g.spread[s].as_ptr().cast());
        let first = spread(0);
        let words = if B == 2 {
            [first, _mm512_add_epi8(first, _mm512_set1_epi8(32))]
        } else {
            [first, spread(1)]
        };
        [
            _mm512_permutex2var_epi8(lo, words[0], hi),
            _mm512_permutex2var_epi8(lo, words[1], hi),
        ]
    }
}

/// The magnitudes of [`code_words`]: each magnitude's code shifted to its
/// byte (`vpmultishiftqb`), and its level looked up (`vpermb`). `B`
/// blocks: 2 for IQ2 grids (32 entries a block), 1 for IQ3 ones.
#[inline(always)]
unsafe fn levels<const N: usize, const B: usize>(
    g: &CodedGrid<N>,
    words: [__m512i; 2],
) -> [[__m512i; 4]; B] {
    // SAFETY: 64-byte loads of the 64-byte tables; inlined into
    // AVX512-VBMI code.
    unsafe {
        let levels = _mm512_loadu_si512(g.levels.as_ptr().cast());
        let mut out = [[_mm512_setzero_si512(); 4]; B];
        for (b, out) in out.iter_mut().enumerate() {
            for (v, out) in out.iter_mut().enumerate() {
                let shifts = _mm512_set1_epi64(i64::from_le_bytes(g.shifts[v]));
                let from = if B == 2 { words[b] } else { words[v / 2] };
                *out = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(shifts, from), levels);
            }
        }
        out
    }
}

/// The [`KSIGNS`](super::super::grids::KSIGNS) bytes of the 64 7-bit
/// indices in the bytes of `idx` (bit 7 ignored), by one `vpermi2b`: two
/// blocks' sign masks, as [`sign_masks`] reads them.
#[inline(always)]
unsafe fn ksigns_of(idx: __m512i) -> __m512i {
    // SAFETY: the 128 bytes of KSIGNS; inlined into AVX512-VBMI code.
    unsafe {
        let t = |i: usize| _mm512_loadu_si512(KSIGNS.as_ptr().add(64 * i).cast());
        _mm512_permutex2var_epi8(t(0), idx, t(1))
    }
}

/// Two blocks' sign masks, the 64-bit words of `v`.
#[inline(always)]
unsafe fn sign_masks(v: __m512i) -> [[u64; 4]; 2] {
    /// A vector's 64-bit words, read back from memory.
    #[repr(C, align(64))]
    struct Words([u64; 8]);
    // SAFETY: the 64 bytes of `words`; inlined into AVX-512 code.
    unsafe {
        let mut words = Words([0; 8]);
        _mm512_store_si512(words.0.as_mut_ptr().cast(), v);
        // read as loads: taken from the register, each word costs
        // shuffles (`vextracti32x4`, `vpextrq`), which bound these kernels
        let w = |k: usize| std::ptr::read_volatile(&words.0[k]);
        [[w(0), w(1), w(2), w(3)], [w(4), w(5), w(6), w(7)]]
    }
}

/// The four 7-bit sign indices at bits 0, 7, 14, 21 of each 32-bit word
/// of `aux`, as bytes in weight order.
#[inline(always)]
unsafe fn sign_fields(aux: __m512i) -> __m512i {
    // SAFETY: inlined into AVX512-VBMI code.
    unsafe {
        let at = i64::from_le_bytes([0, 7, 14, 21, 32, 39, 46, 53]);
        _mm512_multishift_epi64_epi8(_mm512_set1_epi64(at), aux)
    }
}

/// A lattice type whose grid is a [`CodedGrid`], its pairs made in the two
/// steps of [`Source`].
trait Coded: Masked {
    /// What the first step leaves for the second.
    type Front: Copy;

    /// Two blocks' loads and lookups.
    ///
    /// # Safety
    /// AVX512F/BW/VL/VBMI and AVX2 must be enabled in the caller.
    unsafe fn coded_front(w: [&Self; 2]) -> Self::Front;

    /// Two blocks' parts from their `front`.
    ///
    /// # Safety
    /// As `coded_front`'s.
    unsafe fn coded_back(w: [&Self; 2], front: Self::Front) -> [Parts; 2];

    /// Two blocks' parts.
    ///
    /// # Safety
    /// As `coded_front`'s.
    #[inline(always)]
    unsafe fn coded_parts(w: [&Self; 2]) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe { Self::coded_back(w, Self::coded_front(w)) }
    }
}

/// An IQ2 pair's first step: its code words and its sign bytes.
#[derive(Clone, Copy)]
struct Iq2Front {
    words: [__m512i; 2],
    signs: __m512i,
}

/// Two IQ2_XXS blocks' first step, their entries in the order `order`
/// gives: `order.entries` picks each entry's index byte from the blocks'
/// 128 bytes, `order.signs` (if any) its sign field from the 64 in
/// natural order (block, group, entry of the group).
#[inline(always)]
unsafe fn iq2_xxs_front(w: [&BlockIq2Xxs; 2], order: &EntryOrder) -> Iq2Front {
    // SAFETY: the 64 bytes of each `qs`; AVX512-VBMI code.
    unsafe {
        let q0 = _mm512_loadu_si512(w[0].qs.as_ptr().cast());
        let q1 = _mm512_loadu_si512(w[1].qs.as_ptr().cast());
        // the index bytes (the low half of each 64-bit word) of both
        let at = _mm512_loadu_si512(order.entries[0].as_ptr().cast());
        let idx = _mm512_permutex2var_epi8(q0, at, q1);
        // and their sign-and-scale words (the high halves)
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let mut fields = sign_fields(_mm512_permutex2var_epi32(q0, odd, q1));
        if let Some(signs) = &order.signs {
            fields = _mm512_permutexvar_epi8(_mm512_loadu_si512(signs.as_ptr().cast()), fields);
        }
        Iq2Front {
            words: code_words::<256, 2>(&IQ2XXS_CODED, idx, 0),
            signs: ksigns_of(fields),
        }
    }
}

/// Two IQ2_XS blocks' first step, their entries in the order `order`
/// gives: `order.entries[h]` picks byte h of each 16-bit entry (the low
/// one the grid index, the high one bit 8 of it and the sign index).
#[inline(always)]
unsafe fn iq2_xs_front(w: [&BlockIq2Xs; 2], order: &EntryOrder) -> Iq2Front {
    // SAFETY: the 64 bytes of each `qs`; AVX512-VBMI code.
    unsafe {
        let q0 = _mm512_loadu_si512(w[0].qs.as_ptr().cast());
        let q1 = _mm512_loadu_si512(w[1].qs.as_ptr().cast());
        let at = |b: usize| _mm512_loadu_si512(order.entries[b].as_ptr().cast());
        let idx = _mm512_permutex2var_epi8(q0, at(0), q1);
        let high = _mm512_permutex2var_epi8(q0, at(1), q1);
        let nine = _mm512_test_epi8_mask(high, _mm512_set1_epi8(1));
        Iq2Front {
            words: code_words::<512, 2>(&IQ2XS_CODED, idx, nine),
            // bits 9..16: the sign index (bit 7 of each byte, from its
            // neighbour, is not read)
            signs: ksigns_of(_mm512_srli_epi16(high, 1)),
        }
    }
}

/// The order of two IQ2 blocks' 64 entries in a pair's vectors: for
/// `vpermt2b` over the blocks' `qs`, one or two index tables (the bytes of
/// an entry), and a permutation of IQ2_XXS's sign fields where they are
/// not in entry order.
struct EntryOrder {
    entries: [[u8; 64]; 2],
    signs: Option<[u8; 64]>,
}

/// Entries in natural order (block, group, entry of the group): weight
/// order, as the products and the batched codes take them.
static NATURAL_XXS: EntryOrder = EntryOrder {
    entries: [XXS_INDICES, [0; 64]],
    signs: None,
};
static NATURAL_XS: EntryOrder = EntryOrder {
    entries: XS_BYTES,
    signs: None,
};

/// Entries in lane order (block, entry of the group, group): vector k of
/// a block holds entry k of each of its eight groups, 64-bit word m group
/// m's, so that each 32-bit lane of the products stays in one group
/// ([`lanes_rows`]).
static LANES_XXS: EntryOrder = EntryOrder {
    entries: [lane_order(64, 8, 1, 0), [0; 64]],
    signs: Some(LANE_SIGNS),
};

/// IQ2_XXS's and IQ3_XXS's sign fields (block, group, field of the group)
/// in lane order (block, field, group).
const LANE_SIGNS: [u8; 64] = lane_order(32, 4, 1, 0);
static LANES_XS: EntryOrder = EntryOrder {
    entries: [lane_order(64, 8, 2, 0), lane_order(64, 8, 2, 1)],
    signs: None,
};

/// Byte `32b + 8k + m` (block b, entry k of group m) from source byte
/// `block · b + group · m + entry · k + plus`.
const fn lane_order(block: usize, group: usize, entry: usize, plus: usize) -> [u8; 64] {
    let mut p = [0u8; 64];
    let mut e = 0;
    while e < 64 {
        let (b, k, m) = (e / 32, e % 32 / 8, e % 8);
        p[e] = (block * b + group * m + entry * k + plus) as u8;
        e += 1;
    }
    p
}

impl Coded for BlockIq2Xxs {
    type Front = Iq2Front;

    #[inline(always)]
    unsafe fn coded_front(w: [&Self; 2]) -> Iq2Front {
        // SAFETY: as the trait's.
        unsafe { iq2_xxs_front(w, &NATURAL_XXS) }
    }

    #[inline(always)]
    unsafe fn coded_back(_: [&Self; 2], f: Iq2Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe { iq2_parts(&IQ2XXS_CODED, f) }
    }
}

/// An IQ2 pair's parts from its [`Iq2Front`].
#[inline(always)]
unsafe fn iq2_parts<const N: usize>(g: &CodedGrid<N>, f: Iq2Front) -> [Parts; 2] {
    // SAFETY: inlined into AVX512-VBMI code.
    unsafe {
        let [s0, s1] = sign_masks(f.signs);
        let [g0, g1] = levels::<N, 2>(g, f.words);
        [(s0, g0), (s1, g1)]
    }
}

impl Coded for BlockIq2Xs {
    type Front = Iq2Front;

    #[inline(always)]
    unsafe fn coded_front(w: [&Self; 2]) -> Iq2Front {
        // SAFETY: as the trait's.
        unsafe { iq2_xs_front(w, &NATURAL_XS) }
    }

    #[inline(always)]
    unsafe fn coded_back(_: [&Self; 2], f: Iq2Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe { iq2_parts(&IQ2XS_CODED, f) }
    }
}

/// The `vpermt2b` indices that gather the low (`[0]`) and the high bytes
/// (`[1]`) of two IQ2_XS blocks' 32 16-bit entries.
static XS_BYTES: [[u8; 64]; 2] = {
    let mut p = [[0u8; 64]; 2];
    let mut e = 0;
    while e < 64 {
        p[0][e] = (2 * e) as u8;
        p[1][e] = (2 * e + 1) as u8;
        e += 1;
    }
    p
};

/// Two IQ3_XXS blocks' first step: each block's code words and both
/// blocks' sign bytes, in weight order or, with `LANES`, in lane order
/// ([`Lanes`]).
#[inline(always)]
unsafe fn iq3_xxs_front<const LANES: bool>(w: [&BlockIq3Xxs; 2]) -> <BlockIq3Xxs as Coded>::Front {
    // SAFETY: the 64 bytes of each `qs` and the 32 of each
    // `scales_and_signs`; inlined into AVX512-VBMI code.
    unsafe {
        let order = _mm512_loadu_si512(IQ3XXS_LANE_INDICES.as_ptr().cast());
        let idx = |b: usize| {
            let qs = _mm512_loadu_si512(w[b].qs.as_ptr().cast());
            if LANES {
                _mm512_permutexvar_epi8(order, qs)
            } else {
                qs
            }
        };
        let words = [
            code_words::<256, 1>(&IQ3XXS_CODED, idx(0), 0),
            code_words::<256, 1>(&IQ3XXS_CODED, idx(1), 0),
        ];
        let sign_words = join(
            _mm256_loadu_si256(w[0].scales_and_signs.as_ptr().cast()),
            _mm256_loadu_si256(w[1].scales_and_signs.as_ptr().cast()),
        );
        let mut fields = sign_fields(sign_words);
        if LANES {
            let order = _mm512_loadu_si512(LANE_SIGNS.as_ptr().cast());
            fields = _mm512_permutexvar_epi8(order, fields);
        }
        (words, ksigns_of(fields))
    }
}

impl Coded for BlockIq3Xxs {
    /// Each block's code words, and both blocks' sign bytes.
    type Front = ([[__m512i; 2]; 2], __m512i);

    #[inline(always)]
    unsafe fn coded_front(w: [&Self; 2]) -> Self::Front {
        // SAFETY: as the trait's.
        unsafe { iq3_xxs_front::<false>(w) }
    }

    #[inline(always)]
    unsafe fn coded_back(_: [&Self; 2], (words, signs): Self::Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe {
            let [s0, s1] = sign_masks(signs);
            let [g0] = levels::<256, 1>(&IQ3XXS_CODED, words[0]);
            let [g1] = levels::<256, 1>(&IQ3XXS_CODED, words[1]);
            [(s0, g0), (s1, g1)]
        }
    }
}

impl Coded for BlockIq3S {
    /// Each block's code words.
    type Front = [[__m512i; 2]; 2];

    #[inline(always)]
    unsafe fn coded_front(w: [&Self; 2]) -> Self::Front {
        // SAFETY: the 64 bytes of each `qs`; as the trait's.
        unsafe {
            let idx = |b: usize| _mm512_loadu_si512(w[b].qs.as_ptr().cast());
            let high = |b: usize| u64::from_le_bytes(w[b].qh);
            [
                code_words::<512, 1>(&IQ3S_CODED, idx(0), high(0)),
                code_words::<512, 1>(&IQ3S_CODED, idx(1), high(1)),
            ]
        }
    }

    #[inline(always)]
    unsafe fn coded_back(w: [&Self; 2], words: Self::Front) -> [Parts; 2] {
        // SAFETY: as the trait's.
        unsafe {
            let [g0] = levels::<512, 1>(&IQ3S_CODED, words[0]);
            let [g1] = levels::<512, 1>(&IQ3S_CODED, words[1]);
            [(w[0].block_signs(), g0), (w[1].block_signs(), g1)]
        }
    }
}

wrappers! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c", BwAcc;
    iq3_xxs_bw = pairs(BlockIq3Xxs, BlockQ8K);
    iq2_xxs_bw = pairs(BlockIq2Xxs, BlockQ8K);
    iq2_xs_bw = pairs(BlockIq2Xs, BlockQ8K);
    iq3_s_bw = pairs(BlockIq3S, BlockQ8K);
}

/// [`tile::Unpack`](super::tile::Unpack) of the VNNI table: the lattice
/// types' batched codes from [`Coded`]'s parts, two blocks at a time (the
/// same codes as `tile::unpack_row`: signed magnitudes plus `MAX`); every
/// other type by the AVX2 unpacker.
///
/// # Safety
/// The CPU must have AVX512F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) unsafe fn unpack_row_vbmi(ty: GgmlType, row: &[u8], out: &mut [Unpacked]) {
    // SAFETY: this function's features are the bodies' ISA.
    unsafe {
        match ty {
            GgmlType::IQ2_XXS => unpack_coded::<BlockIq2Xxs>(row, out),
            GgmlType::IQ2_XS => unpack_coded::<BlockIq2Xs>(row, out),
            GgmlType::IQ3_XXS => unpack_coded::<BlockIq3Xxs>(row, out),
            GgmlType::IQ3_S => unpack_coded::<BlockIq3S>(row, out),
            _ => super::tile::avx2::unpack_row(ty, row, out),
        }
    }
}

/// One row of a lattice type unpacked.
#[inline(always)]
unsafe fn unpack_coded<B: Coded + LatticeInts>(row: &[u8], out: &mut [Unpacked]) {
    let w: &[B] = crate::ggml::blocks(row).expect("a ggml row holds whole blocks");
    assert_eq!(w.len(), out.len(), "one unpacked block per super-block");
    // SAFETY (all): inlined into `unpack_row_vbmi`'s AVX-512 code.
    let pairs = w.len() / 2;
    for i in 0..pairs {
        let [p0, p1] = unsafe { B::coded_parts([&w[2 * i], &w[2 * i + 1]]) };
        unsafe { put_codes::<B>(&w[2 * i], &mut out[2 * i], p0) };
        unsafe { put_codes::<B>(&w[2 * i + 1], &mut out[2 * i + 1], p1) };
    }
    if w.len() % 2 == 1 {
        let w = &w[2 * pairs];
        let [p, _] = unsafe { B::coded_parts([w, w]) };
        unsafe { put_codes::<B>(w, &mut out[2 * pairs], p) };
    }
}

/// A block's codes, their sub-block sums (`init`) and its scales.
#[inline(always)]
unsafe fn put_codes<B: LatticeInts>(w: &B, u: &mut Unpacked, (signs, grid): Parts) {
    // SAFETY: `q` is 64-byte aligned (the struct's alignment, at offset 0)
    // and 64k + 64 <= 256; inlined into AVX-512 code.
    unsafe {
        let off = _mm512_set1_epi8(B::MAX as i8);
        for k in 0..4 {
            let q = _mm512_mask_sub_epi8(_mm512_add_epi8(off, grid[k]), signs[k], off, grid[k]);
            _mm512_store_si512(u.q.as_mut_ptr().add(64 * k).cast(), q);
            // sums of each 8 codes, then of each 16
            let s: [u64; 8] = std::mem::transmute(_mm512_sad_epu8(q, _mm512_setzero_si512()));
            for i in 0..4 {
                u.init[4 * k + i] = -128 * (s[2 * i] + s[2 * i + 1]) as i32;
            }
        }
    }
    super::tile::scales_lattice(w, u);
}

/// Multi-row wrappers ([`RowsQ8K`](super::RowsQ8K)): `$body::<$acc>` over
/// all the rows at once, so that the grid tables are loaded into registers
/// once for all the rows rather than once a row (rows of 2048 weights are
/// eight blocks), and the pairs run on across rows ([`body`]).
macro_rules! rows_wrappers {
    ($features:literal, $acc:ty; $($name:ident = $body:ident($block:ty);)*) => {$(
        /// # Safety
        /// The wrapper's target features must be available; `w` holds
        /// `out.len()` rows of `rb` bytes, each as many whole blocks as
        /// `acts`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(w: &[u8], rb: usize, acts: &[BlockQ8K], out: &mut [f32]) {
            let rows: &[$block] = crate::ggml::blocks(&w[..out.len() * rb])
                .expect("a ggml row holds whole blocks");
            assert_eq!(rows.len(), acts.len() * out.len(), "rows and activations disagree");
            // SAFETY: this function's features are the body's ISA.
            unsafe { $body::<$acc>(rows, acts, out) };
        }
    )*};
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c", VnniAcc;
    iq3_xxs_vbmi = coded(BlockIq3Xxs, BlockQ8K);
    iq2_xxs_vbmi = coded(BlockIq2Xxs, BlockQ8K);
    iq2_xs_vbmi = coded(BlockIq2Xs, BlockQ8K);
    iq3_s_vbmi = coded(BlockIq3S, BlockQ8K);
}

rows_wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c", VnniAcc;
    iq3_xxs_rows_vbmi = lanes_rows(BlockIq3Xxs);
    iq2_xxs_rows_vbmi = lanes_rows(BlockIq2Xxs);
    iq2_xs_rows_vbmi = lanes_rows(BlockIq2Xs);
    iq3_s_rows_vbmi = coded_rows(BlockIq3S);
}

#[cfg(test)]
mod tests {
    use super::super::super::grids::KSIGNS;
    use super::super::super::iquants::u32_at;
    use super::*;

    #[test]
    fn iq3_xxs_sign_words_give_the_ksigns_bytes() {
        if !crate::quant::Isa::Avx512.available() {
            println!("SKIPPED: this CPU lacks AVX-512");
            return;
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut b = BlockIq3Xxs {
            d: [0; 2],
            qs: [0; 64],
            scales_and_signs: [0; 32],
        };
        for _ in 0..2_000 {
            for v in &mut b.scales_and_signs {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *v = (s >> 40) as u8;
            }
            // SAFETY: AVX-512 (and so AVX2) checked above.
            let got = unsafe { b.block_signs() };
            for g in 0..8 {
                let aux = u32_at(&b.scales_and_signs, g);
                for l in 0..4 {
                    let want = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                    let byte = (got[g / 2] >> (32 * (g % 2) + 8 * l)) as u8;
                    assert_eq!(byte, want, "word {g} index {l}");
                }
            }
        }
    }
}
