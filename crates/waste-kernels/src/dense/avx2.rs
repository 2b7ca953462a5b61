//! AVX2 + FMA dense products of f32 / bf16 / q8 weight rows with f32 activations.
//! Owns the single-threaded row kernels only: the 256-bit vector, its weight
//! loads, the lane sums and the cache kernels here, the tiling drivers
//! (decode, prefill, the `rows_*` entry points) from `dense_drivers!`, which
//! writes them once for every ISA; the rayon split and the (n, rows) layout
//! live in `dense/mod.rs`, the specification in `dense/dot.rs`.
//!
//! One summation order for every entry point, so that a product does not
//! depend on how many activation rows came with it (decode = prefill, bit for
//! bit) nor on where it sits in a micro-tile: lane `l` of one 8-lane
//! accumulator sums `w[k]·x[k]` for `k ≡ l (mod 8)` in k order with FMA, the
//! ragged end is one zero-padded vector, and the lanes are added by
//! [`hsum`]. [`dot_f32`] follows it too, which keeps the native
//! formats' exact path (decode a row, then `dense::dot_f32`) equal to a dense
//! matrix bit for bit.
//!
//! - decode (n = 1): [`RD`] rows at a time stream once, bf16 widened in
//!   registers (`vpmovzxwd` + shift), x stays in L1;
//! - prefill (n > 1): an [`R`]×[`T`] register tile (12 accumulators) reuses each
//!   loaded weight vector T times and each activation vector R times, over
//!   k-blocks of [`KB`] (the weight panel stays in L1) and activation blocks
//!   of [`ACT_BLOCK`] values (they stay in L2); un-reduced accumulators are
//!   parked between k-blocks, which keeps the summation order. bf16 and f16
//!   rows are read in place, widened as the tile loads them, up to
//!   [`DIRECT_MAX_N`] activation rows, and widened once per call into an f32
//!   scratch above it; q8 rows always are.

use std::arch::x86_64::*;
use std::cell::RefCell;

use half::{bf16, f16};

use super::{Q8Byte, check_q8, widen_q8};
use crate::{Format, q8};

/// f32 lanes per vector.
const L: usize = 8;
/// Rows per decode step: 8 independent FMA chains cover FMA latency (4) ×
/// throughput (2 per cycle).
const RD: usize = 8;
/// Prefill micro-tile: R weight rows × T activation rows, R·T accumulators +
/// T activation vectors + 1 weight vector = 16 ymm registers.
const R: usize = 4;
const T: usize = 3;
/// k-block of the prefill loop: an R-row weight panel is 16 KiB, half of L1d.
const KB: usize = 1024;
/// Prefill of f16 and bf16 rows: the tile reads them in place, widening
/// each vector as it loads it, up to this many activation rows, and widens
/// them once into an f32 scratch above it: in place 1.11 x the GFLOP/s at
/// 16 rows, even at 64, 0.94-0.97 x at 256 (docs/BENCH.md).
const DIRECT_MAX_N: usize = 32;
/// Activation values (rows × k-block) per block of the prefill loop: 256 KiB,
/// half of a Zen 3 L2, re-read by every row group of the task.
const ACT_BLOCK: usize = 64 * 1024;

/// `-1` then `0` lanes: 8 consecutive entries from `8 - rem` mask the first `rem`.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// Sum of the 8 lanes, halves first: part of the summation order above.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The vector the shared drivers (`dense_drivers!`, `dense/mod.rs`) run on,
/// and their operations on it.
type V = __m256;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn zero() -> V {
    _mm256_setzero_ps()
}

/// # Safety
/// [`L`] readable f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn loadu(p: *const f32) -> V {
    // SAFETY: the caller's contract.
    unsafe { _mm256_loadu_ps(p) }
}

