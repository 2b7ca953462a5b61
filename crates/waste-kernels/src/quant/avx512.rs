//! The AVX-512 row dot products of the block formats: AVX-512 F, BW, VL,
//! VNNI and VBMI instructions on 256-bit vectors (Ice Lake, Zen 4 and
//! later; `quant::dispatch` detects them and otherwise gives the AVX-512
//! table the AVX2 kernels). Read `quant/avx2.rs` first.
//!
//! Why 256 bits: on Zen 4 (the host this was tuned on) a 512-bit operation
//! costs two 256-bit ones and a broadcast load takes no vector pipe only at
//! 256 bits. What AVX-512 buys is instructions: `vpdpbusd` (one per 32
//! weights instead of `maddubs` + `madd`), `vpermb` (any byte from a whole
//! vector, two blocks decoded from one load), `vpternlogd` and masks.
//!
//! - `q3` ([`Avx512Block::PAIRED`], [`stream_pairs`]): a row is taken 4 pairs
//!   of blocks (104 bytes) at a time. One 32-byte load per pair holds both
//!   blocks; they decode to two vectors in the activations' `qs_pair` order,
//!   where i32 lane `d` of a dot product belongs to block `d % 2` of the
//!   pair, so the two dots add in i32 and one conversion and one FMA with a
//!   broadcast of the two blocks' scales finish the pair. The 8 scale bytes
//!   come from the same 4 loads (two `vpermt2b`) and become f32 bit for bit
//!   with the table (`quant::scale::mantissa_bits`); no scalar work per
//!   block. Weights are grid + 64, unsigned; the offset is paid from the
//!   exact activation sums once per 8 blocks. On CPUs with full-width
//!   512-bit units (the `avx512-vnni` table) the 8 blocks decode at once
//!   ([`Avx512Block::decode_oct`]): one `vpermt2b` gathers each block's
//!   `qs` into a 64-bit lane, one its `qh`, and per 8 weights of every
//!   block a qword shift, a dword rotation and one table `vpermb` make a
//!   vector against the activations' `qs_oct` order; the four vectors sum
//!   in i32 and meet the 8 scales once (1.44-1.55 x the pairs on Zen 5,
//!   whose two shuffle pipes the pairs' three `vpermb` each filled; the
//!   pairs, one 512-bit vector each ([`Avx512Block::decode_pair512`]),
//!   take a row's last blocks).
//! - `q4` ([`stream_blocks`]): one block per vector, unsigned weights grid +
//!   128 for `vpdpbusd`, whose i32 accumulator starts at `-16 · Σq` per
//!   lane, so the offset cancels exactly; the chunk stream of `avx2.rs`
//!   (scales copied ahead with scalar loads). On CPUs with full-width
//!   512-bit units ([`stream_twos`], the `avx512-vnni` table; Zen 4 keeps
//!   the above as `avx512-vnni-half`) two blocks decode from one masked
//!   64-byte load to one 512-bit vector in the `qs_pair` order, their scale
//!   bytes picked from the same loads and made f32 as `q3`'s: the per-block
//!   scalar work and half the instructions gone, 1.4-1.5 x on Zen 5.
//!   `q8` takes the AVX2 kernel (`q8/avx512.rs`).

// `for j in 0..N` indexes several per-activation-row arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, CHUNK, Copier, PREFETCH, RowSums, Rows, check, lut, unroll};

/// A block format as the AVX-512 kernels see it.
pub(crate) trait Avx512Block: Avx2Block {
    /// Blocks decode in pairs ([`Avx512Block::decode_pair`]) against the
    /// activations' `qs_pair`; otherwise one by one ([`Avx512Block::decode_u8`]).
    const PAIRED: bool;
    /// Bytes before a pair that its 32-byte window starts at.
    const PAIR_LEAD: usize = 0;
    /// What an unpaired decode adds to every grid value to make it a byte
    /// 0..=255 (paired formats use [`Avx2Block::OFFSET`]).
    const VNNI_OFFSET: i32;
    /// Constants set up once per call.
    type Consts: Copy;

