//! AVX2 code of `q3-tcq`: the products' row kernel and the batched
//! products' unpacker (end of file; equal to
//! the reference up to f32 summation order) and the
//! forward pass of the Viterbi search. The forward pass: the 64 path costs live in
//! eight vectors; per step every vector of new states pulls its two
//! predecessors' costs and its branches' subset errors with lane permutes.
//! The same f32 operations as `Search::forward_ref` in the same order (no
//! FMA) and the same tie rule, so back pointers and the final state are
//! bit for bit the scalar ones.

use std::arch::x86_64::*;

use super::viterbi::{PULL, Search, best_state};
use super::{
    BLOCK_BYTES, LEVELS_3, LEVELS_4, NU, P_TAPS, QK, R_TAPS, SB_BLOCKS, SCALES, STATES,
    WIDE_PLACES, WidePlaces,
};
use crate::ggml::dot::avx2::{Avx2Mac, AvxVnniMac, Mac};
use crate::ggml::dot::tile::q8_0::UnpackedQ8_0;
use crate::quant::act::QuantizedActs;

/// Vectors of 8 states.
const V: usize = STATES / 8;

/// # Safety
/// The CPU must support AVX2; `s.x`, `s.d`, `s.wide` have one length and
/// `back` at least that many entries.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn forward(s: &Search<'_>, back: &mut [u64]) -> u32 {
    let levels = |l: &[i8]| -> __m256 {
        let f: [f32; 8] = std::array::from_fn(|i| f32::from(l[i]));
        // SAFETY: `f` holds 8 f32.
        unsafe { _mm256_loadu_ps(f.as_ptr()) }
    };
    let l3 = [levels(&LEVELS_3[..8]), levels(&LEVELS_3[8..])];
    let l4 = [
        levels(&LEVELS_4[..8]),
        levels(&LEVELS_4[8..16]),
        levels(&LEVELS_4[16..24]),
        levels(&LEVELS_4[24..]),
    ];
    let lanes = |f: &dyn Fn(usize) -> i32| -> __m256i {
        let a: [i32; 8] = std::array::from_fn(f);
        // SAFETY: `a` holds 8 i32.
        unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
    };
    // New states 8v..8v+8 come from states 4v..4v+4 (each twice): lanes
    // 0..4 of vector v/2 for even v, lanes 4..8 for odd v.
    let pred = [lanes(&|l| (l / 2) as i32), lanes(&|l| (4 + l / 2) as i32)];
    let pull0: [__m256i; V] = std::array::from_fn(|v| lanes(&|l| i32::from(PULL[8 * v + l][0])));
    let pull1: [__m256i; V] = std::array::from_fn(|v| lanes(&|l| i32::from(PULL[8 * v + l][1])));
    let swap_halves = lanes(&|l| ((l + 4) % 8) as i32);

    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut cost = [inf; V];
    cost[0] = _mm256_blend_ps::<1>(inf, _mm256_setzero_ps());
    for (t, slot) in back[..s.x.len()].iter_mut().enumerate() {
        let e = if t < s.live {
            let (xv, dv) = (_mm256_set1_ps(s.x[t]), _mm256_set1_ps(s.d[t]));
            let sq = |l: __m256| {
                let v = _mm256_sub_ps(xv, _mm256_mul_ps(dv, l));
                _mm256_mul_ps(v, v)
            };
            // Lane i of every level vector is a level of subset i % 4.
            let m = if s.wide[t] {
                _mm256_min_ps(
                    _mm256_min_ps(sq(l4[0]), sq(l4[1])),
                    _mm256_min_ps(sq(l4[2]), sq(l4[3])),
                )
            } else {
                _mm256_min_ps(sq(l3[0]), sq(l3[1]))
            };
            _mm256_min_ps(m, _mm256_permutevar8x32_ps(m, swap_halves))
        } else {
            _mm256_setzero_ps()
        };
        let mut next = [inf; V];
        let mut bits = 0u64;
        for (v, n) in next.iter_mut().enumerate() {
            let idx = pred[v % 2];
            let c0 = _mm256_add_ps(
                _mm256_permutevar8x32_ps(cost[v / 2], idx),
                _mm256_permutevar8x32_ps(e, pull0[v]),
            );
            let c1 = _mm256_add_ps(
                _mm256_permutevar8x32_ps(cost[v / 2 + V / 2], idx),
                _mm256_permutevar8x32_ps(e, pull1[v]),
            );
            let lt = _mm256_cmp_ps::<_CMP_LT_OQ>(c1, c0);
            *n = _mm256_blendv_ps(c0, c1, lt);
            bits |= u64::from(_mm256_movemask_ps(lt) as u32) << (8 * v);
        }
        *slot = bits;
        cost = next;
    }
    let mut out = [0f32; STATES];
    for (o, c) in out.chunks_exact_mut(8).zip(&cost) {
        // SAFETY: each chunk holds 8 f32.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *c) };
    }
    best_state(&out)
}

