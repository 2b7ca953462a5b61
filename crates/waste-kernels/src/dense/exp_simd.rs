//! [`super::exp`]'s `exp` on 8 and 16 lanes: the same operations in the
//! same order (no FMA), so every lane has [`exp_ref`](super::exp::exp_ref)'s
//! bits; out-of-range and NaN lanes are blended in as the reference
//! returns them.

use std::arch::x86_64::*;

use super::exp::{C1, C2, HI, LO, LOG2E, P, ROUND};

/// Declares `$exp` (one vector) and the slice kernels built on it for one
/// vector width; `$v`/`$i` the float and integer vector types, `$p` the
/// intrinsic prefix's functions passed in by name.
macro_rules! exp_isa {
    (
        $features:literal, $lanes:literal, $v:ty,
        exp = $exp:ident, exp_sub = $exp_sub:ident, silu_mul = $silu_mul:ident,
        set1 = $set1:ident, add = $add:ident, sub = $sub:ident, mul = $mul:ident,
        div = $div:ident, load = $load:ident, store = $store:ident,
        cvt = $cvt:ident, srai = $srai:ident, subi = $subi:ident, addi = $addi:ident,
        slli = $slli:ident, seti = $seti:ident, cast = $cast:ident,
        select = |$x:ident, $y:ident| $select:expr,
    ) => {
        /// `e^x` on every lane, as `exp_ref`.
        #[inline]
        #[target_feature(enable = $features)]
        fn $exp($x: $v) -> $v {
            let n = $sub($add($mul($x, $set1(LOG2E)), $set1(ROUND)), $set1(ROUND));
            let r = $sub($sub($x, $mul(n, $set1(C1))), $mul(n, $set1(C2)));
            let z = $mul(r, r);
            let mut y = $set1(P[0]);
            for c in &P[1..] {
                y = $add($mul(y, r), $set1(*c));
            }
            let p = $add($add($mul(y, z), r), $set1(1.0));
            let n = $cvt(n);
            let h = $srai::<1>(n);
            let bias = $seti(127);
            let s1 = $cast($slli::<23>($addi(h, bias)));
            let s2 = $cast($slli::<23>($addi($subi(n, h), bias)));
            let $y = $mul($mul(p, s1), s2);
            $select
        }

        /// `x[i] = e^(x[i] - m)`, as `exp_sub_ref`.
        ///
        /// # Safety
        /// The features named above must be available.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $exp_sub(x: &mut [f32], m: f32) {
            let mv = $set1(m);
            let mut chunks = x.chunks_exact_mut($lanes);
            for c in &mut chunks {
                // SAFETY: the chunk holds a vector's lanes.
                unsafe { $store(c.as_mut_ptr(), $exp($sub($load(c.as_ptr()), mv))) };
            }
            for v in chunks.into_remainder() {
                *v = super::exp::exp_ref(*v - m);
            }
        }

        /// `g[i] = g[i] / (1 + e^-g[i]) · u[i]`, as `silu_mul_ref`.
        ///
        /// # Safety
        /// The features named above must be available.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $silu_mul(g: &mut [f32], u: &[f32]) {
            assert_eq!(g.len(), u.len(), "gate and up of unequal lengths");
            let (zero, one) = ($set1(0.0), $set1(1.0));
            let mut gc = g.chunks_exact_mut($lanes);
            let mut uc = u.chunks_exact($lanes);
            for (g, u) in (&mut gc).zip(&mut uc) {
                // SAFETY: both chunks hold a vector's lanes.
                unsafe {
                    let gv = $load(g.as_ptr());
                    let e = $exp($sub(zero, gv));
                    let s = $div(gv, $add(one, e));
                    $store(g.as_mut_ptr(), $mul(s, $load(u.as_ptr())));
                }
            }
            for (g, u) in gc.into_remainder().iter_mut().zip(uc.remainder()) {
                *g = super::exp::silu(*g) * u;
            }
        }
    };
}

exp_isa! {
    "avx2,fma,f16c", 8, __m256,
    exp = exp8, exp_sub = exp_sub_avx2, silu_mul = silu_mul_avx2,
    set1 = _mm256_set1_ps, add = _mm256_add_ps, sub = _mm256_sub_ps, mul = _mm256_mul_ps,
    div = _mm256_div_ps, load = _mm256_loadu_ps, store = _mm256_storeu_ps,
    cvt = _mm256_cvtps_epi32, srai = _mm256_srai_epi32, subi = _mm256_sub_epi32,
    addi = _mm256_add_epi32, slli = _mm256_slli_epi32, seti = _mm256_set1_epi32,
    cast = _mm256_castsi256_ps,
    select = |x, y| {
        let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(HI)));
        let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LO)));
        _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    },
}

exp_isa! {
    "avx512f,avx2,fma", 16, __m512,
    exp = exp16, exp_sub = exp_sub_avx512, silu_mul = silu_mul_avx512,
    set1 = _mm512_set1_ps, add = _mm512_add_ps, sub = _mm512_sub_ps, mul = _mm512_mul_ps,
    div = _mm512_div_ps, load = _mm512_loadu_ps, store = _mm512_storeu_ps,
    cvt = _mm512_cvtps_epi32, srai = _mm512_srai_epi32, subi = _mm512_sub_epi32,
    addi = _mm512_add_epi32, slli = _mm512_slli_epi32, seti = _mm512_set1_epi32,
    cast = _mm512_castsi512_ps,
    select = |x, y| {
        let y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(HI)), y, _mm512_set1_ps(f32::INFINITY));
        let y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(LO)), y, _mm512_setzero_ps());
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), y, x)
    },
}