    /// The constants of `grid`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VBMI must be available.
    unsafe fn consts(grid: &[i8; 16]) -> Self::Consts;
    /// Unpaired: the 32 weights of the block at `blk`, in order, as
    /// grid value + `VNNI_OFFSET`.
    ///
    /// # Safety
    /// The ISA available; `BYTES` readable bytes at `blk`.
    unsafe fn decode_u8(blk: *const u8, c: &Self::Consts) -> __m256i;
    /// Paired: the two blocks in `x`, the 32 bytes from `PAIR_LEAD` before
    /// the first, as grid + `OFFSET` in the `qs_pair` order: the first 16
    /// weights of both blocks, then the last 16.
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn decode_pair(x: __m256i, c: &Self::Consts) -> [__m256i; 2];
    /// Paired: the f32 scales of the 8 blocks of the 4 pairs in `x`, bit
    /// for bit those of the format's table.
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn pair_scales8(x: &[__m256i; 4], c: &Self::Consts) -> __m256;
    /// Paired formats whose pairs also decode to one 512-bit vector
    /// ([`Avx512Block::decode_pair512`]).
    const PAIR_512: bool = false;
    /// [`Avx512Block::PAIR_512`]: [`Avx512Block::decode_pair`]'s two
    /// vectors as the low and high halves of one, from the window in the
    /// first 32 bytes of `x` (the rest not read).
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn decode_pair512(_x: __m512i, _c: &Self::Consts) -> __m512i {
        unreachable!("decodes a pair to two vectors")
    }
    /// Paired formats whose runs of 8 blocks also decode at once
    /// ([`Avx512Block::decode_oct`]) against the activations' `qs_oct`.
    const OCT: bool = false;
    /// [`Avx512Block::OCT`]: the 8 blocks whose first 64 bytes are `x0`
    /// and whose last 64 (from byte `8 · BYTES - 64`) are `x1`: four
    /// vectors, vector `k` holding
    /// weights `8k..8k + 8` of block `l` in its 64-bit lane `l` as grid +
    /// `OFFSET`, and the 8 blocks' f32 scales (bit for bit the table's).
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn decode_oct(_x0: __m512i, _x1: __m512i, _c: &Self::Consts) -> ([__m512i; 4], __m256) {
        unreachable!("decodes pairs only")
    }
    /// Unpaired formats whose blocks also decode two at a time into one
    /// 512-bit vector ([`stream_twos`]).
    const TWO_512: bool = false;
    /// [`Avx512Block::TWO_512`]: the 64 weights of the two blocks at the
    /// start of `x` as grid value + `VNNI_OFFSET`, in the `qs_pair` order
    /// (the first 16 weights of both blocks by runs of four, then the last
    /// 16).
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn decode_two(_x: __m512i, _c: &Self::Consts) -> __m512i {
        unreachable!("decodes one block at a time")
    }
    /// [`Avx512Block::TWO_512`]: the f32 scales of the 8 blocks of the 4
    /// pairs starting `x`, bit for bit those of the format's table.
    ///
    /// # Safety
    /// The ISA available.
    unsafe fn two_scales8(_x: &[__m512i; 4], _c: &Self::Consts) -> __m256 {
        unreachable!("decodes one block at a time")
    }
}

/// The f32 values of 8 log scale bytes (`s`, one in the low byte of each
/// dword; sign in bit 7, eighth-octave step in bits 0..7), bit for bit the
/// format's table, from its mantissa bits ([`mantissa_bits`](crate::quant::scale::mantissa_bits)):
/// `±mantissa[k % 8] · 2^(-k/8)` for `k = s & 127` (`vpermd` reads k % 8).
///
/// # Safety
/// AVX-512 F/VL and AVX2 must be available.
#[inline(always)]
pub(crate) unsafe fn log_scales8(s: __m256i, mant: __m256i) -> __m256 {
    // SAFETY: the caller's ISA.
    unsafe {
        let mant = _mm256_permutevar8x32_epi32(mant, s);
        let exp = _mm256_slli_epi32(_mm256_and_si256(s, _mm256_set1_epi32(0x78)), 20);
        let bits = _mm256_ternarylogic_epi32::<0xca>(
            _mm256_set1_epi32(i32::MIN),
            _mm256_slli_epi32(s, 24),
            _mm256_sub_epi32(mant, exp),
        );
        _mm256_castsi256_ps(bits)
    }
}

/// Two 512-bit accumulators added, their halves added: the 8 lanes the
/// row sums ([`RowSums`]) take.
#[inline(always)]
fn fold512([a, b]: [__m512; 2]) -> __m256 {
    // SAFETY: inlined into the AVX-512 streams.
    unsafe {
        let t = _mm512_castps_pd(_mm512_add_ps(a, b));
        _mm256_add_ps(
            _mm256_castpd_ps(_mm512_castpd512_pd256(t)),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(t)),
        )
    }
}

