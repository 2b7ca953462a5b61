//! AVX-512 `q3-tcq` (F, BW, VL, VBMI, VNNI, GFNI, and BMI2's `pdep`): the
//! two blocks of a pair (blocks `2u, 2u + 1` of a superblock; a row's odd
//! last block alone) decoded at once into one 64-byte vector, steps in
//! order, with no per-step scalar work:
//!
//! - subsets: one `vpermb` gives each group of 8 steps the two branch bytes
//!   around it (the 6 branch bits before the pair come along), one
//!   `vpmultishiftqb` gives each step the byte of the branch bits `i − 6 ..=
//!   i`, and one `vgf2p8affineqb` with a fixed bit matrix computes both
//!   parities of [`super::subset`] from it;
//! - the 2-bit `q`s: one qword permute and one `vpmultishiftqb`;
//! - wide steps: `pdep` spreads the pair's third bits onto their steps'
//!   bits of a qword, which goes through memory to a broadcast load (a
//!   mask from a general register takes one of Zen 5's two shuffle slots:
//!   docs/BENCH.md), and one `vpmultishiftqb` puts bit `i` on bit 4 of
//!   byte `i`;
//! - two `vpternlogq` merge the index `4q + subset (+16 third bit) (+32 on
//!   a wide step)`, one `vpermb` into a 64-byte table gives level + 128,
//!   unsigned, for `vpdpbusd`. The offset is paid from the activations'
//!   `d · Σq` once per superblock.
//!
//! A decode (one activation row) takes its rows two at a time, rows `r`
//! and `r + rows/2`, superblock by superblock ([`each_pair2`]): each row's
//! work is one chain of dependent steps, and two give the core something
//! to overlap; two sequential streams keep the hardware prefetchers on
//! (rows `r` and `r + 1` streamed at 0.53-0.63 x; docs/BENCH.md).

// `for j in 0..N` (`u in 0..pairs`) indexes several per-activation-row
// (per-pair) arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{
    BLOCK_BYTES, LEVELS_3, LEVELS_4, NU, P_TAPS, QK, R_TAPS, SB_BLOCKS, SCALES, wide_masks,
};
use crate::ggml::dot::tile::q8_0::UnpackedQ8_0;
use crate::quant::act::QuantizedActs;

/// What the decoded bytes add to each level: `vpdpbusd` takes unsigned
/// weights.
const OFFSET: i8 = i8::MIN;

/// Pairs per full superblock.
const PAIRS: usize = SB_BLOCKS / 2;
/// How far ahead of the decode each of the two row streams prefetches
/// (bytes): on Zen 5 the hardware prefetcher alone left the 768x2048
/// shape (rows of 832 bytes, 0.6 MB matrices) 1.17 x slower (docs/BENCH.md).
const PREFETCH_AHEAD: usize = 2048;

/// The `vgf2p8affineqb` matrix of the subsets: applied to the byte whose
/// bit `k` is the branch bit of step `i − 6 + k` (bit 6: step `i`'s own,
/// bits 0..6 the state, oldest first), row 0 (byte 7) is the parity `p`
/// over [`P_TAPS`], row 1 (byte 6) the branch bit ⊕ `r` (the oldest bit ⊕
/// the parity over [`R_TAPS`]): the subset `2·(b ⊕ r) + p`.
const SUBSET_MATRIX: u64 = {
    // State bit s (0 = newest) is bit 5 - s of the byte.
    let (mut p_row, mut b_row) = (0u64, (1 << 6) | 1);
    let mut s = 0;
    while s < NU - 1 {
        if (P_TAPS >> s) & 1 == 1 {
            p_row |= 1 << (5 - s);
        }
        if (R_TAPS >> s) & 1 == 1 {
            b_row |= 1 << (5 - s);
        }
        s += 1;
    }
    (p_row << 56) | (b_row << 48)
};

/// Per superblock size `K` and pair `u`: 32 (the wide table's offset) on
/// the pair's wide steps, 0 elsewhere.
static WIDE_BYTES: [[[u8; 64]; PAIRS]; SB_BLOCKS + 1] = {
    let masks = wide_masks();
    let mut t = [[[0; 64]; PAIRS]; SB_BLOCKS + 1];
    let mut k = 1;
    while k <= SB_BLOCKS {
        let mut i = 0;
        while i < QK * k {
            if (masks[k][i / QK] >> (i % QK)) & 1 == 1 {
                t[k][i / 64][i % 64] = 32;
            }
            i += 1;
        }
        k += 1;
    }
    t
};

