//! AVX-512F dense products of f32 / bf16 / q8 weight rows with f32 activations:
//! `dense/avx2.rs` on 16-lane vectors (read that file first). The tiling
//! drivers are the ones `dense_drivers!` (`dense/mod.rs`) writes for both;
//! this file owns the 512-bit vector, its weight loads, the lane sums and
//! the cache kernels. The rayon split and the (n, rows) layout live in
//! `dense/mod.rs`, the specification in `dense/dot.rs`.
//!
//! One summation order for every entry point, so that a product does not
//! depend on how many activation rows came with it (decode = prefill, bit for
//! bit) nor on where it sits in a micro-tile: lane `l` of one 16-lane
//! accumulator sums `w[k]·x[k]` for `k ≡ l (mod 16)` in k order with FMA, the
//! ragged end is one zero-padded vector, and the lanes are added by
//! [`hsum`]. [`dot_f32`] follows it too, which keeps the native
//! formats' exact path (decode a row, then `dense::dot_f32`) equal to a dense
//! matrix bit for bit.
//!
//! - decode (n = 1): [`RD`] rows at a time stream once, bf16 widened in
//!   registers (`vpmovzxwd` + shift), x stays in L1;
//! - prefill (n > 1): an [`R`]×[`T`] register tile (24 accumulators) reuses each
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
const L: usize = 16;
/// Rows per decode step: 8 independent FMA chains cover FMA latency (4) ×
/// throughput (2 per cycle).
const RD: usize = 8;
/// Prefill micro-tile: R weight rows × T activation rows, R·T accumulators +
/// T activation vectors + 1 weight vector = 28 of the 32 zmm registers. The
/// weight panel stays in L1 and the activations come from L2, so a tile
/// taller than wide reads fewer L2 lines per FMA: 8×3 measured 1.17-1.24 x
/// the 4×4 tile's GFLOP/s (docs/BENCH.md).
const R: usize = 8;
const T: usize = 3;
/// k-block of the prefill loop: an R-row weight panel is 32 KiB, in L1d.
const KB: usize = 1024;
/// Prefill of f16 and bf16 rows: the tile reads them in place, widening
/// each vector as it loads it, up to this many activation rows, and widens
/// them once into an f32 scratch above it. On AVX-512 in place always wins:
/// the 8-row panel of a k-block is 16 KiB instead of 32 and stays in L1
/// with the activations, 1.07-1.43 x the GFLOP/s at 16-256 rows
/// (docs/BENCH.md).
const DIRECT_MAX_N: usize = usize::MAX;
/// Activation values (rows × k-block) per block of the prefill loop: 256 KiB,
/// well inside L2, re-read by every row group of the task.
const ACT_BLOCK: usize = 64 * 1024;

/// Sum of the 16 lanes, halves first: part of the summation order above.
/// Not `_mm512_reduce_add_ps`, whose order the compiler may pick per call site.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn hsum(v: __m512) -> f32 {
    let h = _mm256_add_ps(
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
    );
    let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The sixteen lane sums of `v`, each bit for bit [`hsum`]'s (the same
/// pairs added in the same order: distance 8, 4, 2, 1) in one transposing
/// tree: lane `4k + j` of the result is `Σ v[k + 4j]`. Plain loops, not
/// closures: a closure does not inherit the target features, so it would
/// take each vector through memory.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn hsum16_lanes(v: [__m512; 16]) -> __m512 {
    // Distance 8: the 256-bit halves of v[2p] and v[2p + 1] added, the
    // pair side by side.
    let mut s = [_mm512_setzero_ps(); 8];
    for (p, s) in s.iter_mut().enumerate() {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        *s = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
        );
    }
    // Distance 4, 128-bit quarters: t[q] holds v[4q + i] in quarter i.
    let mut t = [_mm512_setzero_ps(); 4];
    for (q, t) in t.iter_mut().enumerate() {
        let (a, b) = (s[2 * q], s[2 * q + 1]);
        *t = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
        );
    }
    // Distance 2 within each quarter: [x0 + x2, x1 + x3, y0 + y2, y1 + y3].
    let mut u = [_mm512_setzero_ps(); 2];
    for (h, u) in u.iter_mut().enumerate() {
        let (a, b) = (t[2 * h], t[2 * h + 1]);
        *u = _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(a, b),
            _mm512_shuffle_ps::<0b11_10_11_10>(a, b),
        );
    }
    // Distance 1: quarter k ends as [v[k], v[4 + k], v[8 + k], v[12 + k]].
    _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(u[0], u[1]),
        _mm512_shuffle_ps::<0b11_01_11_01>(u[0], u[1]),
    )
}

