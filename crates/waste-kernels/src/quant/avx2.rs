//! The AVX2 row dot product shared by every block format: a block decodes to
//! 32 int8 weights, multiplied with int8 activations by `maddubs` (or, on
//! the `avx2-vnni` table, AVX-VNNI's `vpdpbusd`: the [`Mac`] the format's
//! entry picks), summed in i32, scaled in f32. Formats whose grid fits
//! 0..127 after an offset (`q3`: +64) decode straight to unsigned bytes and
//! pay the offset from the exact activation sums; the others use the sign
//! trick |w| · sign(a, w). The per-format bit unpacking and the
//! `#[target_feature]` entries live in `q3/avx2.rs`, `q4/avx2.rs`,
//! `q8/avx2.rs`.
//!
//! No scalar float work per block. A call streams over all its rows in
//! chunks of up to [`CHUNK`] blocks. Per chunk: the combined scales
//! `d_w · d_a`, eight blocks per vector, into a stack buffer, and the offset
//! correction `d_w · d_a · Σq` as one FMA per eight blocks (into the
//! accumulator); then per block one
//! decode, `maddubs` + `madd`, and an FMA of the i32 lanes with the block's
//! scale broadcast from that buffer (on Zen 4 a broadcast load takes no
//! vector pipe, a register broadcast a shuffle pipe). The weight scales of the
//! next chunk are copied with scalar loads during the first half of this
//! chunk's dots (see [`Copier`]). `q8` and `q3` read each block's scale
//! with the block instead ([`Avx2Block::INLINE`]): on Zen 3 the copies cost
//! them more than the scalar work per block.

use std::arch::x86_64::*;

use crate::ggml::dot::avx2::Mac;
use crate::quant::act::QuantizedActs;

/// A block format as AVX2 sees it.
pub(crate) trait Avx2Block {
    /// Bytes per block of 32 weights.
    const BYTES: usize;
    /// Added to every grid value so that it is a byte in 0..128; 0 = signed
    /// weights (sign trick).
    const OFFSET: i8;
    /// The 32 weights of the block at `blk` as (grid value + OFFSET) bytes;
    /// `lut` = the byte-shuffle tables of grid entries 0..16 and 4..16 (see [`lut`]).
    ///
    /// # Safety
    /// AVX2 must be available and `blk` must point to `BYTES` readable bytes.
    unsafe fn decode(blk: *const u8, lut: [__m256i; 2]) -> __m256i;
    /// The scale of the block at `blk` as stored, widened to 32 bits (the
    /// kernels copy these with scalar loads: a gather costs 8 cycles on Zen 4).
    ///
    /// # Safety
    /// `blk` must point to `BYTES` readable bytes.
    unsafe fn scale_raw(blk: *const u8) -> u32;
    /// Blocks per chunk (≤ [`CHUNK`]): the next chunk's scales are copied
    /// during this one, so this sets how far ahead of the decode they are
    /// read (about 1 KiB suits the hardware prefetcher; see [`Copier`]).
    const CHUNK: usize = CHUNK;
    /// Each block's scale is read with the block and multiplied in scalar
    /// ([`stream_inline`]) instead of 8 at a time from copies made ahead:
    /// for a format too memory-bound to spare the copies' loads (`q8`: its
    /// streaming rate fell from 0.87 to 0.68 of a plain read with them), and
    /// for `q3`, 1.10-1.19 × faster so on Zen 3.
    const INLINE: bool = false;
    /// The f32 scale of the block at `blk`.
    ///
    /// # Safety
    /// AVX2 available; `blk` points to a readable block.
    #[inline(always)]
    unsafe fn scale(blk: *const u8) -> f32 {
        // SAFETY: the caller's contract.
        f32::from_bits(unsafe { Self::scale_raw(blk) })
    }
    /// The f32 scales of 8 [`Avx2Block::scale_raw`] values (the format's
    /// scale of each block, bit for bit).
    ///
    /// # Safety
    /// AVX2 must be available.
    unsafe fn scales8(raw: __m256i) -> __m256;
}

