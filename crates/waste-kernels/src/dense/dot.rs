//! The scalar `_ref` dense kernels: the specification the SIMD versions in
//! `avx2.rs` and `avx512.rs` are tested against. Portable, no target features;
//! the row loops and the rayon split live in `dense/mod.rs`.

use half::{bf16, f16};

/// Lanes summed independently, so the compiler vectorises the loop without
/// reassociating floats on its own.
const LANES: usize = 16;

/// `Σ a[i]·b[i]` in f32 with [`LANES`] partial sums, combined pairwise.
pub fn dot_f32_ref(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (xa, xb) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += xa[l] * xb[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0] + tail
}

/// Four [`dot_f32_ref`]s of `a`.
pub fn dot4_f32_ref(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    b.map(|b| dot_f32_ref(a, b))
}

/// Sixteen [`dot_f32_ref`]s: `out[r][c] = a[r] · b[c]`.
pub fn dot4x4_f32_ref(a: [&[f32]; 4], b: [&[f32]; 4]) -> [[f32; 4]; 4] {
    a.map(|a| dot4_f32_ref(a, b))
}

/// `o[i] += p[j] · v[j·stride + i]`, j in order: a product, then a sum.
pub fn axpy_rows_f32_ref(p: &[f32], v: &[f32], stride: usize, o: &mut [f32]) {
    for (j, &pj) in p.iter().enumerate() {
        for (o, v) in o.iter_mut().zip(&v[j * stride..]) {
            *o += pj * v;
        }
    }
}

/// Four [`axpy_rows_f32_ref`]s over the same value rows.
pub fn axpy_rows4_f32_ref(p: [&[f32]; 4], v: &[f32], stride: usize, o: [&mut [f32]; 4]) {
    for (p, o) in p.into_iter().zip(o) {
        axpy_rows_f32_ref(p, v, stride, o);
    }
}

/// [`dot_f32_ref`] against `b` widened (exactly) to f32.
pub fn dot_f16_ref(a: &[f32], b: &[f16]) -> f32 {
    let b: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
    dot_f32_ref(a, &b)
}

/// Four [`dot_f16_ref`]s of `a`.
pub fn dot4_f16_ref(a: &[f32], b: [&[f16]; 4]) -> [f32; 4] {
    b.map(|b| dot_f16_ref(a, b))
}

/// Sixteen [`dot_f16_ref`]s: `out[r][c] = a[r] · b[c]`.
pub fn dot4x4_f16_ref(a: [&[f32]; 4], b: [&[f16]; 4]) -> [[f32; 4]; 4] {
    a.map(|a| dot4_f16_ref(a, b))
}

/// [`axpy_rows_f32_ref`] over f16 value rows, each value widened exactly.
pub fn axpy_rows_f16_ref(p: &[f32], v: &[f16], stride: usize, o: &mut [f32]) {
    for (j, &pj) in p.iter().enumerate() {
        for (o, v) in o.iter_mut().zip(&v[j * stride..]) {
            *o += pj * v.to_f32();
        }
    }
}

/// Four [`axpy_rows_f16_ref`]s over the same value rows.
pub fn axpy_rows4_f16_ref(p: [&[f32]; 4], v: &[f16], stride: usize, o: [&mut [f32]; 4]) {
    for (p, o) in p.into_iter().zip(o) {
        axpy_rows_f16_ref(p, v, stride, o);
    }
}

/// `out[i·n + t] = w_i · x_t` for the `out.len() / n` rows at the start of the
/// row-major `w` (`cols` wide) and the `n` rows of `x` (n, cols).
pub fn rows_f32_ref(w: &[f32], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
    for (row, o) in w.chunks_exact(cols.max(1)).zip(out.chunks_mut(n.max(1))) {
        for (t, v) in o.iter_mut().enumerate() {
            *v = dot_f32_ref(row, &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// [`rows_f32_ref`] for bf16 rows: each row widened exactly to f32 first, so
/// a bf16 matrix computes what its f32 copy would.
pub fn rows_bf16_ref(w: &[bf16], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
    let mut buf = vec![0f32; cols];
    for (row, o) in w.chunks_exact(cols.max(1)).zip(out.chunks_mut(n.max(1))) {
        for (b, v) in buf.iter_mut().zip(row) {
            *b = v.to_f32();
        }
        for (t, v) in o.iter_mut().enumerate() {
            *v = dot_f32_ref(&buf, &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// [`rows_f32_ref`] for f16 rows: each row widened exactly to f32 first.
pub fn rows_f16_ref(w: &[f16], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
    let mut buf = vec![0f32; cols];
    for (row, o) in w.chunks_exact(cols.max(1)).zip(out.chunks_mut(n.max(1))) {
        for (b, v) in buf.iter_mut().zip(row) {
            *b = v.to_f32();
        }
        for (t, v) in o.iter_mut().enumerate() {
            *v = dot_f32_ref(&buf, &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// [`rows_f32_ref`] for [`crate::Format::Q8`] rows (`w` their packed bytes,
/// `cols` values wide): each row dequantized exactly (`d · q` in f32)
/// first, so a q8 matrix computes what its dequantized f32 copy would.
pub fn rows_q8_ref(w: &[u8], cols: usize, x: &[f32], n: usize, out: &mut [f32]) {
    let row_bytes = crate::Format::Q8.row_bytes(cols);
    let mut buf = vec![0f32; cols];
    for (row, o) in w
        .chunks_exact(row_bytes.max(1))
        .zip(out.chunks_mut(n.max(1)))
    {
        crate::q8::dequantize_row(row, &mut buf);
        for (t, v) in o.iter_mut().enumerate() {
            *v = dot_f32_ref(&buf, &x[t * cols..(t + 1) * cols]);
        }
    }
}