/// AVX2 version of [`super::dot::vec_dot_q3tcq_q8_ref`], over the
/// `out.len() / acts.n` consecutive rows of `row_bytes` bytes in `rows`
/// (the dispatch table's row-dot signature; `q3-tcq` has no grid).
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q3tcq_q8(
    rows: &[u8],
    row_bytes: usize,
    _grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: this function's features are `vec_dot`'s ISA.
    unsafe { vec_dot::<Avx2Mac>(rows, row_bytes, acts, out) }
}

/// [`vec_dot_q3tcq_q8`] with AVX-VNNI's `vpdpbusd` for the int8 products.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn vec_dot_q3tcq_q8_avx_vnni(
    rows: &[u8],
    row_bytes: usize,
    _grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: this function's features are `vec_dot`'s ISA.
    unsafe { vec_dot::<AvxVnniMac>(rows, row_bytes, acts, out) }
}

/// The row kernel, the int8 products through `M`.
///
/// # Safety
/// AVX2, FMA, F16C and `M`'s ISA enabled in the caller (this is inlined
/// into it).
#[inline(always)]
unsafe fn vec_dot<M: Mac>(rows: &[u8], row_bytes: usize, acts: &QuantizedActs, out: &mut [f32]) {
    // SAFETY: the caller's ISA.
    let c = unsafe { consts() };
    let n = acts.n.max(1);
    for (r, o) in out.chunks_mut(n).enumerate() {
        let row = &rows[r * row_bytes..(r + 1) * row_bytes];
        // Eight activation rows per pass over the row's blocks: one vector
        // accumulator each.
        for t0 in (0..acts.n).step_by(ROWS) {
            let t1 = (t0 + ROWS).min(acts.n);
            // SAFETY (both): the caller's ISA, `M`'s included.
            if t1 - t0 == 1 {
                unsafe { row_dot::<M, 1>(row, acts, t0, &c, &mut o[t0..t1]) };
            } else {
                unsafe { row_dot::<M, ROWS>(row, acts, t0, &c, &mut o[t0..t1]) };
            }
        }
    }
}

/// AVX2 version of [`super::dot::unpack_row`].
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn unpack_row(row: &[u8], out: &mut [UnpackedQ8_0]) {
    let c = consts();
    let flip = _mm256_set1_epi8(i8::MIN);
    each_block(row, out.len(), &c, |b, d, w| {
        let u = &mut out[b];
        // SAFETY: `u.q` is 32 bytes.
        unsafe { _mm256_storeu_si256(u.q.as_mut_ptr().cast(), w) };
        // Σ (level + 128) over the 32 bytes, in four u64 lanes.
        let s = _mm256_sad_epu8(_mm256_xor_si256(w, flip), _mm256_setzero_si256());
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        let s = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s)));
        u.init = -128 * (s - 128 * QK as i32);
        u.d = d;
    });
}

/// Activation rows per pass.
const ROWS: usize = 8;

/// The per-call constants of the block decode.
#[derive(Debug, Clone, Copy)]
struct Consts {
    /// [`LEVELS_3`] and the two halves of [`LEVELS_4`], in both lanes.
    t3: __m256i,
    t4_lo: __m256i,
    t4_hi: __m256i,
    /// Byte i of a broadcast qword (subset parities in its low dword, the
    /// branch ⊕ branch parities in its high one) → the byte holding step
    /// i's bit of each plane ...
    sel_p: __m256i,
    sel_x: __m256i,
    /// ... and that bit.
    bits: __m256i,
    /// Qword shifts bringing steps 8g..8g + 8's low bits to bits 0..2.
    shifts: __m256i,
}

/// `Consts::sel_p`, `sel_x` and `bits` as bytes, built at compile time
/// (the batched products unpack one row a call).
static SEL_BITS: [[u8; 32]; 3] = {
    let mut t = [[0u8; 32]; 3];
    let mut i = 0;
    while i < 32 {
        t[0][i] = (i / 8) as u8;
        t[1][i] = (4 + i / 8) as u8;
        t[2][i] = 1 << (i % 8);
        i += 1;
    }
    t
};