/// The per-call constants of the pair decode.
#[derive(Debug, Clone, Copy)]
struct Consts {
    /// `table[i]`: level + 128 of index `i`, [`LEVELS_3`] at 0..16 and
    /// [`LEVELS_4`] at 32..64.
    table: __m512i,
    /// For pair `u`: qword `l` takes bytes `7 + 8u + l ..` of the
    /// superblock's branch window (8 bytes before its branch bytes, then
    /// them), so its bytes 0 and 1 are the branch bytes around steps
    /// `8l .. 8l + 8` of the pair.
    window_perm: [__m512i; PAIRS],
    /// Byte `e` of each qword from bit `e + 2`: the branch bits of steps
    /// `i − 6 ..= i` (and `i + 1` at bit 7).
    window_shift: __m512i,
    /// Qword `l` takes the low-`q` bytes of block `l / 4`, ...
    q_perm: __m512i,
    /// ... and byte `e` of it bits `8e + 2(l % 4) − 2 ..` (mod 64): the `q`
    /// of step `8(l % 4) + e` on bits 2..4.
    q_shift: __m512i,
    /// Byte `i` from bit `i − 4` (mod 64) of a broadcast qword: bit `i` of
    /// the pair's third-bit mask on bit 4.
    third_shift: __m512i,
}

/// The byte vectors of [`Consts`], built at compile time: the batched
/// products unpack one row a call, and building them per call took longer
/// than the row's decode.
struct ConstBytes {
    table: [u8; 64],
    window_perm: [[u8; 64]; PAIRS],
    window_shift: [u8; 64],
    q_shift: [u8; 64],
    third_shift: [u8; 64],
}

static CONST_BYTES: ConstBytes = {
    let mut c = ConstBytes {
        table: [0; 64],
        window_perm: [[0; 64]; PAIRS],
        window_shift: [0; 64],
        q_shift: [0; 64],
        third_shift: [0; 64],
    };
    let mut i = 0;
    while i < 64 {
        c.table[i] = match i {
            0..16 => LEVELS_3[i].wrapping_sub(OFFSET) as u8,
            32..64 => LEVELS_4[i - 32].wrapping_sub(OFFSET) as u8,
            _ => 0,
        };
        let mut u = 0;
        while u < PAIRS {
            c.window_perm[u][i] = (7 + 8 * u + i / 8 + i % 8) as u8;
            u += 1;
        }
        c.window_shift[i] = (i % 8 + 2) as u8;
        c.q_shift[i] = ((8 * (i % 8) + 2 * ((i / 8) % 4) + 62) % 64) as u8;
        c.third_shift[i] = ((i + 60) % 64) as u8;
        i += 1;
    }
    c
};

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
fn consts() -> Consts {
    let load = |b: &[u8; 64]| {
        // SAFETY: `b` holds 64 bytes.
        unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
    };
    let c = &CONST_BYTES;
    const { assert!(PAIRS == 3, "one window permute per pair") };
    Consts {
        table: load(&c.table),
        window_perm: [
            load(&c.window_perm[0]),
            load(&c.window_perm[1]),
            load(&c.window_perm[2]),
        ],
        window_shift: load(&c.window_shift),
        q_perm: _mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1),
        q_shift: load(&c.q_shift),
        third_shift: load(&c.third_shift),
    }
}

/// What receives a row's decoded pairs, superblock by superblock.
trait Pairs {
    /// Superblock `b0..b0 + k` of scale `d` begins.
    ///
    /// # Safety
    /// The decoder's features available.
    unsafe fn superblock(&mut self, b0: usize, k: usize, d: f32);
    /// Pair `u` of the superblock: blocks `b0 + 2u` and, if `two`,
    /// `b0 + 2u + 1`; `levels` their 64 level + 128 bytes (past a lone
    /// block, garbage).
    ///
    /// # Safety
    /// The decoder's features available.
    unsafe fn pair(&mut self, b0: usize, u: usize, two: bool, levels: __m512i);
}

