//! Backbone weight matrices (f32, bf16, 8-bit blocks, a GGUF's ggml blocks,
//! waste's 4- and 3-bit blocks) and their products with f32 activations.
//!
//! Three kinds take integer paths instead, activations quantized to 8 bits
//! once per product: the 4- and 3-bit blocks ([`Matrix::Packed`]: int8 per
//! 32, then the dispatched `quant` row dots), a ggml matrix of a type with
//! an integer kernel (`crate::ggml::dot`: the k-quants, Q8_0, Q4_0, IQ4),
//! and a [`Matrix::Q8`] (by default, [`Q8Products::Int8`]): waste's q8 block
//! is byte for byte ggml's Q8_0, so its rows run the same Q8_0 kernels,
//! llama.cpp's arithmetic. Everything else is exact.
//!
//! Exact: every stored value widens to f32 exactly (a q8 value is
//! `d · q`, f16 times int8, which f32 holds exactly; a ggml row decodes
//! exactly as ggml's own dequantizer does) and all sums are f32 in one
//! order, so a bf16, ggml (without integer kernel) or [`Q8Products::Exact`]
//! q8 matrix computes what its f32 copy would, bit for bit. The integer
//! path adds the activations' 8-bit rounding (each block of 32 activations
//! to int8 with an f16 scale) and streams 1.06 bytes per weight through
//! integer dots instead of widening each to f32.
//!
//! The row kernels come per ISA (`dot.rs` the scalar `_ref` specification,
//! `avx2.rs`, `avx512.rs`), chosen once at run time ([`kernels`]) with the
//! quantized kernels' ISA (`WASTE_KERNELS=ref|avx2|avx512` forces one); this
//! file owns the table and the rayon split over rows.