#[inline]
#[target_feature(enable = "avx2")]
fn consts() -> Consts {
    let table = |l: &[i8]| {
        // SAFETY: `l` holds 16 bytes.
        unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(l.as_ptr().cast())) }
    };
    let bytes = |b: &[u8; 32]| {
        // SAFETY: `b` holds 32 bytes.
        unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
    };
    Consts {
        t3: table(&LEVELS_3),
        t4_lo: table(&LEVELS_4[..16]),
        t4_hi: table(&LEVELS_4[16..]),
        sel_p: bytes(&SEL_BITS[0]),
        sel_x: bytes(&SEL_BITS[1]),
        bits: bytes(&SEL_BITS[2]),
        shifts: _mm256_set_epi64x(6, 4, 2, 0),
    }
}

/// A superblock of `k` blocks at `sb` as the block decode needs it: its
/// scale, its wide bits as one word and the wide places of its blocks.
struct Superblock {
    sb: *const u8,
    k: usize,
    d: f32,
    wide: u64,
    places: &'static [WidePlaces; SB_BLOCKS],
}

impl Superblock {
    /// The superblock of `k` (1..=[`SB_BLOCKS`]) blocks at `sb[..13·k]`.
    #[inline(always)]
    fn new(sb: &[u8], k: usize) -> Self {
        assert!((1..=SB_BLOCKS).contains(&k) && sb.len() >= k * BLOCK_BYTES);
        // Its last k − 1 ≤ 5 bytes: the 8 bytes ending the superblock (13·k
        // ≥ 8), shifted.
        let end = k * BLOCK_BYTES;
        let last8 = u64::from_le_bytes(sb[end - 8..end].try_into().expect("8 bytes"));
        Self {
            sb: sb.as_ptr(),
            k,
            d: SCALES[usize::from(sb[0])],
            wide: last8.checked_shr(8 * (9 - k as u32)).unwrap_or(0),
            places: &WIDE_PLACES[k],
        }
    }
}

/// The 32 signed levels of block `blk < s.k` of superblock `s`, `prev` the
/// previous block's branch bits (0 before a row's first); returns them and
/// this block's branch bits.
///
/// The subset parities `p` and the branch bits ⊕ the branch parities `x`
/// of its 32 steps as two scalar planes (shifts and xors of the branch
/// bits and the 6 before them), expanded together to bytes (one broadcast,
/// two shuffles) and subtracted as masks from the low bits times 4, so a
/// byte holds `4q + 2x + p`; a wide step's third bit comes from a
/// broadcast of the block's wide byte against the step's own bit
/// ([`WIDE_PLACES`]); three 16-entry shuffles and two blends give the level.
///
/// # Safety
/// AVX2 enabled in the caller (this is inlined into it); `blk < s.k`.
#[inline(always)]
unsafe fn decode_block(s: &Superblock, blk: usize, prev: u32, c: &Consts) -> (__m256i, u32) {
    debug_assert!(blk < s.k);
    // SAFETY: the caller's ISA; the block's bytes lie inside the
    // superblock's 13·k (`Superblock::new` checked its length, the caller
    // `blk < k`): branch bytes at 1 + 4·blk, low bits at 1 + 4k + 8·blk.
    unsafe {
        let br = s.sb.add(1 + 4 * blk).cast::<u32>().read_unaligned();
        // Bit i of plane(m) is the branch bit m + 1 steps before step i.
        let h = (u64::from(br) << 32) | u64::from(prev);
        let plane = |m: u32| (h >> (31 - m)) as u32;
        let (mut p, mut r) = (0u32, plane(NU - 1));
        for m in 0..NU - 1 {
            if (P_TAPS >> m) & 1 == 1 {
                p ^= plane(m);
            }
            if (R_TAPS >> m) & 1 == 1 {
                r ^= plane(m);
            }
        }
        let planes = _mm256_set1_epi64x(((u64::from(br ^ r) << 32) | u64::from(p)) as i64);
        let lo8 = _mm_loadu_si64(s.sb.add(1 + 4 * s.k + 8 * blk));
        let q = _mm256_and_si256(
            _mm256_srlv_epi64(_mm256_broadcastq_epi64(lo8), c.shifts),
            _mm256_set1_epi8(3),
        );
        // 4q + p + 2x, the masks being 0 or −1.
        let x = bit_set(planes, c.sel_x, c.bits);
        let idx = _mm256_sub_epi8(
            _mm256_sub_epi8(_mm256_slli_epi16::<2>(q), bit_set(planes, c.sel_p, c.bits)),
            _mm256_add_epi8(x, x),
        );
        let at = &s.places[blk];
        let bit = _mm256_loadu_si256(at.bit.as_ptr().cast());
        let wb = _mm256_set1_epi8((s.wide >> at.start) as u8 as i8);
        // −1 where a wide step's third bit is set (and at every other step,
        // which the last blend does not take from `wide4`).
        let third = _mm256_cmpeq_epi8(_mm256_and_si256(wb, bit), bit);
        let wide4 = _mm256_blendv_epi8(
            _mm256_shuffle_epi8(c.t4_lo, idx),
            _mm256_shuffle_epi8(c.t4_hi, idx),
            third,
        );
        let mask = _mm256_loadu_si256(at.mask.as_ptr().cast());
        let w = _mm256_blendv_epi8(_mm256_shuffle_epi8(c.t3, idx), wide4, mask);
        (w, br)
    }
}