/// Decodes a row of `nb` blocks at `row` into `sink`, in order. Full
/// superblocks are decoded one ahead of the sink: the next one's loads and
/// lookups come before this one's products in the instruction stream, so
/// they start while the products wait on theirs.
///
/// # Safety
/// The features below available; `nb · BLOCK_BYTES` readable bytes at `row`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
unsafe fn each_pair(row: *const u8, nb: usize, c: &Consts, sink: &mut impl Pairs) {
    let full = nb / SB_BLOCKS;
    // The 8 branch bytes before the next superblock's; the row starts in
    // state 0: eight zero bytes before its first.
    static ZERO: [u8; 8] = [0; 8];
    let mut after = ZERO.as_ptr();
    let mut b0 = 0;
    // SAFETY (whole body): superblock b0..b0 + k lies in the row.
    unsafe {
        if full > 0 {
            let mut cur;
            (cur, after) = superblock::<SB_BLOCKS>(row, after, c);
            for s in 0..full {
                let sb = row.add(b0 * BLOCK_BYTES);
                let next = if s + 1 < full {
                    superblock::<SB_BLOCKS>(sb.add(SB_BLOCKS * BLOCK_BYTES), after, c)
                } else {
                    ([_mm512_setzero_si512(); PAIRS], after)
                };
                sink.superblock(b0, SB_BLOCKS, SCALES[usize::from(*sb)]);
                for (u, &levels) in cur.iter().enumerate() {
                    sink.pair(b0, u, true, levels);
                }
                (cur, after) = next;
                b0 += SB_BLOCKS;
            }
        }
        if b0 < nb {
            let k = nb - b0;
            let sb = row.add(b0 * BLOCK_BYTES);
            sink.superblock(b0, k, SCALES[usize::from(*sb)]);
            let levels = short_superblock(sb, k, after, c);
            for (u, &levels) in levels.iter().enumerate().take(k.div_ceil(2)) {
                sink.pair(b0, u, 2 * u + 1 < k, levels);
            }
        }
    }
}

/// [`superblock`] of a row's last superblock, of `k < SB_BLOCKS` blocks.
///
/// # Safety
/// As [`superblock`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
unsafe fn short_superblock(
    sb: *const u8,
    k: usize,
    prev: *const u8,
    c: &Consts,
) -> [__m512i; PAIRS] {
    // SAFETY: the caller's contract.
    unsafe {
        match k {
            5 => superblock::<5>(sb, prev, c).0,
            4 => superblock::<4>(sb, prev, c).0,
            3 => superblock::<3>(sb, prev, c).0,
            2 => superblock::<2>(sb, prev, c).0,
            _ => superblock::<1>(sb, prev, c).0,
        }
    }
}

/// [`each_pair`] over two rows of `nb` blocks at once, superblock by
/// superblock: two independent chains for the core to overlap.
///
/// # Safety
/// As [`each_pair`], for both rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
unsafe fn each_pair2<P: Pairs>(rows: [*const u8; 2], nb: usize, c: &Consts, sinks: &mut [P; 2]) {
    let full = nb / SB_BLOCKS;
    static ZERO: [u8; 8] = [0; 8];
    let mut after = [ZERO.as_ptr(); 2];
    let mut b0 = 0;
    // SAFETY (whole body): superblock b0..b0 + k lies in both rows.
    unsafe {
        for _ in 0..full {
            let sb = [rows[0].add(b0 * BLOCK_BYTES), rows[1].add(b0 * BLOCK_BYTES)];
            for s in sb {
                let ahead = s.wrapping_add(PREFETCH_AHEAD).cast::<i8>();
                _mm_prefetch::<_MM_HINT_T0>(ahead);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
            }
            let (l0, a0) = superblock::<SB_BLOCKS>(sb[0], after[0], c);
            let (l1, a1) = superblock::<SB_BLOCKS>(sb[1], after[1], c);
            after = [a0, a1];
            let [s0, s1] = &mut *sinks;
            s0.superblock(b0, SB_BLOCKS, SCALES[usize::from(*sb[0])]);
            s1.superblock(b0, SB_BLOCKS, SCALES[usize::from(*sb[1])]);
            for u in 0..PAIRS {
                s0.pair(b0, u, true, l0[u]);
                s1.pair(b0, u, true, l1[u]);
            }
            b0 += SB_BLOCKS;
        }
        if b0 < nb {
            let k = nb - b0;
            let sb = [rows[0].add(b0 * BLOCK_BYTES), rows[1].add(b0 * BLOCK_BYTES)];
            let l0 = short_superblock(sb[0], k, after[0], c);
            let l1 = short_superblock(sb[1], k, after[1], c);
            let [s0, s1] = sinks;
            s0.superblock(b0, k, SCALES[usize::from(*sb[0])]);
            s1.superblock(b0, k, SCALES[usize::from(*sb[1])]);
            for u in 0..k.div_ceil(2) {
                s0.pair(b0, u, 2 * u + 1 < k, l0[u]);
                s1.pair(b0, u, 2 * u + 1 < k, l1[u]);
            }
        }
    }
}

