//! The AVX-512 row dot product shared by the block formats: AVX-512 F, BW and
//! VL instructions on 256-bit vectors, with a VNNI variant (`vpdpbusd`)
//! chosen at run time (`quant::dispatch`). Read `quant/avx2.rs` first: the
//! stream over chunks, the combined-scale buffer and the scale copies are
//! the same; what differs is the inner loop.
//!
//! Why 256 bits: on Zen 4 (the host this was tuned on) a 512-bit operation
//! costs two 256-bit ones, a broadcast load takes no vector pipe only at
//! 256 bits, and two blocks would have to be assembled across lanes first.
//! What AVX-512 buys is instructions: byte masks (`vptestmb`, masked adds),
//! and with VNNI one `vpdpbusd` per 32 weights instead of `maddubs` + `madd`.
//!
//! - `q3` ([`Avx512Block::PAIRED`]): two blocks (26 bytes) come from one
//!   32-byte load, block `b` in the low 128-bit lane and `b + 1` in the high
//!   one, and decode to two vectors of 16 weights of each (the activations'
//!   `qs_pair` order); the two dots add in i32, so a pair takes one
//!   conversion and one FMA, with the pair's scales expanded ahead in the
//!   chunk buffer. Weights are grid + 64, unsigned; the offset is paid from
//!   the exact activation sums as in AVX2.
//! - `q4`, `q8` (VNNI only; without VNNI they take the AVX2 kernels): one
//!   block per vector, unsigned weights grid + 128 (`q8`: code + 128) for
//!   `vpdpbusd`, whose i32 accumulator starts at `-16 · Σq` per lane, so the
//!   offset cancels exactly in the integers.

// `for j in 0..N` indexes several per-activation-row arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, CHUNK, Chunk, Rows, check, copy_scale, dot_i8, hsum};

/// A block format as the AVX-512 kernels see it.
pub(crate) trait Avx512Block: Avx2Block {
    /// Blocks decode in pairs ([`Avx512Block::decode_pair`]) against the
    /// activations' `qs_pair`; otherwise one by one ([`Avx512Block::decode_u8`]).
    const PAIRED: bool;
    /// Bytes before a pair that its 32-byte load starts at.
    const PAIR_LEAD: usize = 0;
    /// What the VNNI decode adds to every grid value to make it a byte
    /// 0..=255 (the non-VNNI path uses [`Avx2Block::OFFSET`]).
    const VNNI_OFFSET: i32;
    /// Constants set up once per call.
    type Consts: Copy;

    /// The constants of `grid`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL must be available.
    unsafe fn consts(grid: &[i8; 16], vnni: bool) -> Self::Consts;
    /// The 32 weights of the block at `blk`, in order, as unsigned bytes:
    /// grid value + `VNNI_OFFSET` if `vnni`, else + `OFFSET`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL available; `BYTES` readable bytes at `blk`.
    unsafe fn decode_u8(blk: *const u8, c: &Self::Consts) -> __m256i;
    /// The two blocks at a pair, from `x` and `x2`: the 32 bytes from
    /// `PAIR_LEAD` before the first block and before the second. As unsigned
    /// bytes (grid + `OFFSET`) in the `qs_pair` order: the first 16 weights
    /// of both blocks, then the last 16.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL available.
    unsafe fn decode_pair(x: __m256i, x2: __m256i, c: &Self::Consts) -> [__m256i; 2];
    /// [`Avx512Block::decode_pair`] with VBMI, from `x` alone.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL and VBMI available.
    unsafe fn decode_pair_vbmi(x: __m256i, c: &Self::Consts) -> [__m256i; 2];
}

/// `out[r·n + t]` = packed row `r` · activation row `t`, AVX-512 F/BW/VL.
///
/// # Safety
/// AVX-512 F, BW, VL, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot<B: Avx512Block>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: the ISA is this function's contract.
    unsafe { run::<B, false>(rows, row_bytes, grid, acts, out) }
}

/// [`vec_dot`] with AVX512-VNNI (`vpdpbusd`) and VBMI (the `q3` decode).
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI, VBMI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_vnni<B: Avx512Block>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: the ISA is this function's contract.
    unsafe { run::<B, true>(rows, row_bytes, grid, acts, out) }
}