/// The tiling drivers of one ISA's dense products, written once over the
/// module they are used in: the `Weight` trait (a row's values as the
/// module's vectors), the register tile, decode (rows streamed `RD` at a
/// time), prefill (the `R`×`T` tile over k-blocks, accumulators parked
/// between them), the `rows_*` entry points and the cache kernels' `dot`
/// and `dot4`. The module supplies its vector type `V` of `L` f32 lanes,
/// the tile sizes `RD`, `R`, `T`, `KB`, `ACT_BLOCK`, the operations `zero`,
/// `loadu`, `storeu`, `fmadd` and `hsum` (which ends the summation order),
/// the `Weight` impls and `dot4x4`.
#[cfg(target_arch = "x86_64")]
macro_rules! dense_drivers {
    ($features:literal) => {
        thread_local! {
            /// Parked accumulators between k-blocks, (rows, n) vectors of L lanes.
            static ACC: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
            /// bf16 rows widened to f32 for prefill, (rows, cols).
            static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
        }

        /// A weight element type as the module loads it: [`L`] consecutive values
        /// of a row as f32, exactly.
        trait Weight: Copy {
            /// One element per value, so `row + k` is value k of a row: the
            /// prefill tile may read these rows in place.
            const PLAIN: bool = true;
            /// Where row `r` of a matrix `cols` wide starts, in elements.
            fn row_start(r: usize, cols: usize) -> usize {
                r * cols
            }
            /// Values `k..k + L` of the row at `row` (`k` a multiple of [`L`]).
            ///
            /// # Safety
            /// The module's ISA available; the row holds those values.
            unsafe fn load(row: *const Self, k: usize) -> V;
            /// Values `k..k + rem` (`rem` in 1..L) of the row at `row`, zeros after.
            ///
            /// # Safety
            /// The module's ISA available; the row holds those `rem` values.
            unsafe fn load_tail(row: *const Self, k: usize, rem: usize) -> V;

            /// `acc[g] += row g · x` over `cols` values in the module's order, for
            /// the GG rows of one decode step: by default [`tile`].
            ///
            /// # Safety
            /// The module's ISA available; each row and `x` hold `cols` values.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn dot_rows<const GG: usize>(
                rows: [*const Self; GG],
                x: *const f32,
                cols: usize,
                acc: &mut [[V; 1]; GG],
            ) {
                // SAFETY: the caller's contract.
                unsafe { tile::<Self, GG, 1>(rows, [x], cols, acc) }
            }
        }

        /// `acc[r][t] += w[r][0..len] · x[t][0..len]` lane-wise in the module's order.
        ///
        /// # Safety
        /// The module's ISA available; every `w[r]`, `x[t]` points to `len` readable values.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn tile<W: Weight, const RR: usize, const TT: usize>(
            w: [*const W; RR],
            x: [*const f32; TT],
            len: usize,
            acc: &mut [[V; TT]; RR],
        ) {
            let mut a = *acc;
            let full = len - len % L;
            let mut xv = [zero(); TT];
            let mut k = 0;
            // SAFETY: k + L <= full <= len for every full load, and the tail loads
            // `len - full` values: all inside the caller's `len`.
            unsafe {
                while k < full {
                    for (v, p) in xv.iter_mut().zip(x) {
                        *v = loadu(p.add(k));
                    }
                    for (ar, p) in a.iter_mut().zip(w) {
                        let wv = W::load(p, k);
                        for (s, v) in ar.iter_mut().zip(&xv) {
                            *s = fmadd(wv, *v, *s);
                        }
                    }
                    k += L;
                }
                if k < len {
                    let rem = len - k;
                    for (v, p) in xv.iter_mut().zip(x) {
                        *v = f32::load_tail(p, k, rem);
                    }
                    for (ar, p) in a.iter_mut().zip(w) {
                        let wv = W::load_tail(p, k, rem);
                        for (s, v) in ar.iter_mut().zip(&xv) {
                            *s = fmadd(wv, *v, *s);
                        }
                    }
                }
            }
            *acc = a;
        }

        /// Lengths every entry point relies on; returns the number of rows.
        fn check(w_len: usize, cols: usize, x_len: usize, n: usize, out_len: usize) -> usize {
            let nrows = out_len / n.max(1);
            assert!(out_len == nrows * n, "output is not (rows, n)");
            assert!(w_len >= nrows * cols, "fewer weight rows than outputs");
            assert!(x_len >= n * cols, "fewer activations than n × cols");
            nrows
        }

        /// `out[i] = w_i · x` for `out.len()` rows of `cols`, GG rows at a time.
        ///
        /// # Safety
        /// The module's ISA available; `w` holds `out.len()` rows of `cols`, `x` `cols` values.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn decode_group<W: Weight, const GG: usize>(
            w: *const W,
            cols: usize,
            x: *const f32,
            out: &mut [f32],
        ) {
            let mut acc = [[zero(); 1]; GG];
            let rows = std::array::from_fn(|g| w.wrapping_add(W::row_start(g, cols)));
            // SAFETY: GG rows of `cols` at `w`, `cols` values at `x` (the contract).
            unsafe { W::dot_rows::<GG>(rows, x, cols, &mut acc) };
            for (o, a) in out.iter_mut().zip(&acc) {
                *o = hsum(a[0]);
            }
        }

        /// Matrix-vector: each row streamed once, [`RD`] rows in flight.
        ///
        /// # Safety
        /// As [`decode_group`].
        #[target_feature(enable = $features)]
        unsafe fn decode<W: Weight>(w: *const W, cols: usize, x: *const f32, out: &mut [f32]) {
            let mut r = 0;
            // SAFETY (all three): rows r.. of `w` exist for every output passed on.
            unsafe {
                while r + RD <= out.len() {
                    decode_group::<W, RD>(
                        w.wrapping_add(W::row_start(r, cols)),
                        cols,
                        x,
                        &mut out[r..r + RD],
                    );
                    r += RD;
                }
                if r + R <= out.len() {
                    decode_group::<W, R>(
                        w.wrapping_add(W::row_start(r, cols)),
                        cols,
                        x,
                        &mut out[r..r + R],
                    );
                    r += R;
                }
                while r < out.len() {
                    decode_group::<W, 1>(
                        w.wrapping_add(W::row_start(r, cols)),
                        cols,
                        x,
                        &mut out[r..=r],
                    );
                    r += 1;
                }
            }
        }

        /// Where one prefill step reads and writes.
        struct Prefill<'a, W> {
            w: *const W,
            x: *const f32,
            cols: usize,
            n: usize,
            /// Parked accumulators, (rows, n) × L, when `cols > KB`.
            park: &'a mut [f32],
            /// (rows, n).
            out: &'a mut [f32],
        }

        impl<W: Weight> Prefill<'_, W> {
            /// The RR×TT tile at rows r.., activations t.. over k0..k0 + len: starts
            /// from zero on the first k-block, from the parked sums after; reduced
            /// into `out` on the last, parked otherwise.
            ///
            /// # Safety
            /// The module's ISA available; rows r..r + RR and activations t..t + TT exist,
            /// k0 + len <= cols.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn step<const RR: usize, const TT: usize>(
                &mut self,
                r: usize,
                t: usize,
                k0: usize,
                len: usize,
            ) {
                let (cols, n) = (self.cols, self.n);
                let mut acc = [[zero(); TT]; RR];
                if k0 > 0 {
                    for (i, ar) in acc.iter_mut().enumerate() {
                        for (j, a) in ar.iter_mut().enumerate() {
                            let at = ((r + i) * n + t + j) * L;
                            // SAFETY: `park` holds (rows, n) × L values.
                            *a = unsafe { loadu(self.park[at..at + L].as_ptr()) };
                        }
                    }
                }
                let w = std::array::from_fn(|i| self.w.wrapping_add((r + i) * cols + k0));
                let x = std::array::from_fn(|j| self.x.wrapping_add((t + j) * cols + k0));
                // SAFETY: rows and activations exist and k0 + len <= cols (the contract).
                unsafe { tile::<W, RR, TT>(w, x, len, &mut acc) };
                let last = k0 + len == cols;
                for (i, ar) in acc.iter().enumerate() {
                    for (j, a) in ar.iter().enumerate() {
                        let at = (r + i) * n + t + j;
                        if last {
                            self.out[at] = hsum(*a);
                        } else {
                            // SAFETY: `park` holds (rows, n) × L values.
                            unsafe { storeu(self.park[at * L..at * L + L].as_mut_ptr(), *a) };
                        }
                    }
                }
            }
        }

        /// Matrix × activations through the register tile (see the module doc).
        ///
        /// # Safety
        /// The module's ISA available; `w` holds `out.len() / n` rows of `cols`, `x` n rows.
        #[target_feature(enable = $features)]
        unsafe fn prefill<W: Weight>(
            w: *const W,
            cols: usize,
            x: &[f32],
            n: usize,
            out: &mut [f32],
        ) {
            assert!(W::PLAIN, "the tile steps through a row by pointer");
            let nrows = out.len() / n;
            ACC.with_borrow_mut(|park| {
                if cols > KB {
                    park.resize(park.len().max(nrows * n * L), 0.0);
                }
                let mut p = Prefill {
                    w,
                    x: x.as_ptr(),
                    cols,
                    n,
                    park,
                    out,
                };
                for k0 in (0..cols).step_by(KB) {
                    let len = KB.min(cols - k0);
                    let block = (ACT_BLOCK / len).max(T) / T * T;
                    for t0 in (0..n).step_by(block) {
                        let t1 = (t0 + block).min(n);
                        let mut r = 0;
                        while r < nrows {
                            let rr = if nrows - r >= R { R } else { 1 };
                            let mut t = t0;
                            while t < t1 {
                                let tt = (t1 - t).min(T);
                                // SAFETY: r + rr <= nrows, t + tt <= n, k0 + len <= cols.
                                unsafe {
                                    if rr == R {
                                        if tt == T {
                                            p.step::<R, T>(r, t, k0, len)
                                        } else if tt == 3 {
                                            p.step::<R, 3>(r, t, k0, len)
                                        } else if tt == 2 {
                                            p.step::<R, 2>(r, t, k0, len)
                                        } else {
                                            p.step::<R, 1>(r, t, k0, len)
                                        }
                                    } else {
                                        if tt == T {
                                            p.step::<1, T>(r, t, k0, len)
                                        } else if tt == 3 {
                                            p.step::<1, 3>(r, t, k0, len)
                                        } else if tt == 2 {
                                            p.step::<1, 2>(r, t, k0, len)
                                        } else {
                                            p.step::<1, 1>(r, t, k0, len)
                                        }
                                    }
                                }
                                t += tt;
                            }
                            r += rr;
                        }
                    }
                }
            });
        }

        /// `out[i·n + t] = w_i · x_t` for the `out.len() / n` rows at the start of `w`
        /// (row-major, `cols` wide) and the `n` rows of `x`.
        ///
        /// # Safety
        /// The module's ISA must be available.
        #[target_feature(enable = $features)]
        pub unsafe fn rows_f32(w: &[f32], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
            check(w.len(), cols, x.len(), n, out.len());
            // SAFETY: lengths checked above; the ISA is the caller's contract.
            unsafe {
                if n == 1 {
                    decode(w.as_ptr(), cols, x.as_ptr(), out);
                } else if n > 1 {
                    prefill(w.as_ptr(), cols, x, n, out);
                }
            }
        }

        /// [`rows_f32`] for bf16 rows.
        ///
        /// # Safety
        /// The module's ISA must be available.
        #[target_feature(enable = $features)]
        pub unsafe fn rows_bf16(w: &[bf16], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
            let nrows = check(w.len(), cols, x.len(), n, out.len());
            // SAFETY: lengths checked above; the ISA is the caller's contract.
            unsafe {
                rows_widened(w.as_ptr(), nrows, cols, x, n, out, |wide| {
                    widen(&w[..wide.len()], wide, bf16::to_f32);
                });
            }
        }

        /// [`rows_f32`] for f16 rows (a GGUF's F16 tensors).
        ///
        /// # Safety
        /// The module's ISA must be available.
        #[target_feature(enable = $features)]
        pub unsafe fn rows_f16(w: &[f16], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
            let nrows = check(w.len(), cols, x.len(), n, out.len());
            // SAFETY: lengths checked above; the ISA is the caller's contract.
            unsafe {
                rows_widened(w.as_ptr(), nrows, cols, x, n, out, |wide| {
                    widen(&w[..wide.len()], wide, f16::to_f32);
                });
            }
        }

        /// [`rows_f32`] for [`Format::Q8`] rows: `w` their packed bytes, `cols`
        /// values wide. Every value widens exactly (`d · q`), so a q8 matrix
        /// computes what its dequantized f32 copy would, bit for bit.
        ///
        /// # Safety
        /// The module's ISA must be available.
        #[target_feature(enable = $features)]
        pub unsafe fn rows_q8(w: &[u8], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
            let nrows = check_q8(w.len(), cols, x.len(), n, out.len());
            let rows = w.as_ptr().cast::<Q8Byte>();
            // SAFETY: lengths checked above; the ISA is the caller's contract.
            unsafe { rows_widened(rows, nrows, cols, x, n, out, |wide| widen_q8(w, cols, wide)) }
        }

        /// Decode straight from the `nrows` rows of `W` at `w`; prefill from
        /// them in place too where they are plain values and n is at most the
        /// ISA's `DIRECT_MAX_N` (a vector widened per load is then cheaper
        /// than a scratch twice the rows' size), else from them widened once
        /// into a scratch by `widen` (given `nrows × cols` values): then every
        /// activation tile reuses the f32 rows, and the conversion is paid per
        /// weight, not per weight × activation tile.
        ///
        /// # Safety
        /// The module's ISA available; `w` holds `nrows` rows of `cols` values, `x` n
        /// rows of `cols`, `out` (nrows, n).
        #[target_feature(enable = $features)]
        unsafe fn rows_widened<W: Weight>(
            w: *const W,
            nrows: usize,
            cols: usize,
            x: &[f32],
            n: usize,
            out: &mut [f32],
            widen: impl FnOnce(&mut [f32]),
        ) {
            if n == 1 {
                // SAFETY: the caller's contract.
                unsafe { decode(w, cols, x.as_ptr(), out) };
                return;
            }
            if n == 0 {
                return;
            }
            if W::PLAIN && n <= DIRECT_MAX_N {
                // SAFETY: the caller's contract.
                unsafe { prefill(w, cols, x, n, out) };
                return;
            }
            WIDE.with_borrow_mut(|wide| {
                let len = nrows * cols;
                wide.resize(wide.len().max(len), 0.0);
                widen(&mut wide[..len]);
                // SAFETY: `wide` holds nrows rows of `cols`; the rest is the caller's contract.
                unsafe { prefill(wide.as_ptr(), cols, x, n, out) };
            });
        }

        /// bf16 or f16 → f32, exactly (`tail` widens the last values one by one).
        #[target_feature(enable = $features)]
        fn widen<W: Weight>(src: &[W], dst: &mut [f32], tail: impl Fn(W) -> f32) {
            let mut s = src.chunks_exact(L);
            let mut d = dst.chunks_exact_mut(L);
            for (a, b) in (&mut s).zip(&mut d) {
                // SAFETY: L values each side.
                unsafe { storeu(b.as_mut_ptr(), W::load(a.as_ptr(), 0)) };
            }
            for (a, b) in s.remainder().iter().zip(d.into_remainder()) {
                *b = tail(*a);
            }
        }

        /// `Σ a[i]·b[i]` in the module's order (one L-lane FMA chain, hsum), `b`
        /// widened exactly: an f16 `b` gives the f32 dot of its widened copy, bit
        /// for bit (each lane's FMA takes the same two factors).
        ///
        /// # Safety
        /// The module's ISA must be available.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn dot<K: Weight>(a: &[f32], b: &[K]) -> f32 {
            assert_eq!(a.len(), b.len(), "dot of unequal lengths");
            let mut acc = [[zero(); 1]; 1];
            // SAFETY: both hold a.len() values.
            unsafe { tile::<K, 1, 1>([b.as_ptr()], [a.as_ptr()], a.len(), &mut acc) };
            hsum(acc[0][0])
        }

        /// Four [`dot`]s of `a`, each with its bits (the same FMA chain per row,
        /// in one pass over `a`).
        ///
        /// # Safety
        /// The module's ISA must be available; every `b[i]` as long as `a`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn dot4<K: Weight>(a: &[f32], b: [&[K]; 4]) -> [f32; 4] {
            assert!(
                b.iter().all(|b| b.len() == a.len()),
                "dot of unequal lengths"
            );
            let mut acc = [[zero(); 1]; 4];
            // SAFETY: all five hold a.len() values.
            unsafe { tile::<K, 4, 1>(b.map(<[K]>::as_ptr), [a.as_ptr()], a.len(), &mut acc) };
            // A loop, not `map`: a closure does not inherit the target features,
            // so it would take each vector through memory.
            let mut out = [0f32; 4];
            for (o, v) in out.iter_mut().zip(acc) {
                *o = hsum(v[0]);
            }
            out
        }
    };
}