/// The f32 bits of a scale table.
pub(crate) const fn table_bits(t: [f32; 256]) -> [u32; 256] {
    let mut b = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        b[i] = t[i].to_bits();
        i += 1;
    }
    b
}

/// How far ahead of the decode the AVX-512 `q3` stream prefetches weights
/// (bytes): on Zen 4 the hardware prefetcher alone left it waiting on
/// memory on rows of 64 blocks. (The slower AVX2, `q4` and `q8` streams
/// measured no gain or a loss from it.) A prefetch never faults.
pub(crate) const PREFETCH: usize = 2048;

/// Blocks per unrolled step against `n` activation rows: 4 for one row
/// (4 accumulators cover the FMA latency), fewer for more rows (AVX2 has 16
/// registers: 4 blocks × 4 rows of dots spilled).
pub(crate) const fn unroll(n: usize) -> usize {
    match n {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

/// Blocks whose scales are computed ahead into the stack buffer.
pub(crate) const CHUNK: usize = 64;

/// `acc + Σ_i w_i · a_i` of 32 byte pairs as 8 i32 partial sums, through
/// `M` ([`Mac::dot_acc`]: `maddubs` + `madd`, or one `vpdpbusd`): `w`
/// unsigned when `!SIGNED`, else signed (sign trick). |w|, |a| ≤ 127 keep
/// every pair of products inside the i16 of `maddubs`.
///
/// # Safety
/// `M`'s ISA enabled in the (inlined-into) caller.
#[inline(always)]
pub(crate) unsafe fn dot_i8<M: Mac, const SIGNED: bool>(
    acc: __m256i,
    w: __m256i,
    a: __m256i,
) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        if SIGNED {
            M::dot_acc(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
        } else {
            M::dot_acc(acc, w, a)
        }
    }
}

/// Two blocks' 16 nibble bytes, `b0`'s in the low 128 bits and `b1`'s in
/// the high, split into (low nibbles, high nibbles), each byte 0..16: the
/// eight-row decode kernels of 4-bit blocks hold two rows to a register.
///
/// # Safety
/// 16 readable bytes at `b0` and at `b1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nibbles2(b0: *const u8, b1: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller's contract.
    let q = unsafe { _mm256_set_m128i(_mm_loadu_si128(b1.cast()), _mm_loadu_si128(b0.cast())) };
    let m4 = _mm256_set1_epi8(0x0F);
    (
        _mm256_and_si256(q, m4),
        _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
    )
}

/// The row each lane of [`sum_rows8`]'s result holds.
pub(crate) const ROWS8_LANE: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

/// The totals of eight rows held two to a register (`s[p]`: lanes 0..4
/// row `2p`, lanes 4..8 row `2p + 1`) as one vector, lane `l` the total of
/// row [`ROWS8_LANE`]`[l]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn sum_rows8(s: [__m256i; 4]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]))
}

/// Lane `l` of `acc` into `out[ROWS8_LANE[l]]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn store_rows8(acc: __m256, out: &mut [f32]) {
    let mut v = [0f32; 8];
    // SAFETY: `v` holds 8 values.
    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc) };
    for (l, &r) in ROWS8_LANE.iter().enumerate() {
        out[r] = v[l];
    }
}

/// The lane sums of 8 vectors, `[Σv[0], ..., Σv[7]]`: one transpose tree
/// instead of 8 horizontal sums (rows that end every few blocks pay this).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum8(v: &[__m256; 8]) -> __m256 {
    let t = [
        _mm256_hadd_ps(v[0], v[1]),
        _mm256_hadd_ps(v[2], v[3]),
        _mm256_hadd_ps(v[4], v[5]),
        _mm256_hadd_ps(v[6], v[7]),
    ];
    let (u0, u1) = (_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));
    _mm256_add_ps(
        _mm256_permute2f128_ps(u0, u1, 0x20),
        _mm256_permute2f128_ps(u0, u1, 0x31),
    )
}

/// Per-row results collected 8 rows at a time, reduced with [`hsum8`] into
/// `out[row·n + t0 + j]`.
pub(crate) struct RowSums<const N: usize> {
    v: [[__m256; 8]; N],
    extra: [[f32; 8]; N],
}