/// Whether this CPU runs the instructions the formats' decode helpers use
/// (AVX-512 F/BW/VL/VBMI), for tests that call them directly.
#[cfg(test)]
pub(crate) fn vbmi_available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vbmi")
}

/// `out[r·n + t]` = packed row `r` (of `row_bytes` in `rows`) · activation row `t`.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot<B: Avx512Block, const WIDE: bool>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let nrows = check(rows, row_bytes, B::BYTES, acts, out);
    if B::PAIRED {
        assert!(
            acts.qs_pair.len() >= acts.n * acts.blocks * 32,
            "no pair codes"
        );
    }
    if WIDE && B::OCT {
        assert!(
            acts.qs_oct.len() >= acts.n * acts.blocks * 32,
            "no eight-group codes"
        );
    }
    // SAFETY: the ISA is this function's contract; `check` checked the lengths.
    unsafe {
        let c = B::consts(grid);
        let n = acts.n;
        for t0 in (0..n).step_by(4) {
            let r = Rows {
                p: rows.as_ptr(),
                row_bytes,
                nrows,
                t0,
                chunk: B::CHUNK.min(CHUNK),
            };
            let len = rows.len();
            if WIDE && B::TWO_512 {
                match n - t0 {
                    1 => stream_twos::<B, 1>(r, &c, acts, out),
                    2 => stream_twos::<B, 2>(r, &c, acts, out),
                    3 => stream_twos::<B, 3>(r, &c, acts, out),
                    _ => stream_twos::<B, 4>(r, &c, acts, out),
                }
                continue;
            }
            match (n - t0, B::PAIRED) {
                (1, true) => stream_pairs::<B, 1, WIDE>(r, len, &c, grid, acts, out),
                (2, true) => stream_pairs::<B, 2, WIDE>(r, len, &c, grid, acts, out),
                (3, true) => stream_pairs::<B, 3, WIDE>(r, len, &c, grid, acts, out),
                (_, true) => stream_pairs::<B, 4, WIDE>(r, len, &c, grid, acts, out),
                (1, false) => stream_blocks::<B, 1>(r, &c, acts, out),
                (2, false) => stream_blocks::<B, 2>(r, &c, acts, out),
                (3, false) => stream_blocks::<B, 3>(r, &c, acts, out),
                (_, false) => stream_blocks::<B, 4>(r, &c, acts, out),
            }
        }
    }
}

/// Which of the `width` (at most 64) bytes from `PAIR_LEAD` before offset
/// `off` lie inside `len` bytes: the mask of a window's load at a row's
/// edge.
#[inline(always)]
fn window_mask<B: Avx512Block>(len: usize, off: usize, width: usize) -> u64 {
    let lead = B::PAIR_LEAD;
    (0..width)
        .filter(|i| off + i >= lead && off + i - lead < len)
        .fold(0, |k, i| k | 1 << i)
}

/// The 32 bytes from `PAIR_LEAD` before offset `off` of the `len` bytes at
/// `p`, masked where they leave them.
///
/// # Safety
/// The ISA available; byte `off` lies inside the `len` bytes.
#[inline(always)]
unsafe fn window<B: Avx512Block>(p: *const u8, len: usize, off: usize) -> __m256i {
    let lead = B::PAIR_LEAD;
    // SAFETY: the caller's contract; masked-off bytes are not read.
    unsafe {
        if off >= lead && off - lead + 32 <= len {
            _mm256_loadu_si256(p.add(off - lead).cast())
        } else {
            let k = window_mask::<B>(len, off, 32) as u32;
            _mm256_maskz_loadu_epi8(k, p.wrapping_add(off).wrapping_sub(lead).cast())
        }
    }
}

/// [`window`] in the first 32 of 64 bytes, as many of the 64 as lie in the
/// `len` bytes at `p` (the rest zero).
///
/// # Safety
/// As [`window`].
#[inline(always)]
unsafe fn window512<B: Avx512Block>(p: *const u8, len: usize, off: usize) -> __m512i {
    let lead = B::PAIR_LEAD;
    // SAFETY: the caller's contract; masked-off bytes are not read.
    unsafe {
        if off >= lead && off - lead + 64 <= len {
            _mm512_loadu_si512(p.add(off - lead).cast())
        } else {
            let k = window_mask::<B>(len, off, 64);
            _mm512_maskz_loadu_epi8(k, p.wrapping_add(off).wrapping_sub(lead).cast())
        }
    }
}