/// The `#[target_feature]` entry points of one ISA's cache kernels, over
/// the generic bodies of the module it is used in (`dot`, `dot4`,
/// `dot4x4`, `axpy_rows`, `axpy_rows4`): each for f32 rows and f16 rows.
#[cfg(target_arch = "x86_64")]
macro_rules! cache_entry_points {
    ($features:literal) => {
        cache_entry_points!($features;
            dot_f32 = dot(a: &[f32], b: &[f32]) -> f32;
            dot_f16 = dot(a: &[f32], b: &[f16]) -> f32;
            dot4_f32 = dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4];
            dot4_f16 = dot4(a: &[f32], b: [&[f16]; 4]) -> [f32; 4];
            dot4x4_f32 = dot4x4(a: [&[f32]; 4], b: [&[f32]; 4]) -> [[f32; 4]; 4];
            dot4x4_f16 = dot4x4(a: [&[f32]; 4], b: [&[f16]; 4]) -> [[f32; 4]; 4];
            axpy_rows_f32 = axpy_rows(p: &[f32], v: &[f32], stride: usize, o: &mut [f32]);
            axpy_rows_f16 = axpy_rows(p: &[f32], v: &[f16], stride: usize, o: &mut [f32]);
            axpy_rows4_f32 = axpy_rows4(p: [&[f32]; 4], v: &[f32], stride: usize, o: [&mut [f32]; 4]);
            axpy_rows4_f16 = axpy_rows4(p: [&[f32]; 4], v: &[f16], stride: usize, o: [&mut [f32]; 4]);
        );
    };
    ($features:literal; $($name:ident = $body:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {$(
        #[doc = concat!("[`", stringify!($body), "`] on this ISA.")]
        ///
        /// # Safety
        #[doc = concat!("`", $features, "` available; the lengths of [`", stringify!($body), "`].")]
        #[target_feature(enable = $features)]
        pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the same contract.
            unsafe { $body($($arg),*) }
        }
    )*};
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod dot;
pub mod exp;
#[cfg(target_arch = "x86_64")]
mod exp_simd;

use std::borrow::Cow;
use std::sync::OnceLock;

use half::{bf16, f16};
use rayon::prelude::*;

pub use dot::{
    axpy_rows_f16_ref, axpy_rows_f32_ref, axpy_rows4_f16_ref, axpy_rows4_f32_ref, dot_f16_ref,
    dot_f32_ref, dot4_f16_ref, dot4_f32_ref, dot4x4_f16_ref, dot4x4_f32_ref, rows_bf16_ref,
    rows_f16_ref, rows_f32_ref, rows_q8_ref,
};

use crate::ggml::GgmlType;
use crate::ggml::act::{GgmlActs, Pairing};
use crate::ggml::dot::GgmlKernels;
use crate::ggml::layout::RowLayout;
use crate::quant::{Isa, Kernels, PackedMatrix};
use crate::{Error, Format, Result};

/// Rows per rayon task: small enough to spread a 576-row matrix over cores,
/// large enough that a task outweighs its scheduling.
const ROWS_PER_TASK: usize = 16;
/// Rows per rayon task of a prefill: each task reads all the activations
/// once per row group of its register tile, so more rows amortise the
/// task's first pass over them (48: a multiple of every ISA's tile height;
/// 1.00-1.04 x the GFLOP/s of 16, docs/BENCH.md).
pub(crate) const PREFILL_ROWS_PER_TASK: usize = 48;

/// `out[i·n + t] = w_i · x_t` for the `out.len() / n` rows at the start of the
/// row-major `w` (`cols` wide) and the n rows of x (n, cols).
///
/// # Safety
/// The ISA the function was compiled for must be available.
type Rows<W> = unsafe fn(w: &[W], cols: usize, x: &[f32], n: usize, out: &mut [f32]);

/// `Σ a[i]·b[i]`, `b` widened exactly (f32, or an f16 cache row).
///
/// # Safety
/// The ISA the function was compiled for must be available.
type Dot<K> = unsafe fn(a: &[f32], b: &[K]) -> f32;

/// Four [`Dot`]s of one vector, each with [`Dot`]'s bits.
///
/// # Safety
/// The ISA the function was compiled for must be available.
type Dot4<K> = unsafe fn(a: &[f32], b: [&[K]; 4]) -> [f32; 4];

/// The sixteen [`Dot`]s of four vectors with four others, each with
/// [`Dot`]'s bits: `out[r][c] = a[r] · b[c]`.
///
/// # Safety
/// The ISA the function was compiled for must be available.
type Dot4x4<K> = unsafe fn(a: [&[f32]; 4], b: [&[K]; 4]) -> [[f32; 4]; 4];

/// `o[i] += p[j] · v[j·stride + i]` for j in order, a product then a sum
/// (no FMA), so every ISA gives the scalar loop's bits.
///
/// # Safety
/// The ISA the function was compiled for must be available.
type AxpyRows<V> = unsafe fn(p: &[f32], v: &[V], stride: usize, o: &mut [f32]);

/// Four [`AxpyRows`] over the same value rows, each with its bits.
///
/// # Safety
/// The ISA the function was compiled for must be available.
type AxpyRows4<V> = unsafe fn(p: [&[f32]; 4], v: &[V], stride: usize, o: [&mut [f32]; 4]);

/// `x[i] = e^(x[i] - m)` ([`exp::exp_sub_ref`]'s bits).
///
/// # Safety
/// The ISA the function was compiled for must be available.
type ExpSub = unsafe fn(x: &mut [f32], m: f32);

/// `g[i] = silu(g[i]) · u[i]` ([`exp::silu_mul_ref`]'s bits).
///
/// # Safety
/// The ISA the function was compiled for must be available.
type SiluMul = unsafe fn(g: &mut [f32], u: &[f32]);

/// The products of attention with its cache rows of one value type (f32
/// or f16): scores ([`DenseKernels::dot`], `dot4`, `dot4x4`) and the
/// weighted sums of value rows (`axpy_rows`, `axpy_rows4`).
#[derive(Debug)]
pub struct CacheKernels<V: 'static> {
    dot: Dot<V>,
    dot4: Dot4<V>,
    dot4x4: Dot4x4<V>,
    axpy_rows: AxpyRows<V>,
    axpy_rows4: AxpyRows4<V>,
}