/// # Safety
/// [`L`] writable f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn storeu(p: *mut f32, v: V) {
    // SAFETY: the caller's contract.
    unsafe { _mm256_storeu_ps(p, v) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fmadd(a: V, b: V, c: V) -> V {
    _mm256_fmadd_ps(a, b, c)
}

dense_drivers!("avx2,fma,f16c");

impl Weight for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(row: *const f32, k: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_tail(row: *const f32, k: usize, rem: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // SAFETY: MASKS[8 - rem..16 - rem] is in bounds for rem in 1..8;
        // maskload touches only the `rem` unmasked values at `p`.
        unsafe {
            let m = _mm256_loadu_si256(MASKS.as_ptr().add(L - rem).cast());
            _mm256_maskload_ps(p, m)
        }
    }
}

impl Weight for bf16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(row: *const bf16, k: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // SAFETY: 8 bf16 = 16 readable bytes (the caller's contract).
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        // bf16 is the top half of an f32: zero-extend, shift up. Exact.
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_tail(row: *const bf16, k: usize, rem: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // No 16-bit masked load in AVX2: copy the tail into zeros.
        let mut buf = [bf16::ZERO; L];
        // SAFETY: `rem` < 8 readable values at `p` (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), rem);
            Self::load(buf.as_ptr(), 0)
        }
    }
}

impl Weight for f16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(row: *const f16, k: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // SAFETY: 8 f16 = 16 readable bytes (the caller's contract).
        // `vcvtph2ps` widens exactly.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_tail(row: *const f16, k: usize, rem: usize) -> __m256 {
        let p = row.wrapping_add(k);
        // No 16-bit masked load in AVX2: copy the tail into zeros.
        let mut buf = [f16::ZERO; L];
        // SAFETY: `rem` < 8 readable values at `p` (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), rem);
            Self::load(buf.as_ptr(), 0)
        }
    }
}

impl Weight for Q8Byte {
    const PLAIN: bool = false;

    fn row_start(r: usize, cols: usize) -> usize {
        r * Format::Q8.row_bytes(cols)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(row: *const Q8Byte, k: usize) -> __m256 {
        let blk = row.cast::<u8>().wrapping_add(k / q8::QK * q8::BLOCK_BYTES);
        // SAFETY: the row holds the block of value k: its f16 scale, then 32
        // codes, of which k % 32 .. k % 32 + 8 (k is a multiple of 8).
        unsafe {
            let bits = blk.cast::<u16>().read_unaligned();
            let d = _mm256_cvtph_ps(_mm_set1_epi16(bits as i16));
            let codes = _mm_loadl_epi64(blk.add(2 + k % q8::QK).cast());
            // d · q is exact in f32 (11 + 7 significant bits).
            _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)))
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_tail(row: *const Q8Byte, k: usize, rem: usize) -> __m256 {
        // A block always holds 32 codes, so the whole vector is readable;
        // the lanes past `rem` are zeroed, whatever the padding codes hold.
        // SAFETY: as `load`; MASKS[8 - rem..16 - rem] is in bounds.
        unsafe {
            let m = _mm256_loadu_si256(MASKS.as_ptr().add(L - rem).cast());
            _mm256_and_ps(Self::load(row, k), _mm256_castsi256_ps(m))
        }
    }

    /// [`tile`]'s order and values, with each block's scale converted once
    /// per row rather than once per vector (decode ran 1.5 x slower so).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_rows<const GG: usize>(
        rows: [*const Q8Byte; GG],
        x: *const f32,
        cols: usize,
        acc: &mut [[__m256; 1]; GG],
    ) {
        let mut a: [__m256; GG] = std::array::from_fn(|g| acc[g][0]);
        let mut k0 = 0;
        // SAFETY: every block read lies in its row (the rows hold `cols`
        // values, so ceil(cols / 32) whole blocks); x is read below `cols`.
        unsafe {
            while k0 < cols {
                let end = (k0 + q8::QK).min(cols);
                let blk: [*const u8; GG] = std::array::from_fn(|g| {
                    rows[g].cast::<u8>().add(k0 / q8::QK * q8::BLOCK_BYTES)
                });
                let d: [__m256; GG] = std::array::from_fn(|g| {
                    let bits = blk[g].cast::<u16>().read_unaligned();
                    _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
                });
                let mut k = k0;
                // Whole vectors, then (last block only) one zero-padded one.
                while k + L <= end {
                    let xv = _mm256_loadu_ps(x.add(k));
                    for g in 0..GG {
                        let codes = _mm_loadl_epi64(blk[g].add(2 + k - k0).cast());
                        let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
                        a[g] = _mm256_fmadd_ps(_mm256_mul_ps(d[g], q), xv, a[g]);
                    }
                    k += L;
                }
                if k < end {
                    let rem = end - k;
                    let xv = f32::load_tail(x, k, rem);
                    let m =
                        _mm256_castsi256_ps(_mm256_loadu_si256(MASKS.as_ptr().add(L - rem).cast()));
                    for g in 0..GG {
                        let codes = _mm_loadl_epi64(blk[g].add(2 + k - k0).cast());
                        let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
                        let wv = _mm256_and_ps(_mm256_mul_ps(d[g], q), m);
                        a[g] = _mm256_fmadd_ps(wv, xv, a[g]);
                    }
                }
                k0 = end;
            }
        }
        for (out, v) in acc.iter_mut().zip(a) {
            out[0] = v;
        }
    }
}