/// Pair `q` of a row (its window `x`) against activation rows `t0..t0 + N`
/// (`qs` at row t0's `qs_pair`, `stride` between rows), scaled by
/// `s[j][si..si + 2]`, into accumulator `u` of each row.
///
/// # Safety
/// The ISA available; the activation pair lies in `qs_pair`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_dot<B: Avx512Block, const N: usize>(
    x: __m256i,
    c: &B::Consts,
    qs: *const i8,
    stride: usize,
    q: usize,
    s: &[[f32; 8]; N],
    si: usize,
    acc: &mut [[__m256; 2]; N],
    u: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let [wa, wb] = B::decode_pair(x, c);
        for j in 0..N {
            let a = qs.add(j * stride + q * 64);
            let d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wa, _mm256_loadu_si256(a.cast()));
            let d = _mm256_dpbusd_epi32(d, wb, _mm256_loadu_si256(a.add(32).cast()));
            // (s[si], s[si + 1]) in every f64 lane: lane d's block's scale.
            let sc = _mm256_castpd_ps(_mm256_broadcast_sd(&*s[j].as_ptr().add(si).cast::<f64>()));
            acc[j][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][u]);
        }
    }
}

/// 64 weights decoded to one 512-bit vector `w` (a pair of blocks in the
/// `qs_pair` order: i32 lane `d` belongs to the pair's block `d % 2`)
/// against activation rows `t0..t0 + N` (`qs` at row t0's `qs_pair`,
/// `stride` between rows), each lane started at its block's `z[j][k..k +
/// 2]` (or 0) and scaled by `s[j][k..k + 2]`, into accumulator `u` of each
/// row. `LOADS`: read `s` as broadcast loads from memory, which
/// take no shuffle slot, where the compiler would otherwise forward the
/// stores that wrote them into register broadcasts and permutes, which do
/// (`q4`: 1.10 x on Zen 5; `q3`, whose decode is most of its shuffles,
/// 0.93 x so; docs/BENCH.md).
///
/// # Safety
/// The ISA available; the activation pair lies in `qs_pair`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dot64<const N: usize, const LOADS: bool>(
    w: __m512i,
    qs: *const i8,
    stride: usize,
    q: usize,
    s: &[[f32; 8]; N],
    z: Option<&[[i32; 8]; N]>,
    k: usize,
    acc: &mut [[__m512; 2]; N],
    u: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for j in 0..N {
            let a = _mm512_loadu_si512(qs.add(j * stride + q * 64).cast());
            // (z[k], z[k + 1]) and (s[k], s[k + 1]) in every 64-bit lane
            let start = match z {
                Some(z) => _mm512_set1_epi64(z[j].as_ptr().add(k).cast::<i64>().read_unaligned()),
                None => _mm512_setzero_si512(),
            };
            let d = _mm512_dpbusd_epi32(start, w, a);
            let at = s[j].as_ptr().add(k).cast::<f64>();
            let sc = _mm512_castpd_ps(_mm512_set1_pd(if LOADS {
                at.read_volatile()
            } else {
                at.read_unaligned()
            }));
            acc[j][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[j][u]);
        }
    }
}