/// A value type of attention's cache rows: f32 (exact), or f16 (half the
/// bytes; llama.cpp's default cache type), widened exactly as it is read.
pub trait CacheValue: Copy + Send + Sync + 'static {
    /// This type's kernels in `k`.
    fn kernels(k: &DenseKernels) -> &CacheKernels<Self>;
    /// The value nearest `x` (round to nearest even).
    fn from_f32(x: f32) -> Self;
}

impl CacheValue for f32 {
    fn kernels(k: &DenseKernels) -> &CacheKernels<f32> {
        &k.cache_f32
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl CacheValue for f16 {
    fn kernels(k: &DenseKernels) -> &CacheKernels<f16> {
        &k.cache_f16
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

/// The dense kernels of one ISA. Only obtainable for an ISA this CPU runs,
/// which is what makes calling its function pointers sound.
#[derive(Debug)]
pub struct DenseKernels {
    isa: Isa,
    cache_f32: CacheKernels<f32>,
    /// Each bit for bit `cache_f32`'s kernel on the rows widened.
    cache_f16: CacheKernels<f16>,
    exp_sub: ExpSub,
    silu_mul: SiluMul,
    f32: Rows<f32>,
    bf16: Rows<bf16>,
    f16: Rows<f16>,
    /// `w` the rows' packed [`Format::Q8`] bytes, `cols` their values.
    q8: Rows<u8>,
}

static REF: DenseKernels = DenseKernels {
    isa: Isa::Ref,
    cache_f32: CacheKernels {
        dot: dot_f32_ref,
        dot4: dot4_f32_ref,
        dot4x4: dot4x4_f32_ref,
        axpy_rows: axpy_rows_f32_ref,
        axpy_rows4: axpy_rows4_f32_ref,
    },
    cache_f16: CacheKernels {
        dot: dot_f16_ref,
        dot4: dot4_f16_ref,
        dot4x4: dot4x4_f16_ref,
        axpy_rows: axpy_rows_f16_ref,
        axpy_rows4: axpy_rows4_f16_ref,
    },
    exp_sub: exp::exp_sub_ref,
    silu_mul: exp::silu_mul_ref,
    f32: rows_f32_ref,
    bf16: rows_bf16_ref,
    f16: rows_f16_ref,
    q8: rows_q8_ref,
};

#[cfg(target_arch = "x86_64")]
static AVX2: DenseKernels = DenseKernels {
    isa: Isa::Avx2,
    cache_f32: CacheKernels {
        dot: avx2::dot_f32,
        dot4: avx2::dot4_f32,
        dot4x4: avx2::dot4x4_f32,
        axpy_rows: avx2::axpy_rows_f32,
        axpy_rows4: avx2::axpy_rows4_f32,
    },
    cache_f16: CacheKernels {
        dot: avx2::dot_f16,
        dot4: avx2::dot4_f16,
        dot4x4: avx2::dot4x4_f16,
        axpy_rows: avx2::axpy_rows_f16,
        axpy_rows4: avx2::axpy_rows4_f16,
    },
    exp_sub: exp_simd::exp_sub_avx2,
    silu_mul: exp_simd::silu_mul_avx2,
    f32: avx2::rows_f32,
    bf16: avx2::rows_bf16,
    f16: avx2::rows_f16,
    q8: avx2::rows_q8,
};

#[cfg(target_arch = "x86_64")]
static AVX512: DenseKernels = DenseKernels {
    isa: Isa::Avx512,
    cache_f32: CacheKernels {
        dot: avx512::dot_f32,
        dot4: avx512::dot4_f32,
        dot4x4: avx512::dot4x4_f32,
        axpy_rows: avx512::axpy_rows_f32,
        axpy_rows4: avx512::axpy_rows4_f32,
    },
    cache_f16: CacheKernels {
        dot: avx512::dot_f16,
        dot4: avx512::dot4_f16,
        dot4x4: avx512::dot4x4_f16,
        axpy_rows: avx512::axpy_rows_f16,
        axpy_rows4: avx512::axpy_rows4_f16,
    },
    exp_sub: exp_simd::exp_sub_avx512,
    silu_mul: exp_simd::silu_mul_avx512,
    f32: avx512::rows_f32,
    bf16: avx512::rows_bf16,
    f16: avx512::rows_f16,
    q8: avx512::rows_q8,
};

impl DenseKernels {
    /// The kernels of `isa`, or `None` where this CPU lacks it.
    pub fn for_isa(isa: Isa) -> Option<&'static DenseKernels> {
        if !isa.available() {
            return None;
        }
        match isa {
            Isa::Ref => Some(&REF),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Some(&AVX2),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Some(&AVX512),
            #[cfg(not(target_arch = "x86_64"))]
            _ => None,
        }
    }

    /// The ISA of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `Σ a[i]·b[i]` in f32, `b` widened exactly. Panics if the lengths differ.
    pub fn dot<V: CacheValue>(&self, a: &[f32], b: &[V]) -> f32 {
        assert_eq!(a.len(), b.len(), "dot of unequal lengths");
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`).
        unsafe { (V::kernels(self).dot)(a, b) }
    }

    /// `[a · b[0], .., a · b[3]]`, each bit for bit [`DenseKernels::dot`].
    /// Panics if a length differs.
    pub fn dot4<V: CacheValue>(&self, a: &[f32], b: [&[V]; 4]) -> [f32; 4] {
        assert!(
            b.iter().all(|b| b.len() == a.len()),
            "dot of unequal lengths"
        );
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`).
        unsafe { (V::kernels(self).dot4)(a, b) }
    }

    /// `out[r][c] = a[r] · b[c]`, each bit for bit [`DenseKernels::dot`]:
    /// four queries against four keys in one pass, every key vector loaded
    /// once for the four queries. Panics if a length differs.
    pub fn dot4x4<V: CacheValue>(&self, a: [&[f32]; 4], b: [&[V]; 4]) -> [[f32; 4]; 4] {
        let len = a[0].len();
        assert!(
            a.iter().all(|v| v.len() == len) && b.iter().all(|v| v.len() == len),
            "dot of unequal lengths"
        );
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`).
        unsafe { (V::kernels(self).dot4x4)(a, b) }
    }

    /// `o[i] += p[j] · v[j·stride + i]` for each j in order (attention's
    /// weighted sum of value rows), bit for bit the scalar loop. Panics if
    /// `v` is too short.
    pub fn axpy_rows<V: CacheValue>(&self, p: &[f32], v: &[V], stride: usize, o: &mut [f32]) {
        if let Some(last) = p.len().checked_sub(1) {
            assert!(
                v.len() >= last * stride + o.len(),
                "value rows out of range"
            );
        }
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`); the
        // lengths are checked above.
        unsafe { (V::kernels(self).axpy_rows)(p, v, stride, o) }
    }

    /// Four [`DenseKernels::axpy_rows`] over the same value rows (the heads
    /// that share them), each output with its bits, every value row loaded
    /// once for the four. Panics if the weights or outputs differ in length
    /// or `v` is too short.
    pub fn axpy_rows4<V: CacheValue>(
        &self,
        p: [&[f32]; 4],
        v: &[V],
        stride: usize,
        o: [&mut [f32]; 4],
    ) {
        let (keys, len) = (p[0].len(), o[0].len());
        assert!(
            p.iter().all(|p| p.len() == keys) && o.iter().all(|o| o.len() == len),
            "unequal weight or output rows"
        );
        if let Some(last) = keys.checked_sub(1) {
            assert!(v.len() >= last * stride + len, "value rows out of range");
        }
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`); the
        // lengths are checked above.
        unsafe { (V::kernels(self).axpy_rows4)(p, v, stride, o) }
    }

    /// `x[i] = e^(x[i] - m)`, bit for bit [`exp::exp_sub_ref`].
    pub fn exp_sub(&self, x: &mut [f32], m: f32) {
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`).
        unsafe { (self.exp_sub)(x, m) }
    }