/// The pairs of one superblock of `K` blocks at `sb`, after the 8 branch
/// bytes at `prev`: each pair's 64 level + 128 bytes (past a lone block,
/// garbage; past the superblock's pairs, zero), and the superblock's last
/// 8 branch bytes (for `K` of 1, only ever a row's last, nothing).
///
/// # Safety
/// The features below available; `K · BLOCK_BYTES` readable bytes at `sb`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
unsafe fn superblock<const K: usize>(
    sb: *const u8,
    prev: *const u8,
    c: &Consts,
) -> ([__m512i; PAIRS], *const u8) {
    let low_q = _mm512_set1_epi8(0x0c);
    let sixteen = _mm512_set1_epi8(16);
    let matrix = _mm512_set1_epi64(SUBSET_MATRIX as i64);
    let mut out = [_mm512_setzero_si512(); PAIRS];
    // SAFETY (whole body): every read below lies in the superblock's
    // `13·K` bytes (the window's load masks off the bytes before and past
    // its branch bytes).
    unsafe {
        // [prev, the K·4 branch bytes], zero past them.
        let branch = _mm256_maskz_loadu_epi8(
            (((1u64 << (4 * K)) - 1) << 8) as u32,
            sb.wrapping_sub(7).cast(),
        );
        // (A load, where a general register's value would take a shuffle.)
        let window = _mm512_zextsi256_si512(_mm256_mask_loadu_epi64(branch, 1, prev.cast()));
        // The K - 1 bytes of wide bits end the superblock: the 8 bytes
        // ending there, shifted down.
        let mut wide_bits = if K > 1 {
            sb.add(BLOCK_BYTES * K - 8).cast::<u64>().read_unaligned() >> (8 * (9 - K))
        } else {
            0
        };
        for (u, out) in out.iter_mut().enumerate().take(K.div_ceil(2)) {
            let blk = 2 * u;
            let two = blk + 1 < K;
            let steps = _mm512_multishift_epi64_epi8(
                c.window_shift,
                _mm512_permutexvar_epi8(c.window_perm[u], window),
            );
            let subset = _mm512_gf2p8affine_epi64_epi8::<0>(steps, matrix);
            let lo_at = sb.add(1 + 4 * K + 8 * blk);
            let lo = if two {
                _mm_loadu_si128(lo_at.cast())
            } else {
                _mm_loadl_epi64(lo_at.cast())
            };
            let q = _mm512_multishift_epi64_epi8(
                c.q_shift,
                _mm512_permutexvar_epi64(c.q_perm, _mm512_zextsi128_si512(lo)),
            );
            let wide = u64::from(super::wide_mask(K, blk))
                | if two {
                    u64::from(super::wide_mask(K, blk + 1)) << QK
                } else {
                    0
                };
            let third = _pdep_u64(wide_bits, wide);
            wide_bits >>= wide.count_ones();
            // (q & 0x0c) | subset: (a & b) | c.
            let idx = _mm512_ternarylogic_epi64::<0xea>(q, low_q, subset);
            // | 32 on wide steps | 16 for a third bit: a | b | c. The third
            // bits through memory and a broadcast load, one to each byte by
            // `vpmultishiftqb`: a mask from a general register would take a
            // shuffle slot.
            let slot = [third];
            let bits = _mm512_set1_epi64(slot.as_ptr().read_volatile() as i64);
            let idx = _mm512_ternarylogic_epi64::<0xfe>(
                idx,
                _mm512_loadu_si512(WIDE_BYTES[K][u].as_ptr().cast()),
                _mm512_and_si512(_mm512_multishift_epi64_epi8(c.third_shift, bits), sixteen),
            );
            *out = _mm512_permutexvar_epi8(idx, c.table);
        }
        let last = if K > 1 { sb.add(1 + 4 * K - 8) } else { prev };
        (out, last)
    }
}