/// Paired formats: every row of `r` against activation rows `t0..t0 + N`
/// into `out[row·n + t0 + j]`, 4 pairs per step; remaining pairs and a
/// row's odd last block with their scales looked up one by one. `len` is
/// the length of the rows' slice.
///
/// # Safety
/// The ISA available; the lengths checked by [`check`]; `t0 + N <= acts.n`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn stream_pairs<B: Avx512Block, const N: usize, const WIDE: bool>(
    r: Rows,
    len: usize,
    c: &B::Consts,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let (nb, n) = (acts.blocks, acts.n);
    let (stride, pairs) = (nb * 32, nb / 2);
    let (ds, qsums) = (acts.d.as_ptr(), acts.qsums.as_ptr());
    let lut2 = lut::<B>(grid);
    let zero = _mm256_setzero_ps();
    let step = 2 * B::BYTES;
    // SAFETY (whole loop): blocks of every row lie in the slice (`check`),
    // windows outside it are masked (`window`); activation blocks of rows
    // t0..t0 + N exist.
    unsafe {
        let qs = acts.qs_pair.as_ptr().add(r.t0 * stride);
        let qs_oct = acts.qs_oct.as_ptr().add(r.t0 * stride);
        // f32 lane d of a 512-bit vector from lane d / 2 of a 256-bit one.
        let dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        let off = _mm256_set1_ps(f32::from(B::OFFSET));
        let mut sums = RowSums::<N>::new(zero);
        for row in 0..r.nrows {
            let base = row * r.row_bytes;
            let mut acc = [[zero; 2]; N];
            let mut acc512 = [[_mm512_setzero_ps(); 2]; N];
            let wide = WIDE && B::PAIR_512;
            let mut tail = [0f32; N];
            let mut s = [[0f32; 8]; N];
            let mut q = 0;
            while WIDE && B::OCT && q + 4 <= pairs {
                // 8 blocks from `at`: two loads, the second ending where they do.
                const { assert!(!B::OCT || 8 * B::BYTES >= 64, "eight blocks fill two loads") };
                let at = base + q * step;
                let p = r.p.add(at);
                let ahead = r.p.wrapping_add(at + PREFETCH);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                let (v, w) = B::decode_oct(
                    _mm512_loadu_si512(p.cast()),
                    _mm512_loadu_si512(p.add(8 * B::BYTES - 64).cast()),
                    c,
                );
                for j in 0..N {
                    let a = (r.t0 + j) * nb + 2 * q;
                    let sc = _mm256_mul_ps(w, _mm256_loadu_ps(ds.add(a)));
                    // The offset's share, subtracted lane-wise from the accumulator.
                    let qsum = _mm256_cvtepi32_ps(_mm256_loadu_si256(qsums.add(a).cast()));
                    acc[j][1] = _mm256_fnmadd_ps(sc, _mm256_mul_ps(qsum, off), acc[j][1]);
                    // The four vectors sum exactly in i32 (each 64-bit lane
                    // one block), then meet their blocks' scales once.
                    let codes = qs_oct.add(j * stride + q * 64);
                    let mut isum = _mm512_setzero_si512();
                    for (k, v) in v.iter().enumerate() {
                        let x = _mm512_loadu_si512(codes.add(64 * k).cast());
                        isum = _mm512_dpbusd_epi32(isum, *v, x);
                    }
                    let lanes = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(sc));
                    acc512[j][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), lanes, acc512[j][0]);
                }
                q += 4;
            }
            while q + 4 <= pairs {
                let at = base + q * step;
                // The 4 windows from `at - lead`, `step` apart: 64 bytes each
                // where wide (the decode reads their first 32 from one
                // register, the scales the low halves), else 32.
                let xw: [__m512i; 4] = if !wide {
                    [_mm512_setzero_si512(); 4]
                } else if at >= B::PAIR_LEAD && at + 3 * step + 64 <= len + B::PAIR_LEAD {
                    let p = r.p.add(at - B::PAIR_LEAD);
                    std::array::from_fn(|u| _mm512_loadu_si512(p.add(u * step).cast()))
                } else {
                    std::array::from_fn(|u| window512::<B>(r.p, len, at + u * step))
                };
                let x: [__m256i; 4] = if wide {
                    xw.map(|v| _mm512_castsi512_si256(v))
                } else if at >= B::PAIR_LEAD && at + 3 * step + 32 <= len + B::PAIR_LEAD {
                    let p = r.p.add(at - B::PAIR_LEAD);
                    std::array::from_fn(|u| _mm256_loadu_si256(p.add(u * step).cast()))
                } else {
                    std::array::from_fn(|u| window::<B>(r.p, len, at + u * step))
                };
                // The 104 bytes of the group 2 KiB on, ahead of the hardware
                // prefetcher (+15% streaming on rows of 64 blocks; see
                // docs/QUANT.md).
                let ahead = r.p.wrapping_add(at + PREFETCH);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                let w = B::pair_scales8(&x, c);
                for j in 0..N {
                    let a = (r.t0 + j) * nb + 2 * q;
                    let sc = _mm256_mul_ps(w, _mm256_loadu_ps(ds.add(a)));
                    _mm256_storeu_ps(s[j].as_mut_ptr(), sc);
                    // The offset's share, subtracted lane-wise from the accumulator.
                    let qsum = _mm256_cvtepi32_ps(_mm256_loadu_si256(qsums.add(a).cast()));
                    acc[j][1] = _mm256_fnmadd_ps(sc, _mm256_mul_ps(qsum, off), acc[j][1]);
                }
                for u in 0..4 {
                    if wide {
                        let w = B::decode_pair512(xw[u], c);
                        dot64::<N, false>(
                            w,
                            qs,
                            stride,
                            q + u,
                            &s,
                            None,
                            2 * u,
                            &mut acc512,
                            u % 2,
                        );
                    } else {
                        pair_dot::<B, N>(x[u], c, qs, stride, q + u, &s, 2 * u, &mut acc, u % 2);
                    }
                }
                q += 4;
            }
            // Scales one by one: the table (`scale_raw`), `d_a` and `Σq` scalar.
            let scale = |i: usize, s: &mut [[f32; 8]; N], tail: &mut [f32; N], k: usize| {
                let dw = f32::from_bits(B::scale_raw(r.p.add(base + i * B::BYTES)));
                for j in 0..N {
                    let a = (r.t0 + j) * nb + i;
                    s[j][k] = dw * *ds.add(a);
                    tail[j] += s[j][k] * *qsums.add(a) as f32;
                }
            };
            while q < pairs {
                scale(2 * q, &mut s, &mut tail, 0);
                scale(2 * q + 1, &mut s, &mut tail, 1);
                if wide {
                    let x = window512::<B>(r.p, len, base + q * step);
                    let w = B::decode_pair512(x, c);
                    dot64::<N, false>(w, qs, stride, q, &s, None, 0, &mut acc512, 0);
                } else {
                    let x = window::<B>(r.p, len, base + q * step);
                    pair_dot::<B, N>(x, c, qs, stride, q, &s, 0, &mut acc, 0);
                }
                q += 1;
            }
            if nb % 2 == 1 {
                // A row's odd last block, in natural order (`qs_pair` keeps it so).
                let i = nb - 1;
                scale(i, &mut s, &mut tail, 0);
                let w = B::decode(r.p.add(base + i * B::BYTES), lut2);
                for j in 0..N {
                    let a = _mm256_loadu_si256(qs.add(j * stride + i * 32).cast());
                    let d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
                    let sc = _mm256_set1_ps(s[j][0]);
                    acc[j][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][0]);
                }
            }
            let mut v = [zero; N];
            for j in 0..N {
                let t = fold512(acc512[j]);
                v[j] = _mm256_add_ps(_mm256_add_ps(acc[j][0], acc[j][1]), t);
            }
            let extra = tail.map(|t| -f32::from(B::OFFSET) * t);
            sums.push(row, v, extra, row + 1 == r.nrows, (n, r.t0), out);
        }
    }
}