    /// `g[i] = silu(g[i]) · u[i]`, bit for bit [`exp::silu_mul_ref`].
    /// Panics if the lengths differ.
    pub fn silu_mul(&self, g: &mut [f32], u: &[f32]) {
        assert_eq!(g.len(), u.len(), "gate and up of unequal lengths");
        // SAFETY: as `exp_sub`; the lengths are checked above.
        unsafe { (self.silu_mul)(g, u) }
    }

    /// `out[i·n + t] = row(r0 + i) · x[t]` for the `out.len() / n` rows of `m`
    /// from `r0`; x is (n, cols). Single-threaded. Panics on short operands.
    pub fn rows(&self, m: &Matrix, r0: usize, x: &[f32], n: usize, out: &mut [f32]) {
        let cols = m.cols();
        if cols == 0 {
            out.fill(0.0);
            return;
        }
        let nrows = out.len() / n.max(1);
        assert!(r0 + nrows <= m.rows(), "rows past the end of the matrix");
        let span = r0 * cols..(r0 + nrows) * cols;
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA (`Isa::available`); the kernels
        // check the lengths themselves.
        unsafe {
            match m {
                Matrix::F32 { data, .. } => (self.f32)(&data[span], cols, x, n, out),
                Matrix::Bf16 { data, .. } => (self.bf16)(&data[span], cols, x, n, out),
                Matrix::Q8 {
                    data,
                    products: Q8Products::Exact,
                    ..
                } => {
                    (self.q8)(&data[q8_span(cols, r0, nrows)], cols, x, n, out);
                }
                Matrix::Q8 { data, .. } => {
                    let mut acts = GgmlActs::default();
                    let (padded, x) = q8_0_width(x, n, cols);
                    acts.quantize(Pairing::Q8_0, &x, n, padded);
                    let rb = Format::Q8.row_bytes(cols);
                    let w = &data[q8_span(cols, r0, nrows)];
                    crate::ggml::dot::rows_dot(self.ggml(), GgmlType::Q8_0, w, rb, &acts, out);
                }
                Matrix::Ggml { .. } => self.rows_ggml(m, r0, x, n, out),
                Matrix::Packed { format, .. } => {
                    let acts = format.quantized_acts(x, n, cols);
                    let packed = m.packed().expect("a block matrix has packed rows");
                    crate::par::matmul_rows(self.quant(), &packed, r0, &acts, out);
                }
            }
        }
    }

    /// The `quant` row kernels of this table's ISA (the fastest variant of
    /// it this CPU runs), which [`Matrix::Packed`] products go through.
    fn quant(&self) -> &'static Kernels {
        Kernels::for_isa(self.isa).expect("a DenseKernels exists only for an ISA this CPU runs")
    }

    /// The ggml integer kernels of this table's ISA (the fastest variant of
    /// it this CPU runs), which integer [`Matrix::Q8`] products go through.
    fn ggml(&self) -> &'static GgmlKernels {
        GgmlKernels::for_isa_chosen(self.isa)
            .expect("a DenseKernels exists only for an ISA this CPU runs")
    }

    /// `out[i·n + t] = w_i · x_t` for the `out.len() / n` f32 rows at the
    /// start of `w` (`cols` wide): [`DenseKernels::rows`] on rows already
    /// decoded. Panics if `w` or `x` is too short or `out` is not (rows, n).
    pub(crate) fn rows_f32(&self, w: &[f32], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
        // SAFETY: a `DenseKernels` is only handed out by `for_isa`, which
        // checked that this CPU runs its ISA; the kernel checks the lengths.
        unsafe { (self.f32)(w, cols, x, n, out) }
    }

    /// [`DenseKernels::rows`] on rows `r0..` of a matrix of plain floats
    /// held as little-endian bytes, row-major: a GGUF's F32, F16 or BF16
    /// tensor, a native `f32` or `bf16` matrix. `false`, with nothing
    /// written, where `m` holds something else or its bytes are not
    /// aligned for its values (the callers then decode rows into f32 and
    /// dot them, the same sums).
    pub(crate) fn rows_of_floats(
        &self,
        m: &PackedMatrix<'_>,
        r0: usize,
        x: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> bool {
        if cfg!(target_endian = "big") || m.layout() != RowLayout::RowMajor {
            return false;
        }
        let (format, bytes, cols) = (m.format(), m.bytes(), m.cols());
        let nrows = out.len() / n.max(1);
        let span = |size: usize| bytes.get(r0 * cols * size..(r0 + nrows) * cols * size);
        // SAFETY (each call): a `DenseKernels` is only handed out by
        // `for_isa`, which checked that this CPU runs its ISA; the kernels
        // check the lengths themselves.
        match format {
            Format::F32 | Format::Ggml(GgmlType::F32) => {
                if let Some(w) = span(4).and_then(|b| bytemuck::try_cast_slice::<u8, f32>(b).ok()) {
                    unsafe { (self.f32)(w, cols, x, n, out) };
                    return true;
                }
            }
            Format::Bf16 | Format::Ggml(GgmlType::BF16) => {
                if let Some(w) = span(2).and_then(|b| bytemuck::try_cast_slice::<u8, bf16>(b).ok())
                {
                    // SAFETY: as above.
                    unsafe { (self.bf16)(w, cols, x, n, out) };
                    return true;
                }
            }
            Format::Ggml(GgmlType::F16) => {
                if let Some(w) = span(2).and_then(|b| bytemuck::try_cast_slice::<u8, f16>(b).ok()) {
                    // SAFETY: as above.
                    unsafe { (self.f16)(w, cols, x, n, out) };
                    return true;
                }
            }
            _ => {}
        }
        false
    }

    /// A ggml matrix's rows: F32, F16 and BF16 ones on this table's float
    /// kernels ([`DenseKernels::rows_of_floats`]), the others each decoded
    /// into a scratch row by the scalar ggml decoder and dotted with this
    /// table's `dot` (the sum the f32 kernels compute).
    fn rows_ggml(&self, m: &Matrix, r0: usize, x: &[f32], n: usize, out: &mut [f32]) {
        let packed = m.packed().expect("a ggml matrix has packed rows");
        let cols = m.cols();
        if self.rows_of_floats(&packed, r0, x, n, out) {
            return;
        }
        let mut row = vec![0f32; cols];
        for (i, o) in out.chunks_mut(n.max(1)).enumerate() {
            crate::native::decode_row(&packed, r0 + i, &mut row);
            for (t, v) in o.iter_mut().enumerate() {
                *v = self.dot(&row, &x[t * cols..(t + 1) * cols]);
            }
        }
    }
}