/// The vector the shared drivers (`dense_drivers!`, `dense/mod.rs`) run on,
/// and their operations on it.
type V = __m512;

#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn zero() -> V {
    _mm512_setzero_ps()
}

/// # Safety
/// [`L`] readable f32 at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn loadu(p: *const f32) -> V {
    // SAFETY: the caller's contract.
    unsafe { _mm512_loadu_ps(p) }
}

/// # Safety
/// [`L`] writable f32 at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn storeu(p: *mut f32, v: V) {
    // SAFETY: the caller's contract.
    unsafe { _mm512_storeu_ps(p, v) }
}

#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn fmadd(a: V, b: V, c: V) -> V {
    _mm512_fmadd_ps(a, b, c)
}

dense_drivers!("avx512f,avx2,fma");

impl Weight for f32 {
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load(row: *const f32, k: usize) -> __m512 {
        let p = row.wrapping_add(k);
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load_tail(row: *const f32, k: usize, rem: usize) -> __m512 {
        let p = row.wrapping_add(k);
        let m: __mmask16 = (1 << rem) - 1;
        // SAFETY: a masked load touches only the `rem` unmasked values at `p`.
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }
}

impl Weight for bf16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load(row: *const bf16, k: usize) -> __m512 {
        let p = row.wrapping_add(k);
        // SAFETY: 16 bf16 = 32 readable bytes (the caller's contract).
        let h = unsafe { _mm256_loadu_si256(p.cast()) };
        // bf16 is the top half of an f32: zero-extend, shift up. Exact.
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load_tail(row: *const bf16, k: usize, rem: usize) -> __m512 {
        let p = row.wrapping_add(k);
        // The 16-bit masked load needs AVX-512BW+VL: copy the tail into zeros.
        let mut buf = [bf16::ZERO; L];
        // SAFETY: `rem` < 16 readable values at `p` (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), rem);
            Self::load(buf.as_ptr(), 0)
        }
    }
}

impl Weight for f16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load(row: *const f16, k: usize) -> __m512 {
        let p = row.wrapping_add(k);
        // SAFETY: 16 f16 = 32 readable bytes (the caller's contract).
        // `vcvtph2ps` widens exactly.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load_tail(row: *const f16, k: usize, rem: usize) -> __m512 {
        let p = row.wrapping_add(k);
        // The 16-bit masked load needs AVX-512BW+VL: copy the tail into zeros.
        let mut buf = [f16::ZERO; L];
        // SAFETY: `rem` < 16 readable values at `p` (the caller's contract).
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
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load(row: *const Q8Byte, k: usize) -> __m512 {
        let blk = row.cast::<u8>().wrapping_add(k / q8::QK * q8::BLOCK_BYTES);
        // SAFETY: the row holds the block of value k: its f16 scale, then 32
        // codes, of which k % 32 .. k % 32 + 16 (k is a multiple of 16).
        unsafe {
            let bits = blk.cast::<u16>().read_unaligned();
            let d = _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16));
            let codes = _mm_loadu_si128(blk.add(2 + k % q8::QK).cast());
            // d · q is exact in f32 (11 + 7 significant bits).
            _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)))
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn load_tail(row: *const Q8Byte, k: usize, rem: usize) -> __m512 {
        // A block always holds 32 codes, so the whole vector is readable;
        // the lanes past `rem` are zeroed, whatever the padding codes hold.
        let m: __mmask16 = (1 << rem) - 1;
        // SAFETY: as `load`.
        unsafe { _mm512_maskz_mov_ps(m, Self::load(row, k)) }
    }
}

/// Sixteen [`dot`]s, `out[r][c] = a[r] · b[c]`, each with its bits
/// (sixteen accumulators, one pass).
///
/// # Safety
/// AVX-512F and FMA must be available; every vector as long as `a[0]`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot4x4<K: Weight>(a: [&[f32]; 4], b: [&[K]; 4]) -> [[f32; 4]; 4] {
    let len = a[0].len();
    assert!(
        a.iter().all(|v| v.len() == len) && b.iter().all(|v| v.len() == len),
        "dot of unequal lengths"
    );
    // acc[c][r]: key c against query r.
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let (ap, bp) = (a.map(<[f32]>::as_ptr), b.map(<[K]>::as_ptr));
    // SAFETY: all eight hold `len` values.
    unsafe { tile::<K, 4, 4>(bp, ap, len, &mut acc) };
    // Lane 4r + c of the tree's result is the sum of (query r, key c) when
    // its input m holds (query m % 4, key m / 4).
    let mut by_lane = [_mm512_setzero_ps(); 16];
    for (m, v) in by_lane.iter_mut().enumerate() {
        *v = acc[m / 4][m % 4];
    }
    let sums = hsum16_lanes(by_lane);
    let mut out = [0f32; 16];
    // SAFETY: `out` holds 16 values.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sums) };
    std::array::from_fn(|r| std::array::from_fn(|c| out[4 * r + c]))
}