/// The body of both entry points; inlined into them, so it runs with their
/// target features (VNNI instructions appear only when `VNNI`).
///
/// # Safety
/// The entry point's ISA is available.
#[inline(always)]
unsafe fn run<B: Avx512Block, const VNNI: bool>(
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
    // SAFETY: the ISA is the caller's contract; `check` checked the lengths.
    unsafe {
        let c = B::consts(grid, VNNI);
        let lut2 = crate::quant::avx2::lut::<B>(grid);
        let n = acts.n;
        for t0 in (0..n).step_by(4) {
            let r = Rows {
                p: rows.as_ptr(),
                row_bytes,
                nrows,
                t0,
            };
            let len = rows.len();
            match n - t0 {
                1 => stream::<B, 1, VNNI>(r, len, &c, lut2, acts, out),
                2 => stream::<B, 2, VNNI>(r, len, &c, lut2, acts, out),
                3 => stream::<B, 3, VNNI>(r, len, &c, lut2, acts, out),
                _ => stream::<B, 4, VNNI>(r, len, &c, lut2, acts, out),
            }
        }
    }
}

/// The offset the dot products carry: VNNI's or the plain one.
const fn offset<B: Avx512Block, const VNNI: bool>() -> i32 {
    if VNNI {
        B::VNNI_OFFSET
    } else {
        B::OFFSET as i32
    }
}

/// The chunk buffers: per activation row, the combined scale of each block
/// (`s`) and the i32 start of each block's VNNI accumulator (`z`, unpaired).
struct Buf<const N: usize> {
    s: [[f32; CHUNK]; N],
    z: [[i32; CHUNK]; N],
}

/// Fills the chunk buffers of blocks `b..b + m` and adds the float offset
/// correction of the paired formats to `corr` (see `avx2::chunk_scales`).
/// A pair's lanes alternate between its two blocks, so its scale vector is
/// a broadcast of `s[2q..2q + 2]` at use.
///
/// # Safety
/// The ISA available; activation blocks `(t0 + j)·nb + b..+m` lie in `acts`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chunk_scales<B: Avx512Block, const N: usize, const VNNI: bool>(
    raw: &[u32; CHUNK],
    acts: &QuantizedActs,
    t0: usize,
    b: usize,
    m: usize,
    buf: &mut Buf<N>,
    corr: &mut [__m256; N],
) {
    let nb = acts.blocks;
    let (ds, qsums) = (acts.d.as_ptr(), acts.qsums.as_ptr());
    let off = offset::<B, VNNI>();
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
                if B::PAIRED {
                    if off != 0 {
                        corr[j] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(q), corr[j]);
                    }
                } else if off != 0 {
                    // -off/8 · Σq in each of a block's 8 lanes: the offset
                    // the unsigned weights add, cancelled in i32.
                    let z = _mm256_mullo_epi32(q, _mm256_set1_epi32(-off / 8));
                    _mm256_storeu_si256(buf.z[j].as_mut_ptr().add(i).cast(), z);
                }
            }
            i += 8;
        }
    }
}

/// The i32 dot of unsigned `w` with signed `a`, added to `acc`: one
/// `vpdpbusd` with VNNI, else `maddubs` + `madd` + add (|w·a| pairs fit i16).
///
/// # Safety
/// The ISA available (VNNI if `VNNI`).
#[inline(always)]
unsafe fn dot_acc<const VNNI: bool>(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(acc, w, a)
        } else {
            _mm256_add_epi32(acc, dot_i8::<false>(w, a))
        }
    }
}

/// The 32 bytes from `PAIR_LEAD` before the pair at offset `off` of the
/// `len` bytes at `p`, and (unless VBMI, which needs one) those from
/// `PAIR_LEAD` before its second block; masked where a window leaves the
/// slice.
///
/// # Safety
/// The ISA available; the pair's own bytes lie inside the `len` bytes.
#[inline(always)]
unsafe fn load_pair<B: Avx512Block, const VBMI: bool>(
    p: *const u8,
    len: usize,
    off: usize,
) -> [__m256i; 2] {
    // SAFETY: the caller's contract; masked-off bytes are not read.
    unsafe {
        let one = |at: usize| {
            if at >= B::PAIR_LEAD && at - B::PAIR_LEAD + 32 <= len {
                _mm256_loadu_si256(p.add(at - B::PAIR_LEAD).cast())
            } else {
                let mut k = 0u32;
                for i in 0..32 {
                    if at + i >= B::PAIR_LEAD && at + i - B::PAIR_LEAD < len {
                        k |= 1 << i;
                    }
                }
                let from = p.wrapping_add(at).wrapping_sub(B::PAIR_LEAD);
                _mm256_maskz_loadu_epi8(k, from.cast())
            }
        };
        let second = if VBMI {
            _mm256_setzero_si256()
        } else {
            one(off + B::BYTES)
        };
        [one(off), second]
    }
}