/// AVX-512 version of [`super::dot::vec_dot_q3tcq_q8_ref`], over the
/// `out.len() / acts.n` consecutive rows of `row_bytes` bytes in `rows`.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, GFNI, BMI2, AVX2, FMA and F16C must
/// be available.
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,bmi2,avx2,fma,f16c"
)]
pub(crate) unsafe fn vec_dot_q3tcq_q8(
    rows: &[u8],
    row_bytes: usize,
    _grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let c = consts();
    let n = acts.n.max(1);
    assert!(
        row_bytes >= acts.blocks * BLOCK_BYTES && rows.len() >= out.len() / n * row_bytes,
        "rows shorter than their blocks"
    );
    let shared = acts.shared == SB_BLOCKS;
    // Unless the scales are shared: each activation row's block scales, 8
    // copies each (the scales of a pair's 16 dot-product lanes in one
    // load), and a block of zeros.
    let lanes: Vec<Vec<f32>> = if shared {
        Vec::new()
    } else {
        (0..acts.n)
            .map(|t| {
                let mut l = vec![0f32; 8 * (acts.blocks + 1)];
                for (l, &d) in l.chunks_exact_mut(8).zip(acts.row_d(t)) {
                    l.fill(d);
                }
                l
            })
            .collect()
    };
    let nrows = out.len() / n;
    let mut paired = 0;
    if acts.n == 1 && shared {
        // Rows r and r + half: two sequential streams through the matrix.
        let half = nrows / 2;
        for r in 0..half {
            // SAFETY: both rows hold their blocks (asserted); the features
            // are this function's.
            let v = unsafe {
                row_dot2(
                    [
                        rows[r * row_bytes..].as_ptr(),
                        rows[(r + half) * row_bytes..].as_ptr(),
                    ],
                    acts,
                    &c,
                )
            };
            out[r] = v[0];
            out[r + half] = v[1];
        }
        // An odd last row goes alone, below.
        paired = 2 * half;
    }
    for (r, o) in out.chunks_mut(n).enumerate().skip(paired) {
        let row = rows[r * row_bytes..].as_ptr();
        // Activation rows 8, then 4, 2, 1 at a time: one accumulator each,
        // every pair decoded once per pass.
        let mut t0 = 0;
        while t0 < acts.n {
            let o = &mut o[t0..];
            // SAFETY: the row holds its blocks (asserted); the features are
            // this function's; `shared` was checked.
            t0 += unsafe {
                match (acts.n - t0, shared) {
                    (8.., true) => row_dot::<8, true>(row, acts, t0, &lanes, &c, o),
                    (4..=7, true) => row_dot::<4, true>(row, acts, t0, &lanes, &c, o),
                    (2..=3, true) => row_dot::<2, true>(row, acts, t0, &lanes, &c, o),
                    (_, true) => row_dot::<1, true>(row, acts, t0, &lanes, &c, o),
                    (8.., false) => row_dot::<8, false>(row, acts, t0, &lanes, &c, o),
                    (4..=7, false) => row_dot::<4, false>(row, acts, t0, &lanes, &c, o),
                    (2..=3, false) => row_dot::<2, false>(row, acts, t0, &lanes, &c, o),
                    (_, false) => row_dot::<1, false>(row, acts, t0, &lanes, &c, o),
                }
            };
        }
    }
}