cache_entry_points!("avx512f,avx2,fma");

/// [`axpy_rows`] for four weight rows `p[h]` over the same value rows,
/// each `o[h]` with its bits: 64 values of the four outputs stay in
/// registers while each value row is loaded once for the four; the
/// columns past the last 64 go through [`axpy_rows`].
///
/// # Safety
/// AVX-512F must be available; all `p` one length, all `o` one length, `v`
/// holds `(p.len() - 1) · stride + o.len()` values.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn axpy_rows4<V: Value>(p: [&[f32]; 4], v: &[V], stride: usize, mut o: [&mut [f32]; 4]) {
    const VECS: usize = 4;
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
    let whole = len - len % (VECS * 16);
    // SAFETY: every load is at j·stride + c + i < (keys - 1)·stride + len
    // (checked above), every store below `len` of its output.
    unsafe {
        // Rows in blocks, as the AVX2 version (`super::avx2::ROW_BLOCK`).
        for j0 in (0..keys).step_by(super::avx2::ROW_BLOCK) {
            let rows = j0..(j0 + super::avx2::ROW_BLOCK).min(keys);
            for c in (0..whole).step_by(VECS * 16) {
                let mut acc = [[_mm512_setzero_ps(); VECS]; 4];
                for (a, op) in acc.iter_mut().zip(op) {
                    for (i, a) in a.iter_mut().enumerate() {
                        *a = _mm512_loadu_ps(op.add(c + 16 * i));
                    }
                }
                for j in rows.clone() {
                    let vp = v.as_ptr().add(j * stride + c);
                    let mut vv = [_mm512_setzero_ps(); VECS];
                    for (i, x) in vv.iter_mut().enumerate() {
                        // The slice of the row a block ahead, as the AVX2 version.
                        _mm_prefetch::<_MM_HINT_T0>(
                            vp.wrapping_add(super::avx2::ROW_BLOCK * stride + 16 * i)
                                .cast::<i8>(),
                        );
                        *x = V::load(vp, 16 * i);
                    }
                    for (a, p) in acc.iter_mut().zip(p) {
                        let pv = _mm512_set1_ps(*p.get_unchecked(j));
                        for (a, x) in a.iter_mut().zip(&vv) {
                            *a = _mm512_add_ps(*a, _mm512_mul_ps(pv, *x));
                        }
                    }
                }
                for (a, op) in acc.iter().zip(op) {
                    for (i, a) in a.iter().enumerate() {
                        _mm512_storeu_ps(op.add(c + 16 * i), *a);
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

/// `o[i] += p[j] · v[j·stride + i]`, j in order, a product then a sum per
/// element as the scalar loop (no FMA), so the bits are its; `o` stays in
/// registers across the rows, 128 values at a time.
///
/// # Safety
/// AVX-512F must be available; `v` holds `(p.len() - 1) · stride + o.len()` values.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn axpy_rows<V: Value>(p: &[f32], v: &[V], stride: usize, o: &mut [f32]) {
    let len = o.len();
    if let Some(last) = p.len().checked_sub(1) {
        assert!(v.len() >= last * stride + len, "value rows out of range");
    }
    let whole = len - len % (8 * 16);
    let mut c = whole;
    // SAFETY: every load is at j·stride + c + i < (p.len() - 1)·stride + len
    // (checked above), every store below `len`.
    unsafe {
        for j0 in (0..p.len()).step_by(super::avx2::ROW_BLOCK) {
            let rows = j0..(j0 + super::avx2::ROW_BLOCK).min(p.len());
            for c in (0..whole).step_by(8 * 16) {
                let op = o.as_mut_ptr().add(c);
                let mut acc: [_; 8] = std::array::from_fn(|i| _mm512_loadu_ps(op.add(16 * i)));
                for j in rows.clone() {
                    let pv = _mm512_set1_ps(*p.get_unchecked(j));
                    let vp = v.as_ptr().add(j * stride + c);
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_add_ps(*a, _mm512_mul_ps(pv, V::load(vp, 16 * i)));
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    _mm512_storeu_ps(op.add(16 * i), *a);
                }
            }
        }
        while c + 16 <= len {
            let op = o.as_mut_ptr().add(c);
            let mut a = _mm512_loadu_ps(op);
            for (j, &pj) in p.iter().enumerate() {
                let x = V::load(v.as_ptr(), j * stride + c);
                a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(pj), x));
            }
            _mm512_storeu_ps(op, a);
            c += 16;
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