/// Pair `q` of a chunk (its 32-byte window `x`) against activation rows
/// `t0..t0 + N` (`qs` at row t0's chunk start, `stride` between rows), into
/// accumulator `u` of each row.
///
/// # Safety
/// The ISA available; the activation pair lies in `qs_pair`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_dot<B: Avx512Block, const N: usize, const VNNI: bool>(
    [x, x2]: [__m256i; 2],
    c: &B::Consts,
    qs: *const i8,
    stride: usize,
    q: usize,
    buf: &Buf<N>,
    acc: &mut [[__m256; 4]; N],
    u: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let [wa, wb] = if VNNI {
            B::decode_pair_vbmi(x, c)
        } else {
            B::decode_pair(x, x2, c)
        };
        for j in 0..N {
            let a = qs.add(j * stride + q * 64);
            let d = dot_acc::<VNNI>(_mm256_setzero_si256(), wa, _mm256_loadu_si256(a.cast()));
            let d = dot_acc::<VNNI>(d, wb, _mm256_loadu_si256(a.add(32).cast()));
            // (s[2q], s[2q + 1]) in every f64 lane: lane d's block's scale.
            let sc = _mm256_broadcast_sd(&*buf.s[j].as_ptr().add(2 * q).cast::<f64>());
            let sc = _mm256_castpd_ps(sc);
            acc[j][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][u]);
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
unsafe fn block_dot<B: Avx512Block, const N: usize, const VNNI: bool>(
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
            let z = if offset::<B, VNNI>() != 0 {
                _mm256_set1_epi32(buf.z[j][i])
            } else {
                _mm256_setzero_si256()
            };
            let d = dot_acc::<VNNI>(z, w, a);
            let sc = _mm256_set1_ps(buf.s[j][i]);
            acc[j][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][u]);
        }
    }
}

/// The scale copies of the next chunk, interleaved with this chunk's dots.
struct Copier {
    pn: *const u8,
    mn: usize,
    done: usize,
}

impl Copier {
    /// Copies the raw scales of the next chunk's blocks below `upto`.
    ///
    /// # Safety
    /// The next chunk's `mn` blocks at `pn` are readable.
    #[inline(always)]
    unsafe fn upto<B: Avx2Block>(&mut self, upto: usize, raw: &mut [u32; CHUNK]) {
        if upto <= self.mn && self.done + 8 == upto {
            // The steady state: 8 more, in straight-line code.
            for i in 0..8 {
                // SAFETY: the caller's contract; done + i < upto <= mn.
                unsafe { copy_scale::<B>(self.pn, self.done + i, raw) };
            }
            self.done = upto;
            return;
        }
        while self.done < upto.min(self.mn) {
            // SAFETY: the caller's contract.
            unsafe { copy_scale::<B>(self.pn, self.done, raw) };
            self.done += 1;
        }
    }
}