/// Sixteen [`dot`]s, `out[r][c] = a[r] · b[c]`, each with its bits: two
/// passes of the four `b` against two rows of `a` (eight accumulators:
/// AVX2 has sixteen registers).
///
/// # Safety
/// AVX2 and FMA must be available; every vector as long as `a[0]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4x4<K: Weight>(a: [&[f32]; 4], b: [&[K]; 4]) -> [[f32; 4]; 4] {
    let len = a[0].len();
    assert!(
        a.iter().all(|v| v.len() == len) && b.iter().all(|v| v.len() == len),
        "dot of unequal lengths"
    );
    let bp = b.map(<[K]>::as_ptr);
    let mut out = [[0f32; 4]; 4];
    for pair in 0..2 {
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        let rows = [a[2 * pair].as_ptr(), a[2 * pair + 1].as_ptr()];
        // SAFETY: all six hold `len` values.
        unsafe { tile::<K, 4, 2>(bp, rows, len, &mut acc) };
        for (c, acc) in acc.iter().enumerate() {
            // A loop, as in `dot4`.
            for (r, v) in acc.iter().enumerate() {
                out[2 * pair + r][c] = hsum(*v);
            }
        }
    }
    out
}

cache_entry_points!("avx2,fma,f16c");

/// [`axpy_rows`] for four weight rows `p[h]` over the same value rows,
/// each `o[h]` with its bits: 16 values of the four outputs stay in
/// registers while each value row is loaded once for the four; the
/// columns past the last 16 go through [`axpy_rows`].
///
/// # Safety
/// AVX2 and FMA must be available; all `p` one length, all `o` one length, `v`
/// holds `(p.len() - 1) · stride + o.len()` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_rows4<V: Value>(p: [&[f32]; 4], v: &[V], stride: usize, mut o: [&mut [f32]; 4]) {
    const VECS: usize = 2;
    let (keys, len) = (p[0].len(), o[0].len());
    assert!(
        p.iter().all(|p| p.len() == keys) && o.iter().all(|o| o.len() == len),
        "unequal weight or output rows"
    );
    let Some(last) = keys.checked_sub(1) else {
        return;
    };
    assert!(v.len() >= last * stride + len, "value rows out of range");
    let op = [0, 1, 2, 3].map(|h| o[h].as_mut_ptr());
    let whole = len - len % (VECS * 8);
    // SAFETY: every load is at j·stride + c + i < (keys - 1)·stride + len
    // (checked above), every store below `len` of its output.
    unsafe {
        for j0 in (0..keys).step_by(ROW_BLOCK) {
            let rows = j0..(j0 + ROW_BLOCK).min(keys);
            for c in (0..whole).step_by(VECS * 8) {
                let mut acc = [[_mm256_setzero_ps(); VECS]; 4];
                for (a, op) in acc.iter_mut().zip(op) {
                    for (i, a) in a.iter_mut().enumerate() {
                        *a = _mm256_loadu_ps(op.add(c + 8 * i));
                    }
                }
                for j in rows.clone() {
                    let vp = v.as_ptr().add(j * stride + c);
                    // The same slice of the row a block ahead: the rows are
                    // a stride apart and come from RAM (a decode step's
                    // weights evict the cache from L3), and the block's
                    // slice-by-slice walk is no pattern the hardware
                    // prefetcher follows. A prefetch never faults.
                    _mm_prefetch::<_MM_HINT_T0>(vp.wrapping_add(ROW_BLOCK * stride).cast::<i8>());
                    let mut vv = [_mm256_setzero_ps(); VECS];
                    for (i, x) in vv.iter_mut().enumerate() {
                        *x = V::load(vp, 8 * i);
                    }
                    for (a, p) in acc.iter_mut().zip(p) {
                        let pv = _mm256_set1_ps(*p.get_unchecked(j));
                        for (a, x) in a.iter_mut().zip(&vv) {
                            *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, *x));
                        }
                    }
                }
                for (a, op) in acc.iter().zip(op) {
                    for (i, a) in a.iter().enumerate() {
                        _mm256_storeu_ps(op.add(c + 8 * i), *a);
                    }
                }
            }
        }
    }
    let c = whole;
    if c < len {
        for (p, o) in p.into_iter().zip(o) {
            // SAFETY: as this function's; `v[c..]` holds the rest of each row.
            unsafe { axpy_rows(p, &v[c..], stride, &mut o[c..]) };
        }
    }
}