impl<const N: usize> RowSums<N> {
    /// Nothing collected.
    #[inline(always)]
    pub(crate) fn new(zero: __m256) -> Self {
        RowSums {
            v: [[zero; 8]; N],
            extra: [[0.0; 8]; N],
        }
    }

    /// Row `row`'s result for activation row `t0 + j`: the lane sum of `v`
    /// plus `extra`. After the last row of 8 (or of the call, `last`), the
    /// sums go out.
    ///
    /// # Safety
    /// AVX2 available.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn push(
        &mut self,
        row: usize,
        v: [__m256; N],
        extra: [f32; N],
        last: bool,
        (n, t0): (usize, usize),
        out: &mut [f32],
    ) {
        let k = row % 8;
        for j in 0..N {
            self.v[j][k] = v[j];
            self.extra[j][k] = extra[j];
        }
        if k == 7 || last {
            let first = row - k;
            for j in 0..N {
                let mut sums = [0f32; 8];
                // SAFETY: the caller's contract.
                unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), hsum8(&self.v[j])) };
                for (i, v) in sums[..=k].iter().enumerate() {
                    out[(first + i) * n + t0 + j] = v + self.extra[j][i];
                }
            }
        }
    }
}

/// The byte-shuffle tables of `grid` plus the format's offset, in both lanes:
/// entries 0..16, and entries 4..16 (the upper half of a 3-bit grid).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn lut<B: Avx2Block>(grid: &[i8; 16]) -> [__m256i; 2] {
    // SAFETY: `grid` is 16 readable bytes.
    let g = unsafe { _mm_loadu_si128(grid.as_ptr().cast()) };
    let g = _mm_add_epi8(g, _mm_set1_epi8(B::OFFSET));
    [
        _mm256_broadcastsi128_si256(g),
        _mm256_broadcastsi128_si256(_mm_srli_si128(g, 4)),
    ]
}

/// Checks the lengths every kernel relies on; returns the number of rows.
pub(crate) fn check(
    rows: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    acts: &QuantizedActs,
    out: &[f32],
) -> usize {
    let n = acts.n.max(1);
    let nrows = out.len() / n;
    assert!(out.len() == nrows * n, "output is not (rows, n)");
    assert!(acts.n > 0 || out.is_empty(), "no activation rows");
    assert!(
        row_bytes >= acts.blocks * block_bytes && rows.len() >= nrows * row_bytes,
        "rows too short"
    );
    let len = acts.n * acts.blocks;
    assert!(acts.qs.len() >= len * 32 && acts.d.len() >= len);
    assert!(acts.sums.len() >= len && acts.qsums.len() >= len);
    nrows
}

/// `out[r·n + t]` = packed row `r` (of `row_bytes` in `rows`) · activation
/// row `t`, the int8 products through `M`. Runs only inlined into a
/// format's `#[target_feature]` entry (AVX2, FMA, F16C and `M`'s ISA),
/// whose features its intrinsics then take.
///
/// # Safety
/// AVX2, FMA, F16C and `M`'s ISA enabled in the caller.
#[inline(always)]
pub(crate) unsafe fn vec_dot<B: Avx2Block, M: Mac>(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let nrows = check(rows, row_bytes, B::BYTES, acts, out);
    // SAFETY: AVX2 is this function's contract.
    let lut = unsafe { lut::<B>(grid) };
    let n = acts.n;
    for t0 in (0..n).step_by(4) {
        let r = Rows {
            p: rows.as_ptr(),
            row_bytes,
            nrows,
            t0,
            chunk: B::CHUNK.min(CHUNK),
        };
        // SAFETY: the ISA is this function's contract; `check` checked the lengths.
        unsafe {
            match (n - t0, B::INLINE) {
                (1, false) => stream::<B, M, 1>(r, lut, acts, out),
                (2, false) => stream::<B, M, 2>(r, lut, acts, out),
                (3, false) => stream::<B, M, 3>(r, lut, acts, out),
                (_, false) => stream::<B, M, 4>(r, lut, acts, out),
                (1, true) => stream_inline::<B, M, 1>(r, lut, acts, out),
                (2, true) => stream_inline::<B, M, 2>(r, lut, acts, out),
                (3, true) => stream_inline::<B, M, 3>(r, lut, acts, out),
                (_, true) => stream_inline::<B, M, 4>(r, lut, acts, out),
            }
        }
    }
}