/// x (n, cols) widened to whole Q8_0 blocks: the padded width and the rows,
/// each tail zero-filled (borrowed as they are when `cols` is a multiple
/// of 32). Zero activations give zero codes, so whatever a q8 row's padding
/// holds adds nothing to an integer product.
fn q8_0_width(x: &[f32], n: usize, cols: usize) -> (usize, Cow<'_, [f32]>) {
    let padded = cols.next_multiple_of(crate::q8::QK);
    if padded == cols {
        return (cols, Cow::Borrowed(x));
    }
    let mut wide = vec![0f32; n * padded];
    for (w, x) in wide.chunks_exact_mut(padded).zip(x.chunks_exact(cols)) {
        w[..cols].copy_from_slice(x);
    }
    (padded, Cow::Owned(wide))
}

/// Where `count` rows from `r0` lie in the bytes of a q8 matrix `cols` wide.
fn q8_span(cols: usize, r0: usize, count: usize) -> std::ops::Range<usize> {
    let rb = Format::Q8.row_bytes(cols);
    r0 * rb..(r0 + count) * rb
}

/// A byte of a [`Format::Q8`] row, as the SIMD row kernels address it: row
/// `r` starts `r · row_bytes` bytes in; value `k` is code `k % 32` of block
/// `k / 32` times that block's f16 scale.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Q8Byte(#[allow(dead_code)] u8);

/// Lengths the q8 row kernels rely on; returns the number of rows.
#[cfg(target_arch = "x86_64")]
fn check_q8(w_len: usize, cols: usize, x_len: usize, n: usize, out_len: usize) -> usize {
    let nrows = out_len / n.max(1);
    assert!(out_len == nrows * n, "output is not (rows, n)");
    assert!(
        w_len >= nrows * Format::Q8.row_bytes(cols),
        "fewer weight rows than outputs"
    );
    assert!(x_len >= n * cols, "fewer activations than n × cols");
    nrows
}

/// The values of the whole q8 rows in `w`, `cols` wide, into `out`.
#[cfg(target_arch = "x86_64")]
fn widen_q8(w: &[u8], cols: usize, out: &mut [f32]) {
    let rb = Format::Q8.row_bytes(cols);
    for (row, o) in w.chunks_exact(rb).zip(out.chunks_exact_mut(cols)) {
        crate::q8::dequantize_row(row, o);
    }
}

/// The dense kernels every caller uses: those of the ISA the quantized
/// kernels chose ([`crate::quant::kernels`]: the best this CPU runs, or the
/// one `WASTE_KERNELS` names), resolved once.
pub fn kernels() -> &'static DenseKernels {
    static CHOSEN: OnceLock<&'static DenseKernels> = OnceLock::new();
    CHOSEN.get_or_init(|| DenseKernels::for_isa(crate::quant::kernels().isa()).unwrap_or(&REF))
}

/// `Σ a[i]·b[i]` in f32 with the dispatched kernel: the same sum, bit for bit,
/// as one entry of [`Matrix::matmul`] on these vectors. Panics if the lengths differ.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    kernels().dot(a, b)
}

/// [`DenseKernels::dot4`] with the dispatched kernels: four of
/// [`dot_f32`], bit for bit.
pub fn dot4_f32(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    kernels().dot4(a, b)
}

/// [`DenseKernels::dot4x4`] with the dispatched kernels: sixteen of
/// [`dot_f32`], bit for bit.
pub fn dot4x4_f32(a: [&[f32]; 4], b: [&[f32]; 4]) -> [[f32; 4]; 4] {
    kernels().dot4x4(a, b)
}

/// Asks the cache for every line of `v` ahead of its use: a hint, with no
/// effect on any result.
pub fn prefetch<T>(v: &[T]) {
    prefetch_lines(v.as_ptr().cast(), size_of_val(v));
}

/// Asks the cache for the lines of the `bytes` bytes at `p` (none where the
/// ISA has no prefetch). A prefetch never faults, whatever the address, so
/// `p` need not point into anything (hence `wrapping_add`: past an
/// allocation's end it asks for nothing useful, harmlessly).
#[inline(always)]
pub(crate) fn prefetch_lines(p: *const u8, bytes: usize) {
    prefetch_lines_into::<false>(p, bytes);
}

/// [`prefetch_lines`] into the second-level cache but not the first: for
/// lines asked for well ahead, which in the first would push out what is
/// being read.
#[inline(always)]
pub(crate) fn prefetch_lines_l2(p: *const u8, bytes: usize) {
    prefetch_lines_into::<true>(p, bytes);
}

#[inline(always)]
fn prefetch_lines_into<const L2: bool>(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};
        let p = p.cast::<i8>();
        let one = |at: usize| {
            // SAFETY: SSE is x86_64's baseline; a prefetch never faults.
            unsafe {
                if L2 {
                    _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(at));
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at));
                }
            }
        };
        let mut at = 0;
        while at < bytes {
            one(at);
            at += 64;
        }
        if bytes > 0 {
            // the last byte, whose line a misaligned range's steps can miss
            one(bytes - 1);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// [`DenseKernels::axpy_rows`] with the dispatched kernels.
pub fn axpy_rows_f32(p: &[f32], v: &[f32], stride: usize, o: &mut [f32]) {
    kernels().axpy_rows(p, v, stride, o);
}

/// [`DenseKernels::axpy_rows4`] with the dispatched kernels.
pub fn axpy_rows4_f32(p: [&[f32]; 4], v: &[f32], stride: usize, o: [&mut [f32]; 4]) {
    kernels().axpy_rows4(p, v, stride, o);
}

/// A row-major matrix of shape (rows, cols) = (out_features, in_features),
/// the Hugging Face `nn.Linear.weight` layout.
#[derive(Debug, Clone)]
pub enum Matrix {
    F32 {
        rows: usize,
        cols: usize,
        data: Vec<f32>,
    },
    Bf16 {
        rows: usize,
        cols: usize,
        data: Vec<bf16>,
    },
    /// [`Format::Q8`] blocks (32 int8 and an f16 scale, 34 bytes per 32
    /// values; a ragged row's last block zero-padded), each row on its own:
    /// 1.06 bytes per weight, held packed. `products` says how they meet
    /// f32 activations.
    Q8 {
        rows: usize,
        cols: usize,
        data: Vec<u8>,
        products: Q8Products,
    },
    /// A GGUF tensor's ggml blocks as the file stores them, whole blocks
    /// per row ([`Format::Ggml`]); rows decode on the fly. The rows lie as
    /// `layout` says: Q4_0, IQ4_NL, Q4_K and IQ4_XS interleaved by sixteen
    /// ([`crate::ggml::layout::interleaving`]), what their sixteen-row
    /// decode kernels read as one stream, as the store's expert records
    /// hold them; the rest as stored. A type with an integer kernel
    /// (`crate::ggml::dot::has_kernel`) multiplies as `products` says, as
    /// a [`Matrix::Q8`] does; the others always exactly.
    Ggml {
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
        layout: RowLayout,
        products: Q8Products,
    },
    /// waste's sub-8-bit block formats ([`Format::Q4`] 4.25 bpw,
    /// [`Format::Q3`] / [`Format::Q3Rtn`] / [`Format::Q3Tcq`] 3.25 bpw),
    /// each row on its own, held packed. Products quantize the activations
    /// to int8 per 32 (the one inexact step of the dense path; `q3-tcq`
    /// rotates them first, as its rows are) and run the expert row kernels.
    Packed {
        format: Format,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    },
}

/// How a [`Matrix::Q8`] multiplies f32 activations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Q8Products {
    /// llama.cpp's arithmetic on its Q8_0 blocks: each activation row
    /// quantized once per product to Q8_0 (int8 per 32, f16 scale; a ragged
    /// row's tail padded with zeros, so the weights' padding never counts),
    /// then integer block dots (`crate::ggml::dot`, VNNI or AVX2). Adds the
    /// activations' rounding to the weights'.
    #[default]
    Int8,
    /// Every weight widened to f32 and dotted in f32: bit for bit what the
    /// dequantized f32 matrix computes, so only the weights are rounded.
    /// Slower: f32 FMAs on every weight instead of int8 dots.
    Exact,
}