/// The products of one row with `N` activation rows. `SHARED`: the
/// activations share one scale per superblock ([`QuantizedActs::shared`]),
/// so a superblock's products sum in i32 (the offset removed exactly from
/// `Σq`) and meet the scales once; otherwise every pair's i32 lanes become
/// f32 and meet their blocks' scales.
struct RowDot<const N: usize, const SHARED: bool> {
    /// Row `t0 + j`'s codes, scales, 8 copies of each block's scale, and
    /// `Σq` and `d · Σq` per block.
    qs: [*const i8; N],
    ds: [*const f32; N],
    lanes: [*const f32; N],
    qsums: [*const i32; N],
    sums: [*const f32; N],
    /// The superblock's scale (times the activations' when `SHARED`).
    d: [__m512; N],
    /// The superblock's sums: i32 (`SHARED`) or f32 before `d`.
    part: [__m512i; N],
    acc: [__m512; N],
    /// Σ d · d_a · Σq: what the offset added, per lane (not `SHARED`).
    offset: [__m512; N],
}

impl<const N: usize, const SHARED: bool> RowDot<N, SHARED> {
    /// Nothing summed yet, against activation rows `t0..t0 + N` (`lanes`:
    /// their block scales, 8 copies each, unused when `SHARED`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    fn new(acts: &QuantizedActs, t0: usize, lanes: &[Vec<f32>]) -> Self {
        let nb = acts.blocks;
        let zero = _mm512_setzero_ps();
        Self {
            qs: std::array::from_fn(|j| acts.row_qs(t0 + j).as_ptr()),
            ds: std::array::from_fn(|j| acts.row_d(t0 + j).as_ptr()),
            lanes: std::array::from_fn(|j| lanes.get(t0 + j).map_or(std::ptr::null(), Vec::as_ptr)),
            qsums: std::array::from_fn(|j| acts.qsums[(t0 + j) * nb..].as_ptr()),
            sums: std::array::from_fn(|j| acts.sums[(t0 + j) * nb..].as_ptr()),
            d: [zero; N],
            part: [_mm512_setzero_si512(); N],
            acc: [zero; N],
            offset: [zero; N],
        }
    }

    /// The row's products with the `N` activation rows.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    fn finish(mut self) -> [f32; N] {
        self.flush();
        let mut out = [0f32; N];
        for (j, o) in out.iter_mut().enumerate() {
            *o = _mm512_reduce_add_ps(self.acc[j]);
            if !SHARED {
                *o += f32::from(OFFSET) * _mm512_reduce_add_ps(self.offset[j]);
            }
        }
        out
    }

    /// Adds the superblock's part to the row's.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    fn flush(&mut self) {
        for j in 0..N {
            let part = if SHARED {
                _mm512_cvtepi32_ps(self.part[j])
            } else {
                _mm512_castsi512_ps(self.part[j])
            };
            self.acc[j] = _mm512_fmadd_ps(part, self.d[j], self.acc[j]);
        }
    }
}

impl<const N: usize, const SHARED: bool> Pairs for RowDot<N, SHARED> {
    #[inline]
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,bmi2,avx2,fma,f16c"
    )]
    unsafe fn superblock(&mut self, b0: usize, k: usize, d: f32) {
        self.flush();
        let mask = (1 << k) - 1;
        for j in 0..N {
            // SAFETY: blocks b0..b0 + k of row t0 + j exist.
            unsafe {
                if SHARED {
                    self.d[j] = _mm512_set1_ps(d * *self.ds[j].add(b0));
                    // -128 · Σq per block: the offset, exactly.
                    let qsums = _mm512_maskz_loadu_epi32(mask, self.qsums[j].add(b0));
                    self.part[j] =
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(qsums));
                } else {
                    self.d[j] = _mm512_set1_ps(d);
                    self.part[j] = _mm512_setzero_si512();
                    let sums = _mm512_maskz_loadu_ps(mask, self.sums[j].add(b0));
                    self.offset[j] = _mm512_fmadd_ps(self.d[j], sums, self.offset[j]);
                }
            }
        }
    }

    #[inline]
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,bmi2,avx2,fma,f16c"
    )]
    unsafe fn pair(&mut self, b0: usize, u: usize, two: bool, levels: __m512i) {
        let b = b0 + 2 * u;
        for j in 0..N {
            // SAFETY: block b (and b + 1 when `two`) of row t0 + j exists,
            // and 16 lane scales from block b (`lanes` pads one block); the
            // masked load reads nothing past a lone block.
            unsafe {
                let at = self.qs[j].add(b * QK);
                let a = if two {
                    _mm512_loadu_si512(at.cast())
                } else {
                    _mm512_maskz_loadu_epi8(u64::from(u32::MAX), at)
                };
                if SHARED {
                    self.part[j] = _mm512_dpbusd_epi32(self.part[j], levels, a);
                } else {
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), levels, a);
                    let scale = _mm512_loadu_ps(self.lanes[j].add(8 * b));
                    let part = _mm512_castsi512_ps(self.part[j]);
                    let part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, part);
                    self.part[j] = _mm512_castps_si512(part);
                }
            }
        }
    }
}