/// The rows of one call: `nrows` packed rows of `row_bytes` at `p`, against
/// activation rows from `t0`.
#[derive(Clone, Copy)]
pub(crate) struct Rows {
    pub p: *const u8,
    pub row_bytes: usize,
    pub nrows: usize,
    pub t0: usize,
    /// Blocks per chunk, at most [`CHUNK`].
    pub chunk: usize,
}

/// A chunk of the stream: (row, first block, blocks).
pub(crate) type Chunk = (usize, usize, usize);

impl Rows {
    /// The first chunk of the stream of rows of `nb` blocks, if any.
    #[inline]
    pub fn first(&self, nb: usize) -> Option<Chunk> {
        (self.nrows > 0 && nb > 0).then(|| (0, 0, nb.min(self.chunk)))
    }

    /// The chunk after `c`, if any (no division: this runs per chunk).
    #[inline]
    pub fn next(&self, (row, b, m): Chunk, nb: usize) -> Option<Chunk> {
        if b + m < nb {
            Some((row, b + m, (nb - b - m).min(self.chunk)))
        } else if row + 1 < self.nrows {
            Some((row + 1, 0, nb.min(self.chunk)))
        } else {
            None
        }
    }

    /// Byte offset of chunk `c`'s first block.
    #[inline]
    pub fn offset<B: Avx2Block>(&self, (row, b, _): Chunk) -> usize {
        row * self.row_bytes + b * B::BYTES
    }
}

