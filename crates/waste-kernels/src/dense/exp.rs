//! `exp` for softmax and SiLU, written once as plain f32 arithmetic so that
//! the scalar reference and the AVX2 and AVX-512 versions ([`super::exp_simd`])
//! give the same bits: Cody–Waite reduction `x = n·ln 2 + r` with ln 2 split
//! so that `n·C1` is exact, Cephes' degree-7 polynomial for `e^r` on
//! |r| ≤ ln 2 / 2 (within 1 ulp of the true value, 0.66 at worst; the test measures it
//! against f64), and `2^n` applied as two exact power-of-two scalings so
//! that results down to the subnormals round once. No FMA anywhere: the
//! reference runs on any x86-64 and every ISA computes the same roundings.
//! A libm call per value, what the loops paid before, does not vectorize.

pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts: `C1` has 9 significant bits, so `n·C1` is exact for
/// every |n| ≤ 150 this reaches.
pub(crate) const C1: f32 = 0.693_359_4; // 0.693359375 exactly
pub(crate) const C2: f32 = -2.121_944_4e-4;
/// Cephes `expf`'s coefficients, highest degree first, as f32 rounds them.
pub(crate) const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// Above this, `e^x` overflows f32.
pub(crate) const HI: f32 = 88.722_83;
/// Below this, `e^x` rounds to 0 (half the smallest subnormal).
pub(crate) const LO: f32 = -103.972_08;
/// 1.5 · 2²³: adding and subtracting it rounds to an integer, ties to even.
pub(crate) const ROUND: f32 = 12_582_912.0;

/// `e^x`, NaN for NaN.
#[inline]
pub fn exp_ref(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > HI {
        return f32::INFINITY;
    }
    if x < LO {
        return 0.0;
    }
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * C1) - n * C2;
    let z = r * r;
    let mut y = P[0];
    for c in &P[1..] {
        y = y * r + c;
    }
    let p = (y * z + r) + 1.0;
    // 2^n as 2^h · 2^(n - h), each factor a normal number for n in
    // -150..=128, each product by a power of two exact until the last.
    let n = n as i32;
    let h = n >> 1;
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    p * pow2(h) * pow2(n - h)
}

/// `x[i] = e^(x[i] - m)`: softmax's numerators.
pub fn exp_sub_ref(x: &mut [f32], m: f32) {
    for v in x {
        *v = exp_ref(*v - m);
    }
}

/// `g[i] = silu(g[i]) · u[i]`, silu as torch computes it, `g / (1 + e^-g)`.
pub fn silu_mul_ref(g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "gate and up of unequal lengths");
    for (g, u) in g.iter_mut().zip(u) {
        *g = silu(*g) * u;
    }
}

/// `g / (1 + e^-g)`.
#[inline]
pub fn silu(g: f32) -> f32 {
    g / (1.0 + exp_ref(-g))
}