/// Every row of `r` against activation rows `t0..t0 + N` (see
/// `avx2::stream`); `len` is the length of the rows' slice.
///
/// # Safety
/// The ISA available; the lengths checked by [`check`]; `t0 + N <= acts.n`.
#[inline(always)]
unsafe fn stream<B: Avx512Block, const N: usize, const VNNI: bool>(
    r: Rows,
    len: usize,
    c: &B::Consts,
    lut2: [__m256i; 2],
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
    let off = offset::<B, VNNI>();
    // SAFETY: the ISA is the caller's contract.
    let zero = unsafe { _mm256_setzero_ps() };
    let (mut acc, mut corr) = ([[zero; 4]; N], [zero; N]);
    let mut buf = Buf::<N> {
        s: [[0.0; CHUNK]; N],
        z: [[0; CHUNK]; N],
    };
    // Two slots of raw scales, as in `avx2::stream`.
    let mut raw = [[0u32; CHUNK]; 2];
    let fill = |c: Option<Chunk>, raw: &mut [u32; CHUNK]| {
        if let Some(c) = c {
            for i in 0..c.2 {
                // SAFETY: block i of chunk c (`check`).
                unsafe { copy_scale::<B>(r.p.add(r.offset::<B>(c)), i, raw) };
            }
        }
    };
    fill(Some(first), &mut raw[0]);
    fill(r.next(first, nb), &mut raw[1]);
    let stride = nb * 32;
    let mut cur = Some(first);
    let mut slot = 0;
    while let Some(ch) = cur {
        let (row, b, m) = ch;
        let first_chunk = ch == first;
        cur = r.next(ch, nb);
        // SAFETY (rest of the loop): chunks lie in their rows (`check`);
        // copies stay below each chunk's length; activation blocks of rows
        // t0..t0 + N exist; `load_pair` masks what leaves the slice.
        unsafe {
            chunk_scales::<B, N, VNNI>(&raw[slot], acts, r.t0, b, m, &mut buf, &mut corr);
            let (pn, mn) = match cur.and_then(|c1| r.next(c1, nb)) {
                Some(c2) => (r.p.add(r.offset::<B>(c2)), c2.2),
                None => (r.p, 0),
            };
            let raw = &mut raw[slot];
            slot ^= 1;
            let mut copier = Copier { pn, mn, done: 0 };
            let base = r.offset::<B>(ch);
            if B::PAIRED {
                let qs = acts.qs_pair.as_ptr().add((r.t0 * nb + b) * 32);
                let pairs = m / 2;
                let mut q = 0;
                // The first pair of the slice and the last may need masked loads.
                if first_chunk && pairs > 0 {
                    let x = load_pair::<B, VNNI>(r.p, len, base);
                    pair_dot::<B, N, VNNI>(x, c, qs, stride, 0, &buf, &mut acc, 0);
                    q = 1;
                }
                // The windows of pairs q..q + 4 end this far past the last
                // pair's own bytes: 32 bytes from `PAIR_LEAD` before its
                // first block (VBMI) or its second.
                let windows = 32 - B::PAIR_LEAD + if VNNI { 0 } else { B::BYTES };
                let past = windows.saturating_sub(2 * B::BYTES);
                while q + 4 <= pairs && base + (q + 4) * 2 * B::BYTES + past <= len {
                    for u in 0..4 {
                        let at = r.p.add(base + (q + u) * 2 * B::BYTES - B::PAIR_LEAD);
                        let x = [
                            _mm256_loadu_si256(at.cast()),
                            if VNNI {
                                _mm256_setzero_si256()
                            } else {
                                _mm256_loadu_si256(at.add(B::BYTES).cast())
                            },
                        ];
                        let ai = u % (4 / N).max(1);
                        pair_dot::<B, N, VNNI>(x, c, qs, stride, q + u, &buf, &mut acc, ai);
                    }
                    copier.upto::<B>(2 * (q + 4), raw);
                    q += 4;
                }
                while q < pairs {
                    let x = load_pair::<B, VNNI>(r.p, len, base + q * 2 * B::BYTES);
                    pair_dot::<B, N, VNNI>(x, c, qs, stride, q, &buf, &mut acc, 0);
                    q += 1;
                }
                if m % 2 == 1 {
                    // A row's odd last block, in natural order.
                    let i = m - 1;
                    let w = B::decode(r.p.add(base + i * B::BYTES), lut2);
                    for j in 0..N {
                        let a = _mm256_loadu_si256(qs.add(j * stride + i * 32).cast());
                        let d = dot_acc::<VNNI>(_mm256_setzero_si256(), w, a);
                        let sc = _mm256_set1_ps(buf.s[j][i]);
                        acc[j][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][0]);
                    }
                }
            } else {
                let w = r.p.add(base);
                let qs = acts.qs.as_ptr().add((r.t0 * nb + b) * 32);
                let mut i = 0;
                while i + 4 <= m {
                    for u in 0..4 {
                        let (wi, ai) = (w.add((i + u) * B::BYTES), u % (4 / N).max(1));
                        block_dot::<B, N, VNNI>(wi, c, qs, stride, i + u, &buf, &mut acc, ai);
                    }
                    copier.upto::<B>(i + 4, raw);
                    i += 4;
                }
                while i < m {
                    let wi = w.add(i * B::BYTES);
                    block_dot::<B, N, VNNI>(wi, c, qs, stride, i, &buf, &mut acc, 0);
                    i += 1;
                }
            }
            copier.upto::<B>(mn, raw);
        }
        if b + m == nb {
            for j in 0..N {
                let a = &acc[j];
                // SAFETY: the ISA is the caller's contract.
                unsafe {
                    let sum = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
                    let corr = if B::PAIRED {
                        off as f32 * hsum(corr[j])
                    } else {
                        0.0
                    };
                    out[row * n + r.t0 + j] = hsum(sum) - corr;
                }
            }
            (acc, corr) = ([[zero; 4]; N], [zero; N]);
        }
    }
}