impl Q8Products {
    /// [`Q8Products::Exact`] when `exact` (an `--exact-q8` flag), else the
    /// default.
    pub fn exact_if(exact: bool) -> Self {
        if exact { Self::Exact } else { Self::Int8 }
    }

    /// `int8` or `exact`, as reports name them.
    pub fn name(self) -> &'static str {
        match self {
            Self::Int8 => "int8",
            Self::Exact => "exact",
        }
    }
}

/// The formats [`Matrix::Packed`] holds: waste's block formats whose
/// products take int8 activations, less `q8` (which has its exact variant).
fn is_low_bit(format: Format) -> bool {
    matches!(
        format,
        Format::Q3 | Format::Q3Rtn | Format::Q3Tcq | Format::Q4
    )
}

impl Matrix {
    pub fn f32(rows: usize, cols: usize, data: Vec<f32>) -> Result<Self> {
        check_len(rows, cols, data.len())?;
        Ok(Self::F32 { rows, cols, data })
    }

    pub fn bf16(rows: usize, cols: usize, data: Vec<bf16>) -> Result<Self> {
        check_len(rows, cols, data.len())?;
        Ok(Self::Bf16 { rows, cols, data })
    }

    /// A matrix of [`Format::Q8`] rows, checking that `data` is exactly
    /// their size; products take the default [`Q8Products::Int8`].
    pub fn q8(rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        PackedMatrix::new(Format::Q8, rows, cols, &data)?;
        Ok(Self::Q8 {
            rows,
            cols,
            data,
            products: Q8Products::default(),
        })
    }

    /// The same matrix with its int8-activation products (if it is a
    /// [`Matrix::Q8`] or a [`Matrix::Ggml`]) taken as `products` says;
    /// other kinds are returned unchanged.
    pub fn with_q8_products(mut self, products: Q8Products) -> Self {
        if let Self::Q8 { products: p, .. } | Self::Ggml { products: p, .. } = &mut self {
            *p = products;
        }
        self
    }

    /// A matrix of a ggml type's rows (any type [`Format::ggml`] keeps as
    /// blocks, row-major in `data`), checking that `data` is exactly their
    /// size; held interleaved by sixteen where the type has such a layout
    /// and the matrix a group of rows ([`Matrix::Ggml`]).
    pub fn ggml(ty: GgmlType, rows: usize, cols: usize, mut data: Vec<u8>) -> Result<Self> {
        PackedMatrix::new(Format::Ggml(ty), rows, cols, &data)?;
        let layout = crate::ggml::layout::for_rows(ty, rows);
        if layout != RowLayout::RowMajor {
            let f = Format::Ggml(ty);
            crate::ggml::layout::lay_out_in_place(
                layout,
                &mut data,
                f.row_bytes(cols),
                f.block_bytes(),
            );
        }
        Ok(Self::Ggml {
            ty,
            rows,
            cols,
            data,
            layout,
            products: Q8Products::default(),
        })
    }

    /// A matrix of any block format's rows as the backbone holds it: `q8`
    /// as [`Matrix::Q8`], ggml blocks as [`Matrix::Ggml`], `q4` and `q3` as
    /// [`Matrix::Packed`]; checks that `data` is exactly their size. Errors
    /// for the native formats, which the backbone widens instead.
    pub fn blocks(format: Format, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        match format {
            Format::Q8 => Self::q8(rows, cols, data),
            Format::Ggml(ty) => Self::ggml(ty, rows, cols, data),
            f if is_low_bit(f) => {
                PackedMatrix::new(format, rows, cols, &data)?;
                Ok(Self::Packed {
                    format,
                    rows,
                    cols,
                    data,
                })
            }
            other => Err(Error::UnknownFormat {
                what: format!("{other} as a packed backbone matrix"),
            }),
        }
    }

    /// The block format of the rows, `None` for f32 and bf16.
    pub fn format(&self) -> Option<Format> {
        Some(match self {
            Self::Q8 { .. } => Format::Q8,
            Self::Ggml { ty, .. } => Format::Ggml(*ty),
            Self::Packed { format, .. } => *format,
            Self::F32 { .. } | Self::Bf16 { .. } => return None,
        })
    }