/// Unpaired formats that decode two blocks to a 512-bit vector
/// ([`Avx512Block::TWO_512`]): every row of `r` against activation rows
/// `t0..t0 + N` into `out[row·n + t0 + j]`, 4 pairs (8 blocks) per step,
/// each pair from one masked 64-byte load that also gives its two scale
/// bytes; i32 lane `d` of a pair's dot product belongs to block `d % 2`,
/// so a broadcast of the two blocks' offsets starts it and a broadcast of
/// their combined scales finishes it. The offsets (`-VNNI_OFFSET / 8 · Σq`
/// a lane, as [`chunk_scales`]) cancel the unsigned weights' exactly.
/// Remaining pairs and a row's odd last block take their scales one by one.
///
/// # Safety
/// The ISA available; the lengths checked by [`check`]; `t0 + N <= acts.n`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn stream_twos<B: Avx512Block, const N: usize>(
    r: Rows,
    c: &B::Consts,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let (nb, n) = (acts.blocks, acts.n);
    let (stride, pairs) = (nb * 32, nb / 2);
    let (ds, qsums) = (acts.d.as_ptr(), acts.qsums.as_ptr());
    let zero = _mm256_setzero_ps();
    let step = 2 * B::BYTES;
    let two = (1u64 << step) - 1;
    let per_lane = _mm256_set1_epi32(-B::VNNI_OFFSET / 8);
    // SAFETY (whole loop): the loads are masked to the pairs' bytes, which
    // lie in their rows (`check`); activation blocks of rows t0..t0 + N
    // exist; the stack buffers hold the 8 blocks of a step.
    unsafe {
        let qs = acts.qs_pair.as_ptr().add(r.t0 * stride);
        let mut sums = RowSums::<N>::new(zero);
        let mut s = [[0f32; 8]; N];
        let mut z = [[0i32; 8]; N];
        for row in 0..r.nrows {
            let base = r.p.add(row * r.row_bytes);
            let mut acc = [[_mm512_setzero_ps(); 2]; N];
            let mut q = 0;
            // `s` and `z` of blocks `b..b + k` (k <= 8) of every activation row
            let fill =
                |b: usize, k: usize, w: __m256, s: &mut [[f32; 8]; N], z: &mut [[i32; 8]; N]| {
                    let m = u8::MAX >> (8 - k);
                    for j in 0..N {
                        let a = (r.t0 + j) * nb + b;
                        let sc = _mm256_maskz_mul_ps(m, w, _mm256_maskz_loadu_ps(m, ds.add(a)));
                        _mm256_storeu_ps(s[j].as_mut_ptr(), sc);
                        let qsum = _mm256_maskz_loadu_epi32(m, qsums.add(a).cast());
                        _mm256_storeu_si256(
                            z[j].as_mut_ptr().cast(),
                            _mm256_mullo_epi32(qsum, per_lane),
                        );
                    }
                };
            while q + 4 <= pairs {
                let p = base.add(q * step);
                let x: [__m512i; 4] =
                    std::array::from_fn(|u| _mm512_maskz_loadu_epi8(two, p.add(u * step).cast()));
                let ahead = p.wrapping_add(PREFETCH);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(4 * step - 1).cast());
                fill(2 * q, 8, B::two_scales8(&x, c), &mut s, &mut z);
                for u in 0..4 {
                    let w = B::decode_two(x[u], c);
                    dot64::<N, true>(w, qs, stride, q + u, &s, Some(&z), 2 * u, &mut acc, u % 2);
                }
                q += 4;
            }
            while q < pairs {
                let p = base.add(q * step);
                let x = _mm512_maskz_loadu_epi8(two, p.cast());
                let w = |i: usize| f32::from_bits(B::scale_raw(p.add(i * B::BYTES)));
                fill(
                    2 * q,
                    2,
                    _mm256_setr_ps(w(0), w(1), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
                    &mut s,
                    &mut z,
                );
                dot64::<N, true>(
                    B::decode_two(x, c),
                    qs,
                    stride,
                    q,
                    &s,
                    Some(&z),
                    0,
                    &mut acc,
                    0,
                );
                q += 1;
            }
            let mut v = acc.map(fold512);
            if nb % 2 == 1 {
                // A row's odd last block, in natural order (`qs_pair` keeps it so).
                let i = nb - 1;
                let blk = base.add(i * B::BYTES);
                let w = f32::from_bits(B::scale_raw(blk));
                fill(i, 1, _mm256_set1_ps(w), &mut s, &mut z);
                let x = B::decode_u8(blk, c);
                for j in 0..N {
                    let a = _mm256_loadu_si256(qs.add(j * stride + i * 32).cast());
                    let d = _mm256_dpbusd_epi32(_mm256_set1_epi32(z[j][0]), x, a);
                    let sc = _mm256_set1_ps(s[j][0]);
                    v[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, v[j]);
                }
            }
            sums.push(row, v, [0.0; N], row + 1 == r.nrows, (n, r.t0), out);
        }
    }
}