/// Combined scales `d_w · d_a` of blocks `b..b + m` (`m ≤ CHUNK`) for
/// activation rows `t0..t0 + N` into `s[j][0..m]`, from the raw weight scales
/// `raw[0..m]`, and subtracts their offset correction `OFFSET · Σ d_w · d_a ·
/// Σq` from `acc` (lane-wise: only the lanes' sum matters; no register held
/// for it across the loop).
///
/// # Safety
/// AVX2/FMA available; activation blocks `(t0 + j)·nb + b..+m` lie in `acts`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn chunk_scales<B: Avx2Block, const N: usize>(
    raw: &[u32; CHUNK],
    acts: &QuantizedActs,
    t0: usize,
    b: usize,
    m: usize,
    s: &mut [[f32; CHUNK]; N],
    acc: &mut [[__m256; 4]; N],
) {
    let nb = acts.blocks;
    let (ds, qsums) = (acts.d.as_ptr(), acts.qsums.as_ptr());
    // SAFETY (whole block): in bounds by the caller's contract.
    unsafe {
        let raw8 = |i: usize| _mm256_loadu_si256(raw.as_ptr().add(i).cast());
        let mut i = 0;
        while i + 8 <= m {
            let w = B::scales8(raw8(i));
            for j in 0..N {
                let at = (t0 + j) * nb + b + i;
                let sc = _mm256_mul_ps(w, _mm256_loadu_ps(ds.add(at)));
                _mm256_storeu_ps(s[j].as_mut_ptr().add(i), sc);
                if B::OFFSET != 0 {
                    let q = _mm256_cvtepi32_ps(_mm256_loadu_si256(qsums.add(at).cast()));
                    let q = _mm256_mul_ps(q, _mm256_set1_ps(f32::from(B::OFFSET)));
                    acc[j][0] = _mm256_fnmadd_ps(sc, q, acc[j][0]);
                }
            }
            i += 8;
        }
        if i < m {
            // The last 1..7 blocks: the same vectors, masked.
            let mask = _mm256_cmpgt_epi32(
                _mm256_set1_epi32((m - i) as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            let w = B::scales8(raw8(i));
            for j in 0..N {
                let at = (t0 + j) * nb + b + i;
                let d = _mm256_maskload_ps(ds.add(at), mask);
                let sc = _mm256_and_ps(_mm256_mul_ps(w, d), _mm256_castsi256_ps(mask));
                _mm256_storeu_ps(s[j].as_mut_ptr().add(i), sc);
                if B::OFFSET != 0 {
                    let q = _mm256_cvtepi32_ps(_mm256_maskload_epi32(qsums.add(at), mask));
                    let q = _mm256_mul_ps(q, _mm256_set1_ps(f32::from(B::OFFSET)));
                    acc[j][0] = _mm256_fnmadd_ps(sc, q, acc[j][0]);
                }
            }
        }
    }
}

/// Copies the raw scale of block `i` of the chunk at `p` into `raw[i]`
/// (volatile: the compiler would otherwise gather them with `vpinsrd`,
/// shuffles on the pipes the decode needs).
///
/// # Safety
/// Block `i < CHUNK` at `p` is readable.
#[inline(always)]
pub(crate) unsafe fn copy_scale<B: Avx2Block>(p: *const u8, i: usize, raw: &mut [u32; CHUNK]) {
    debug_assert!(i < CHUNK);
    // SAFETY: the caller's contract.
    unsafe {
        raw.as_mut_ptr()
            .add(i)
            .write_volatile(B::scale_raw(p.add(i * B::BYTES)));
    }
}

/// Copies the raw scales of the next chunk during this chunk's dots, two
/// per block over its first half: late enough that their loads find the
/// lines the hardware prefetcher brings (copying two chunks ahead made the
/// stores wait on cache misses and stalled streaming), early enough that
/// the stores reach the cache before the next chunk's vector loads of them
/// (store forwarding fails across 8 stores).
pub(crate) struct Copier {
    p: *const u8,
    m: usize,
    done: usize,
}

impl Copier {
    /// The copier of chunk `c` (none: nothing to copy).
    #[inline(always)]
    pub(crate) fn new<B: Avx2Block>(r: Rows, c: Option<Chunk>) -> Self {
        match c {
            Some(c) => Copier {
                // SAFETY: chunks lie in their rows (`check`).
                p: unsafe { r.p.add(r.offset::<B>(c)) },
                m: c.2,
                done: 0,
            },
            None => Copier {
                p: r.p,
                m: 0,
                done: 0,
            },
        }
    }

    /// Copies the raw scales of the next `K` blocks (fewer at the chunk's
    /// end) into `raw`: straight-line code in the steady state.
    ///
    /// # Safety
    /// The chunk is one of `check`ed rows.
    #[inline(always)]
    pub(crate) unsafe fn step<B: Avx2Block, const K: usize>(&mut self, raw: &mut [u32; CHUNK]) {
        if self.done + K <= self.m {
            for i in 0..K {
                // SAFETY: the caller's contract; done + i < m.
                unsafe { copy_scale::<B>(self.p, self.done + i, raw) };
            }
            self.done += K;
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.upto::<B>(self.done + K, raw) };
        }
    }

    /// Copies the raw scales of the chunk's blocks below `upto` into `raw`.
    ///
    /// # Safety
    /// The chunk is one of `check`ed rows.
    #[inline(always)]
    pub(crate) unsafe fn upto<B: Avx2Block>(&mut self, upto: usize, raw: &mut [u32; CHUNK]) {
        if upto <= self.m && self.done + 8 == upto {
            // The steady state: 8 more, in straight-line code.
            for i in 0..8 {
                // SAFETY: the caller's contract; done + i < upto <= m.
                unsafe { copy_scale::<B>(self.p, self.done + i, raw) };
            }
            self.done = upto;
            return;
        }
        while self.done < upto.min(self.m) {
            // SAFETY: the caller's contract.
            unsafe { copy_scale::<B>(self.p, self.done, raw) };
            self.done += 1;
        }
    }
}

/// The block at `w` against the activation blocks at `a + j·stride` (j < N),
/// scaled by `s[j][i]`, into accumulator `u` of each row.
///
/// # Safety
/// AVX2/FMA available; the block and the activation blocks are readable.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block_dot<B: Avx2Block, M: Mac, const N: usize>(
    w: *const u8,
    lut: [__m256i; 2],
    a: *const i8,
    stride: usize,
    s: &[[f32; CHUNK]; N],
    i: usize,
    acc: &mut [[__m256; 4]; N],
    u: usize,
) {
    // SAFETY: in bounds by the caller's contract; the ISA is enabled in the
    // (inlined-into) caller.
    unsafe {
        let w = B::decode(w, lut);
        for j in 0..N {
            let a = _mm256_loadu_si256(a.add(j * stride).cast());
            let zero = _mm256_setzero_si256();
            let d = if B::OFFSET == 0 {
                dot_i8::<M, true>(zero, w, a)
            } else {
                dot_i8::<M, false>(zero, w, a)
            };
            acc[j][u] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(d),
                _mm256_broadcast_ss(&s[j][i]),
                acc[j][u],
            );
        }
    }
}