    /// The rows as a packed matrix, for the block formats (`q8`, ggml, `q4`, `q3`).
    fn packed(&self) -> Option<PackedMatrix<'_>> {
        let (format, rows, cols, data) = match self {
            Self::Packed {
                format,
                rows,
                cols,
                data,
            } => (*format, rows, cols, data),
            Self::Q8 {
                rows, cols, data, ..
            } => (Format::Q8, rows, cols, data),
            Self::Ggml {
                ty,
                rows,
                cols,
                data,
                layout,
                ..
            } => {
                return Some(
                    PackedMatrix::with_layout(Format::Ggml(*ty), *rows, *cols, data, *layout)
                        .expect("checked when the matrix was made"),
                );
            }
            Self::F32 { .. } | Self::Bf16 { .. } => return None,
        };
        Some(
            PackedMatrix::new(format, *rows, *cols, data)
                .expect("checked when the matrix was made"),
        )
    }

    pub fn rows(&self) -> usize {
        match self {
            Self::F32 { rows, .. }
            | Self::Bf16 { rows, .. }
            | Self::Q8 { rows, .. }
            | Self::Ggml { rows, .. }
            | Self::Packed { rows, .. } => *rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Self::F32 { cols, .. }
            | Self::Bf16 { cols, .. }
            | Self::Q8 { cols, .. }
            | Self::Ggml { cols, .. }
            | Self::Packed { cols, .. } => *cols,
        }
    }

    /// Bytes the values occupy in memory.
    pub fn size_bytes(&self) -> usize {
        match self {
            Self::F32 { data, .. } => data.len() * 4,
            Self::Bf16 { data, .. } => data.len() * 2,
            Self::Q8 { data, .. } | Self::Ggml { data, .. } | Self::Packed { data, .. } => {
                data.len()
            }
        }
    }

    /// Row `r` widened to f32 into `buf` (len = cols).
    pub fn row_f32_into(&self, r: usize, buf: &mut [f32]) {
        match self {
            Self::F32 { cols, data, .. } => buf.copy_from_slice(&data[r * cols..(r + 1) * cols]),
            Self::Bf16 { cols, data, .. } => {
                for (o, v) in buf.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o = v.to_f32();
                }
            }
            Self::Q8 { cols, data, .. } => {
                crate::q8::dequantize_row(&data[q8_span(*cols, r, 1)], buf);
            }
            Self::Ggml { .. } => {
                let packed = self.packed().expect("a ggml matrix has packed rows");
                crate::native::decode_row(&packed, r, buf);
            }
            Self::Packed { format, .. } => {
                let packed = self.packed().expect("a block matrix has packed rows");
                format.dequantize_row(packed.row(r), buf);
            }
        }
    }

    /// Rows `start..end` as a new matrix in the same precision.
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<Self> {
        let cols = self.cols();
        if start > end || end > self.rows() {
            return Err(Error::DimMismatch {
                what: "row slice end",
                expected: self.rows(),
                got: end,
            });
        }
        Ok(match self {
            Self::F32 { data, .. } => Self::F32 {
                rows: end - start,
                cols,
                data: data[start * cols..end * cols].to_vec(),
            },
            Self::Bf16 { data, .. } => Self::Bf16 {
                rows: end - start,
                cols,
                data: data[start * cols..end * cols].to_vec(),
            },
            Self::Q8 { data, products, .. } => Self::Q8 {
                rows: end - start,
                cols,
                data: data[q8_span(cols, start, end - start)].to_vec(),
                products: *products,
            },
            Self::Ggml { ty, products, .. } => {
                let packed = self.packed().expect("a ggml matrix has packed rows");
                let rows: Vec<u8> = (start..end)
                    .flat_map(|r| packed.row_in_order(r).into_owned())
                    .collect();
                Self::ggml(*ty, end - start, cols, rows)?.with_q8_products(*products)
            }
            Self::Packed { format, data, .. } => {
                let rb = format.row_bytes(cols);
                Self::Packed {
                    format: *format,
                    rows: end - start,
                    cols,
                    data: data[start * rb..end * rb].to_vec(),
                }
            }
        })
    }

    /// The f32 values, (rows, cols).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Self::F32 { data, .. } => data.clone(),
            Self::Bf16 { data, .. } => data.iter().map(|v| v.to_f32()).collect(),
            Self::Q8 { .. } | Self::Ggml { .. } | Self::Packed { .. } => self
                .packed()
                .expect("a block matrix has packed rows")
                .dequantize(),
        }
    }

    /// The transpose, in the same precision; a block matrix's is f32,
    /// its dequantized values (blocks run along rows, so they do not transpose).
    pub fn transposed(&self) -> Self {
        fn t<T: Copy>(data: &[T], rows: usize, cols: usize) -> Vec<T> {
            (0..cols)
                .flat_map(|c| (0..rows).map(move |r| data[r * cols + c]))
                .collect()
        }
        match self {
            Self::F32 { rows, cols, data } => Self::F32 {
                rows: *cols,
                cols: *rows,
                data: t(data, *rows, *cols),
            },
            Self::Bf16 { rows, cols, data } => Self::Bf16 {
                rows: *cols,
                cols: *rows,
                data: t(data, *rows, *cols),
            },
            Self::Q8 { rows, cols, .. }
            | Self::Ggml { rows, cols, .. }
            | Self::Packed { rows, cols, .. } => Self::F32 {
                rows: *cols,
                cols: *rows,
                data: t(&self.to_f32(), *rows, *cols),
            },
        }
    }

    /// `out = x · selfᵀ` for `n` row vectors: x is (n, cols), out is (n, rows).
    /// Parallel over rows of the matrix with rayon, dispatched kernels.
    pub fn matmul(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        self.matmul_with(kernels(), x, n, out)
    }

    /// [`Matrix::matmul`] with the kernels of a given ISA (tests, benchmarks).
    pub fn matmul_with(
        &self,
        k: &DenseKernels,
        x: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let rows = self.rows();
        if x.len() != n * self.cols() {
            return Err(Error::DimMismatch {
                what: "matmul input",
                expected: n * self.cols(),
                got: x.len(),
            });
        }
        if out.len() != n * rows {
            return Err(Error::DimMismatch {
                what: "matmul output",
                expected: n * rows,
                got: out.len(),
            });
        }
        if n == 0 {
            return Ok(());
        }
        if let Self::Packed { format, .. } = self {
            // Quantized once for every row, then the expert kernels' split.
            let acts = format.quantized_acts(x, n, self.cols());
            let packed = self.packed().expect("a block matrix has packed rows");
            crate::par::matmul_par(k.quant(), &packed, &acts, out);
            return Ok(());
        }
        // q8 rows are Q8_0 rows (a ragged one's last block padded), so the
        // Q8_0 integer kernels run them on zero-padded activations.
        if let Self::Q8 {
            data,
            products: Q8Products::Int8,
            ..
        } = self
        {
            let (padded, x) = q8_0_width(x, n, self.cols());
            let g = k.ggml();
            return crate::ggml::dot::matmul_with(
                g,
                GgmlType::Q8_0,
                rows,
                padded,
                data,
                &x,
                n,
                out,
            );
        }
        // ggml types with an integer kernel: llama.cpp's arithmetic
        // (activations quantized once, `crate::ggml::dot`).
        if let Self::Ggml {
            ty,
            data,
            layout,
            products: Q8Products::Int8,
            ..
        } = self
            && crate::ggml::dot::has_kernel(*ty)
            && let Some(g) = GgmlKernels::for_isa_chosen(k.isa())
        {
            return crate::ggml::dot::matmul_laid(
                g,
                *ty,
                *layout,
                rows,
                self.cols(),
                data,
                x,
                n,
                out,
            );
        }
        if n == 1 {
            let per = crate::par::decode_rows_per_task(rows, ROWS_PER_TASK, 1);
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(c, o)| k.rows(self, c * per, x, 1, o));
            return Ok(());
        }
        crate::par::rows_by_task(
            out,
            n,
            rows,
            PREFILL_ROWS_PER_TASK,
            || (),
            |(), r0, o| k.rows(self, r0, x, n, o),
        );
        Ok(())
    }

    /// Like [`Matrix::matmul`] but allocates the output.
    pub fn matmul_alloc(&self, x: &[f32], n: usize) -> Result<Vec<f32>> {
        let mut out = vec![0f32; n * self.rows()];
        self.matmul(x, n, &mut out)?;
        Ok(out)
    }
}

fn check_len(rows: usize, cols: usize, len: usize) -> Result<()> {
    let expected = rows.saturating_mul(cols);
    if len != expected {
        return Err(Error::ShapeMismatch {
            shape: vec![rows, cols],
            len,
            expected,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(w: &[f32], rows: usize, cols: usize, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0f64; n * rows];
        for t in 0..n {
            for r in 0..rows {
                out[t * rows + r] = (0..cols)
                    .map(|c| f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]))
                    .sum();
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    fn values(len: usize, off: f32) -> Vec<f32> {
        (0..len)
            .map(|i| 0.1 + 2.0 * (i as f32 + off).cos())
            .collect()
    }

    #[test]
    fn matmul_matches_f64_reference_for_ragged_shapes() {
        for (rows, cols, n) in [
            (1, 1, 1),
            (17, 33, 1),
            (40, 7, 3),
            (5, 130, 9),
            (64, 64, 2),
            (101, 40, 5),
        ] {
            let w = values(rows * cols, 0.5);
            let x = values(n * cols, 1.5);
            let want = naive(&w, rows, cols, &x, n);
            let m = Matrix::f32(rows, cols, w.clone()).unwrap();
            let got = m.matmul_alloc(&x, n).unwrap();
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            let wb_f32: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
            let got_bf16 = Matrix::bf16(rows, cols, wb)
                .unwrap()
                .matmul_alloc(&x, n)
                .unwrap();
            let want_bf16 = naive(&wb_f32, rows, cols, &x, n);
            for i in 0..want.len() {
                let tol = 1e-5 * cols as f32;
                assert!((got[i] - want[i]).abs() <= tol, "{rows}x{cols} n={n} [{i}]");
                assert!(
                    (got_bf16[i] - want_bf16[i]).abs() <= tol,
                    "bf16 {rows}x{cols} n={n} [{i}]"
                );
            }
        }
    }

    #[test]
    fn exact_q8_products_equal_the_dequantized_matrix_products_bit_for_bit() {
        for (rows, cols, n) in [
            (1, 32, 1),
            (17, 40, 1),
            (9, 96, 3),
            (5, 130, 9),
            (33, 1100, 2),
        ] {
            let w = values(rows * cols, 0.5);
            let x = values(n * cols, 1.5);
            let mut q = crate::quantize(Format::Q8, rows, cols, &w).unwrap().bytes;
            // Padding codes past a ragged row's end must not count.
            if cols % 32 != 0 {
                let rb = Format::Q8.row_bytes(cols);
                for r in 0..rows {
                    q[(r + 1) * rb - 1] = 100;
                }
            }
            let m = Matrix::q8(rows, cols, q)
                .unwrap()
                .with_q8_products(Q8Products::Exact);
            let f = Matrix::f32(rows, cols, m.to_f32()).unwrap();
            for isa in Isa::ALL {
                let Some(k) = DenseKernels::for_isa(isa) else {
                    continue;
                };
                let (mut got, mut want) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                m.matmul_with(k, &x, n, &mut got).unwrap();
                f.matmul_with(k, &x, n, &mut want).unwrap();
                assert_eq!(got, want, "{} {rows}x{cols} n={n}", isa.name());
            }
        }
    }

    #[test]
    fn shape_errors_are_reported() {
        assert!(Matrix::f32(2, 3, vec![0.0; 5]).is_err());
        let m = Matrix::f32(2, 3, vec![0.0; 6]).unwrap();
        assert!(m.matmul_alloc(&[0.0; 4], 1).is_err());
    }
}