/// `out[j] = row · acts[t0 + j]` for `j < N`; returns `N`. `lanes[j]`:
/// row `t0 + j`'s block scales, 8 copies each, one block of zeros after
/// (unused when `SHARED`).
///
/// # Safety
/// The features below available; the row's blocks readable at `row`; rows
/// `t0..t0 + N` of `acts` exist; `SHARED` only if the activations share
/// their scales per superblock.
#[inline]
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,bmi2,avx2,fma,f16c"
)]
unsafe fn row_dot<const N: usize, const SHARED: bool>(
    row: *const u8,
    acts: &QuantizedActs,
    t0: usize,
    lanes: &[Vec<f32>],
    c: &Consts,
    out: &mut [f32],
) -> usize {
    let mut sink = RowDot::<N, SHARED>::new(acts, t0, lanes);
    // SAFETY: this function's contract.
    unsafe { each_pair(row, acts.blocks, c, &mut sink) };
    out[..N].copy_from_slice(&sink.finish());
    N
}

/// Two rows against one activation row of shared scales.
///
/// # Safety
/// As [`row_dot`] with `N` 1 and `SHARED`, for both rows.
#[inline]
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,bmi2,avx2,fma,f16c"
)]
unsafe fn row_dot2(rows: [*const u8; 2], acts: &QuantizedActs, c: &Consts) -> [f32; 2] {
    let mut sinks = [
        RowDot::<1, true>::new(acts, 0, &[]),
        RowDot::<1, true>::new(acts, 0, &[]),
    ];
    // SAFETY: this function's contract.
    unsafe { each_pair2(rows, acts.blocks, c, &mut sinks) };
    let [s0, s1] = sinks;
    [s0.finish()[0], s1.finish()[0]]
}

/// The unpacked blocks of one row.
struct Unpack<'a> {
    out: &'a mut [UnpackedQ8_0],
    d: f32,
}

impl Pairs for Unpack<'_> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
    unsafe fn superblock(&mut self, _b0: usize, _k: usize, d: f32) {
        self.d = d;
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
    unsafe fn pair(&mut self, b0: usize, u: usize, two: bool, levels: __m512i) {
        let signed = _mm512_xor_si512(levels, _mm512_set1_epi8(OFFSET));
        // Σ (level + 128) per 8 bytes: qwords 0..4 the first block's.
        let sums = _mm512_sad_epu8(levels, _mm512_setzero_si512());
        let b = b0 + 2 * u;
        for (h, o) in self.out[b..]
            .iter_mut()
            .take(1 + usize::from(two))
            .enumerate()
        {
            let half = if h == 0 {
                _mm512_castsi512_si256(signed)
            } else {
                _mm512_extracti64x4_epi64::<1>(signed)
            };
            // SAFETY: `o.q` is 32 bytes.
            unsafe { _mm256_storeu_si256(o.q.as_mut_ptr().cast(), half) };
            let s = _mm512_mask_reduce_add_epi64(0x0f << (4 * h), sums) as i32;
            o.init = -128 * (s - 128 * QK as i32);
            o.d = self.d;
        }
    }
}

/// AVX-512 version of [`super::dot::unpack_row`].
///
/// # Safety
/// AVX-512 F, BW, VL and VBMI, GFNI, BMI2, AVX2, FMA and F16C must be
/// available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
pub(crate) unsafe fn unpack_row(row: &[u8], out: &mut [UnpackedQ8_0]) {
    let c = consts();
    let nb = out.len();
    assert!(row.len() >= nb * BLOCK_BYTES, "row shorter than its blocks");
    // SAFETY: the row holds its blocks (asserted); the features are this
    // function's.
    unsafe { each_pair(row.as_ptr(), nb, &c, &mut Unpack { out, d: 0.0 }) };
}