/// The chunk buffers of the unpaired formats: per activation row, the
/// combined scale of each block and the i32 start of its accumulator.
struct Buf<const N: usize> {
    s: [[f32; CHUNK]; N],
    z: [[i32; CHUNK]; N],
}

/// Fills the chunk buffers of blocks `b..b + m` from the raw weight scales
/// (see `avx2::chunk_scales`); `z = -VNNI_OFFSET / 8 · Σq`, which spread over
/// a block's 8 lanes cancels what the unsigned weights add.
///
/// # Safety
/// The ISA available; activation blocks `(t0 + j)·nb + b..+m` lie in `acts`.
#[inline(always)]
unsafe fn chunk_scales<B: Avx512Block, const N: usize>(
    raw: &[u32; CHUNK],
    acts: &QuantizedActs,
    t0: usize,
    (b, m): (usize, usize),
    buf: &mut Buf<N>,
) {
    let nb = acts.blocks;
    let (ds, qsums) = (acts.d.as_ptr(), acts.qsums.as_ptr());
    // SAFETY (whole block): in bounds by the caller's contract; masked
    // loads read only lanes below m.
    unsafe {
        let mut i = 0;
        while i < m {
            let k = _mm256_cmpgt_epi32_mask(
                _mm256_set1_epi32((m - i) as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            let w = B::scales8(_mm256_loadu_si256(raw.as_ptr().add(i).cast()));
            for j in 0..N {
                let at = (t0 + j) * nb + b + i;
                let sc = _mm256_maskz_mul_ps(k, w, _mm256_maskz_loadu_ps(k, ds.add(at)));
                _mm256_storeu_ps(buf.s[j].as_mut_ptr().add(i), sc);
                let q = _mm256_maskz_loadu_epi32(k, qsums.add(at));
                let z = _mm256_mullo_epi32(q, _mm256_set1_epi32(-B::VNNI_OFFSET / 8));
                _mm256_storeu_si256(buf.z[j].as_mut_ptr().add(i).cast(), z);
            }
            i += 8;
        }
    }
}

/// Block `i` of a chunk (at `w`), unpaired, against activation rows
/// `t0..t0 + N`, into accumulator `u` of each row.
///
/// # Safety
/// The ISA available; the block and activation blocks are readable.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block_dot<B: Avx512Block, const N: usize>(
    w: *const u8,
    c: &B::Consts,
    qs: *const i8,
    stride: usize,
    i: usize,
    buf: &Buf<N>,
    acc: &mut [[__m256; 4]; N],
    u: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let w = B::decode_u8(w, c);
        for j in 0..N {
            let a = _mm256_loadu_si256(qs.add(j * stride + i * 32).cast());
            let d = _mm256_dpbusd_epi32(_mm256_set1_epi32(buf.z[j][i]), w, a);
            let sc = _mm256_set1_ps(buf.s[j][i]);
            acc[j][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][u]);
        }
    }
}