/// Every row of `r` against activation rows `t0..t0 + N` into
/// `out[row·n + t0 + j]`: the chunks of all rows in one stream, each block
/// decoded once, 4 / N accumulators per activation row to cover the FMA
/// latency.
///
/// # Safety
/// AVX2/FMA and `M`'s ISA enabled in the (inlined-into) caller; the
/// lengths checked by [`check`]; `t0 + N <= acts.n`.
#[inline(always)]
unsafe fn stream<B: Avx2Block, M: Mac, const N: usize>(
    r: Rows,
    lut: [__m256i; 2],
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
    // SAFETY: AVX is this function's contract.
    let zero = unsafe { _mm256_setzero_ps() };
    let mut acc = [[zero; 4]; N];
    let mut sums = RowSums::<N>::new(zero);
    let mut s = [[0f32; CHUNK]; N];
    let mut raw = [0u32; CHUNK];
    // SAFETY (whole loop): chunks lie in their rows (`check`); copies stay
    // below each chunk's length; activation blocks of rows t0..t0 + N exist.
    unsafe {
        let mut first_copy = Copier::new::<B>(r, Some(first));
        first_copy.upto::<B>(CHUNK, &mut raw);
    }
    let stride = nb * 32;
    let mut cur = Some(first);
    while let Some(c) = cur {
        let (row, b, m) = c;
        cur = r.next(c, nb);
        // SAFETY: as above; `w` and `a` walk blocks b..b + m of the row and
        // of activation row t0 (+ j·stride for the others).
        unsafe {
            chunk_scales::<B, N>(&raw, acts, r.t0, b, m, &mut s, &mut acc);
            let mut copier = Copier::new::<B>(r, cur);
            let mut w = r.p.add(r.offset::<B>(c));
            let mut a = acts.qs.as_ptr().add((r.t0 * nb + b) * 32);
            let uu = unroll(N);
            let mut i = 0;
            while i + uu <= m {
                for u in 0..uu {
                    block_dot::<B, M, N>(w, lut, a, stride, &s, i + u, &mut acc, u);
                    (w, a) = (w.add(B::BYTES), a.add(32));
                }
                // Two copies per block: done by the chunk's middle.
                match uu {
                    4 => copier.step::<B, 8>(&mut raw),
                    2 => copier.step::<B, 4>(&mut raw),
                    _ => copier.step::<B, 2>(&mut raw),
                }
                i += uu;
            }
            while i < m {
                block_dot::<B, M, N>(w, lut, a, stride, &s, i, &mut acc, 0);
                (w, a) = (w.add(B::BYTES), a.add(32));
                i += 1;
            }
            copier.upto::<B>(CHUNK, &mut raw);
        }
        if b + m == nb {
            // SAFETY: AVX2 is this function's contract.
            unsafe {
                let mut v = [zero; N];
                for (v, a) in v.iter_mut().zip(&acc) {
                    *v = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
                }
                sums.push(row, v, [0.0; N], cur.is_none(), (n, r.t0), out);
            }
            acc = [[zero; 4]; N];
        }
    }
}

