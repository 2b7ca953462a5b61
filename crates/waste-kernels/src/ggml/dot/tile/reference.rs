//! The scalar batched micro-kernel: the specification `avx2.rs` and
//! `avx512.rs` meet. Per (row, token) it forms each sub-block's integer
//! sum `Σ q·a` exactly, as the SIMD kernels do through `a + 128` and
//! [`Unpacked::init`], then scales and adds in f32 in sub-block order.

use super::{ActTile, ROWS, TOKENS, Unpacked};

/// [`super::GemmTile`] in scalar code.
///
/// # Safety
/// None beyond the type's contract (safe code; `unsafe` to fit the table).
pub unsafe fn gemm_tile_ref(
    w: &[Unpacked],
    acts: &[ActTile],
    _tokens: usize,
    out: &mut [f32; ROWS * TOKENS],
) {
    let nsb = acts.len();
    assert_eq!(w.len(), ROWS * nsb, "ROWS rows of nsb super-blocks");
    for r in 0..ROWS {
        for t in 0..TOKENS {
            let mut acc = 0f32;
            for (u, a) in w[r * nsb..(r + 1) * nsb].iter().zip(acts) {
                let mut inner = 0f32;
                for j in 0..16 {
                    let mut dot = u.init[j];
                    for k in 16 * j..16 * j + 16 {
                        let code = a.a[64 * (k / 4) + 4 * t + k % 4];
                        dot += i32::from(u.q[k]) * i32::from(code);
                    }
                    inner += u.sc[j] * dot as f32;
                    inner -= u.m[j] * a.bsum[TOKENS * j + t];
                }
                acc += inner * a.d[t];
            }
            out[r * TOKENS + t] = acc;
        }
    }
}