/// Unpaired formats: every row of `r` against activation rows `t0..t0 + N`
/// (the chunk stream of `avx2::stream`).
///
/// # Safety
/// The ISA available; the lengths checked by [`check`]; `t0 + N <= acts.n`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn stream_blocks<B: Avx512Block, const N: usize>(
    r: Rows,
    c: &B::Consts,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let (nb, n) = (acts.blocks, acts.n);
    let Some(first) = r.first(nb) else {
        for row in 0..r.nrows {
            out[row * n + r.t0..][..N].fill(0.0);
        }
        return;
    };
    let zero = _mm256_setzero_ps();
    let mut acc = [[zero; 4]; N];
    let mut sums = RowSums::<N>::new(zero);
    let mut buf = Buf::<N> {
        s: [[0.0; CHUNK]; N],
        z: [[0; CHUNK]; N],
    };
    let mut raw = [0u32; CHUNK];
    // SAFETY (whole loop): chunks lie in their rows (`check`); copies stay
    // below each chunk's length; activation blocks of rows t0..t0 + N exist.
    unsafe { Copier::new::<B>(r, Some(first)).upto::<B>(CHUNK, &mut raw) };
    let stride = nb * 32;
    let mut cur = Some(first);
    while let Some(ch) = cur {
        let (row, b, m) = ch;
        cur = r.next(ch, nb);
        // SAFETY: as above.
        unsafe {
            chunk_scales::<B, N>(&raw, acts, r.t0, (b, m), &mut buf);
            let mut copier = Copier::new::<B>(r, cur);
            let w = r.p.add(r.offset::<B>(ch));
            let qs = acts.qs.as_ptr().add((r.t0 * nb + b) * 32);
            let uu = unroll(N);
            let mut i = 0;
            while i + uu <= m {
                for u in 0..uu {
                    let wi = w.add((i + u) * B::BYTES);
                    block_dot::<B, N>(wi, c, qs, stride, i + u, &buf, &mut acc, u);
                }
                match uu {
                    4 => copier.step::<B, 8>(&mut raw),
                    2 => copier.step::<B, 4>(&mut raw),
                    _ => copier.step::<B, 2>(&mut raw),
                }
                i += uu;
            }
            while i < m {
                let wi = w.add(i * B::BYTES);
                block_dot::<B, N>(wi, c, qs, stride, i, &buf, &mut acc, 0);
                i += 1;
            }
            copier.upto::<B>(CHUNK, &mut raw);
        }
        if b + m == nb {
            let v =
                acc.map(|a| _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
            // SAFETY: the ISA is this function's contract.
            unsafe { sums.push(row, v, [0.0; N], cur.is_none(), (n, r.t0), out) };
            acc = [[zero; 4]; N];
        }
    }
}