/// One row of [`stream_inline`]: its blocks at `w`, activation row `t0`'s
/// codes at `a` (the others `stride` apart), their scales at `d` and code
/// sums at `sums` (`nb` apart).
struct InlineRow {
    w: *const u8,
    a: *const i8,
    d: *const f32,
    sums: *const f32,
    nb: usize,
    stride: usize,
}

/// Block `i` of row `r` against the `N` activation rows into accumulator
/// `u`, its offset term into `offset`. A function, not a closure: a closure
/// inherits no target features, and where LLVM declines to inline it
/// (three or more activation rows) its intrinsics and `mul_add` become
/// calls.
///
/// # Safety
/// As [`stream_inline`]; `i < r.nb`.
#[inline(always)]
unsafe fn inline_block<B: Avx2Block, M: Mac, const N: usize>(
    r: &InlineRow,
    lut: [__m256i; 2],
    i: usize,
    acc: &mut [[__m256; 4]; N],
    offset: &mut [f32; N],
    u: usize,
) {
    // SAFETY: the caller's contract: block `i` of the row and of the
    // activation rows is readable; the ISA is enabled in the caller.
    unsafe {
        let blk = r.w.add(i * B::BYTES);
        let (wv, dw) = (B::decode(blk, lut), B::scale(blk));
        if B::OFFSET != 0 {
            for (j, o) in offset.iter_mut().enumerate() {
                *o = dw.mul_add(*r.sums.add(j * r.nb + i), *o);
            }
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            let av = _mm256_loadu_si256(r.a.add(j * r.stride + i * 32).cast());
            let zero = _mm256_setzero_si256();
            let dot = if B::OFFSET == 0 {
                dot_i8::<M, true>(zero, wv, av)
            } else {
                dot_i8::<M, false>(zero, wv, av)
            };
            let sc = _mm256_set1_ps(dw * *r.d.add(j * r.nb + i));
            acc[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc[u]);
        }
    }
}

/// [`stream`] for [`Avx2Block::INLINE`] formats: row by row, each block's
/// scale read with it, `d_w · d_a` in scalar and broadcast from a register;
/// an unsigned format's offset taken off per row from `d_a · Σq`.
///
/// # Safety
/// As [`stream`].
#[inline(always)]
unsafe fn stream_inline<B: Avx2Block, M: Mac, const N: usize>(
    r: Rows,
    lut: [__m256i; 2],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let (nb, n) = (acts.blocks, acts.n);
    let (stride, ds, sums) = (nb * 32, acts.d.as_ptr(), acts.sums.as_ptr());
    // SAFETY: AVX is this function's contract.
    let zero = unsafe { _mm256_setzero_ps() };
    // SAFETY (whole loop): every block of every row lies in the slice
    // (`check`); activation blocks of rows t0..t0 + N exist.
    unsafe {
        let mut row_sums = RowSums::<N>::new(zero);
        for row in 0..r.nrows {
            let mut acc = [[zero; 4]; N];
            // `Σ_b d_w · d_a · Σq` per activation row: what the weights'
            // offset added, taken off once per row (one scalar FMA a block).
            let mut offset = [0f32; N];
            let w = r.p.add(row * r.row_bytes);
            let a = acts.qs.as_ptr().add(r.t0 * stride);
            let (d, sums) = (ds.add(r.t0 * nb), sums.add(r.t0 * nb));
            let at = InlineRow {
                w,
                a,
                d,
                sums,
                nb,
                stride,
            };
            let uu = unroll(N);
            let mut i = 0;
            while i + uu <= nb {
                for u in 0..uu {
                    inline_block::<B, M, N>(&at, lut, i + u, &mut acc, &mut offset, u);
                }
                i += uu;
            }
            while i < nb {
                inline_block::<B, M, N>(&at, lut, i, &mut acc, &mut offset, 0);
                i += 1;
            }
            let v =
                acc.map(|a| _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
            let extra = offset.map(|o| -f32::from(B::OFFSET) * o);
            row_sums.push(row, v, extra, row + 1 == r.nrows, (n, r.t0), out);
        }
    }
}