/// −1 at byte `i` where the bit `bits[i]` of byte `sel[i]` of `planes` is
/// set, 0 elsewhere.
#[inline]
#[target_feature(enable = "avx2")]
fn bit_set(planes: __m256i, sel: __m256i, bits: __m256i) -> __m256i {
    let v = _mm256_and_si256(_mm256_shuffle_epi8(planes, sel), bits);
    _mm256_cmpeq_epi8(v, bits)
}

/// Calls `f(b, d, levels)` for each block `b` of a row of `nb` blocks in
/// order, `d` its superblock's scale and `levels` its 32 signed levels
/// ([`decode_block`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn each_block(row: &[u8], nb: usize, c: &Consts, mut f: impl FnMut(usize, f32, __m256i)) {
    assert!(row.len() >= nb * BLOCK_BYTES, "row shorter than its blocks");
    let mut prev = 0u32;
    for b0 in (0..nb).step_by(SB_BLOCKS) {
        let k = (nb - b0).min(SB_BLOCKS);
        let s = Superblock::new(&row[b0 * BLOCK_BYTES..], k);
        for blk in 0..k {
            // SAFETY: AVX2 is this function's target feature; blk < k.
            let (w, br) = unsafe { decode_block(&s, blk, prev, c) };
            f(b0 + blk, s.d, w);
            prev = br;
        }
    }
}

/// `out[j] = row · acts[t0 + j]` for the `out.len() ≤ N` activation rows
/// from `t0`. Where the activations share one scale per superblock
/// ([`QuantizedActs::shared`], as [`super::rotated_acts`] makes them) a
/// superblock's blocks sum exactly in i32 and meet the scales once;
/// otherwise each block does. The int8 products through `M`.
///
/// # Safety
/// AVX2, FMA, F16C and `M`'s ISA enabled in the caller (this is inlined
/// into it).
#[inline(always)]
unsafe fn row_dot<M: Mac, const N: usize>(
    row: &[u8],
    acts: &QuantizedActs,
    t0: usize,
    c: &Consts,
    out: &mut [f32],
) {
    let nb = acts.blocks;
    assert!(row.len() >= nb * BLOCK_BYTES, "row shorter than its blocks");
    let rows = out.len().min(N);
    let shared = acts.shared == SB_BLOCKS;
    let (qs, ds): ([&[i8]; N], [&[f32]; N]) = (
        std::array::from_fn(|j| acts.row_qs(t0 + j.min(rows - 1))),
        std::array::from_fn(|j| acts.row_d(t0 + j.min(rows - 1))),
    );
    for j in 0..rows {
        assert!(
            qs[j].len() >= nb * QK && ds[j].len() >= nb,
            "activation row too short"
        );
    }
    // SAFETY: the caller's ISA (every intrinsic and `M`'s products); row
    // t0 + j of the codes holds `nb` blocks of 32 and its scales `nb` values
    // (checked above), `b < nb`; `blk < k` for the block decode.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        let mut prev = 0u32;
        for b0 in (0..nb).step_by(SB_BLOCKS) {
            let k = (nb - b0).min(SB_BLOCKS);
            let s = Superblock::new(&row[b0 * BLOCK_BYTES..], k);
            let mut isum = [_mm256_setzero_si256(); N];
            for blk in 0..k {
                let (w, br) = decode_block(&s, blk, prev, c);
                prev = br;
                let b = b0 + blk;
                let w_abs = _mm256_abs_epi8(w);
                for j in 0..rows {
                    let a = _mm256_loadu_si256(qs[j].as_ptr().add(b * QK).cast());
                    isum[j] = M::dot_acc(isum[j], w_abs, _mm256_sign_epi8(a, w));
                }
                if !shared || blk + 1 == k {
                    for j in 0..rows {
                        let scale = _mm256_set1_ps(s.d * *ds[j].get_unchecked(b));
                        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), scale, acc[j]);
                        isum[j] = _mm256_setzero_si256();
                    }
                }
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            let s = _mm_add_ps(_mm256_castps256_ps128(*a), _mm256_extractf128_ps::<1>(*a));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            *o = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
        }
    }
}