/// Value rows a pass over a slice of them covers before the next slice:
/// a pass reads one slice of each row, rows a `stride` apart (kilobytes:
/// a cache row holds every kv head's values of a position), and walking
/// all rows once per slice missed the TLB on every row of every slice
/// (docs/BENCH.md); a block's rows stay in the L1 TLB and cache across its
/// slices. The sums per element still run over the rows in order.
pub(crate) const ROW_BLOCK: usize = 16;

/// `o[i] += p[j] · v[j·stride + i]`, j in order, a product then a sum per
/// element as the scalar loop (no FMA), so the bits are its; `o` stays in
/// registers across the rows, 64 values at a time.
///
/// # Safety
/// AVX2 must be available; `v` holds `(p.len() - 1) · stride + o.len()` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_rows<V: Value>(p: &[f32], v: &[V], stride: usize, o: &mut [f32]) {
    let len = o.len();
    if let Some(last) = p.len().checked_sub(1) {
        assert!(v.len() >= last * stride + len, "value rows out of range");
    }
    let whole = len - len % (8 * 8);
    let mut c = whole;
    // SAFETY: every load is at j·stride + c + i < (p.len() - 1)·stride + len
    // (checked above), every store below `len`.
    unsafe {
        for j0 in (0..p.len()).step_by(ROW_BLOCK) {
            let rows = j0..(j0 + ROW_BLOCK).min(p.len());
            for c in (0..whole).step_by(8 * 8) {
                let op = o.as_mut_ptr().add(c);
                let mut acc: [_; 8] = std::array::from_fn(|i| _mm256_loadu_ps(op.add(8 * i)));
                for j in rows.clone() {
                    let pv = _mm256_set1_ps(*p.get_unchecked(j));
                    let vp = v.as_ptr().add(j * stride + c);
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, V::load(vp, 8 * i)));
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(op.add(8 * i), *a);
                }
            }
        }
        while c + 8 <= len {
            let op = o.as_mut_ptr().add(c);
            let mut a = _mm256_loadu_ps(op);
            for (j, &pj) in p.iter().enumerate() {
                let x = V::load(v.as_ptr(), j * stride + c);
                a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(pj), x));
            }
            _mm256_storeu_ps(op, a);
            c += 8;
        }
    }
    for (i, o) in o.iter_mut().enumerate().skip(c) {
        for (j, &pj) in p.iter().enumerate() {
            *o += pj * v[j * stride + i].widen();
        }
    }
}

/// A value type of attention's cache rows: [`Weight`]'s loads, and the
/// exact widening of one value for the scalar ends.
trait Value: Weight {
    fn widen(self) -> f32;
}

impl Value for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Value for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}
