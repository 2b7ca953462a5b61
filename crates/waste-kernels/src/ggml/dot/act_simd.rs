//! Activation quantizers in AVX2 and AVX-512. Q8_K's compute what
//! [`quantize_row_q8_k_ref`](super::super::act::quantize_row_q8_k_ref)
//! computes, bit for bit: the same largest magnitude (NaNs ignored, as
//! `f32::max` ignores them: `max_ps` returns its second operand when either
//! is NaN, and the running maximum is that operand), the first value that
//! has it, the same `-127 / max` scale and ggml's `nearest_int` trick on
//! the same products. Codes are cut to their low byte as the scalar `as
//! i8` cuts them (a block of subnormals scales to infinities, whose codes
//! are out of range) before they are summed or packed.

use std::arch::x86_64::*;

use super::super::act::{BlockQ8K, quantize_row_q8_0_ref};
use super::super::kquants::QK_K;
use super::super::legacy::BlockQ8_0;

/// ggml's `nearest_int` on 16 lanes: add 1.5·2²³, read the mantissa.
#[inline]
#[target_feature(enable = "avx512f")]
fn nearest_int_16(v: __m512) -> __m512i {
    let i = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12_582_912.0)));
    _mm512_sub_epi32(
        _mm512_and_si512(i, _mm512_set1_epi32(0x007f_ffff)),
        _mm512_set1_epi32(0x0040_0000),
    )
}

/// As `quantize_row_q8_k_ref`.
///
/// # Safety
/// AVX-512F and AVX-512BW must be available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub(super) unsafe fn quantize_row_q8k_avx512(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(x.len(), y.len() * QK_K, "Q8_K row length");
    let sign = _mm512_set1_epi32(0x7fff_ffff);
    for (x, y) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut v = [_mm512_setzero_ps(); QK_K / 16];
        let mut m = _mm512_setzero_ps();
        for (i, v) in v.iter_mut().enumerate() {
            // SAFETY: the chunk holds QK_K values, 16 from 16·i.
            *v = unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * i)) };
            let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(*v), sign));
            m = _mm512_max_ps(a, m);
        }
        let amax = _mm512_reduce_max_ps(m);
        if amax == 0.0 {
            *y = BlockQ8K::default();
            continue;
        }
        let wanted = _mm512_set1_ps(amax);
        let mut first = QK_K;
        for (i, v) in v.iter().enumerate() {
            let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(*v), sign));
            let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, wanted);
            if hit != 0 {
                first = 16 * i + hit.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127.0 / x[first];
        let s = _mm512_set1_ps(iscale);
        for (i, v) in v.iter().enumerate() {
            let q = _mm512_min_epi32(nearest_int_16(_mm512_mul_ps(s, *v)), _mm512_set1_epi32(127));
            let q = _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(q));
            y.bsums[i] = _mm512_reduce_add_epi32(q) as i16;
            // SAFETY: qs holds QK_K codes, 16 from 16·i.
            unsafe {
                _mm_storeu_si128(
                    y.qs.as_mut_ptr().add(16 * i).cast(),
                    _mm512_cvtepi32_epi8(q),
                );
            }
        }
        y.d = 1.0 / iscale;
    }
}

/// ggml's `nearest_int` on 8 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn nearest_int_8(v: __m256) -> __m256i {
    let i = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12_582_912.0)));
    _mm256_sub_epi32(
        _mm256_and_si256(i, _mm256_set1_epi32(0x007f_ffff)),
        _mm256_set1_epi32(0x0040_0000),
    )
}

/// Each lane's low byte, sign-extended: the scalar `as i8`.
#[inline]
#[target_feature(enable = "avx2")]
fn low_byte(q: __m256i) -> __m256i {
    _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(q))
}

/// |v| on 8 lanes (a function, not a closure, so that it inlines with the
/// caller's target features).
#[inline]
#[target_feature(enable = "avx2")]
fn abs(v: __m256) -> __m256 {
    _mm256_castsi256_ps(_mm256_and_si256(
        _mm256_castps_si256(v),
        _mm256_set1_epi32(0x7fff_ffff),
    ))
}

/// As `quantize_row_q8_k_ref`.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_row_q8k_avx2(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(x.len(), y.len() * QK_K, "Q8_K row length");
    for (x, y) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut m = _mm256_setzero_ps();
        for i in 0..QK_K / 8 {
            // SAFETY: the chunk holds QK_K values, 8 from 8·i.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            m = _mm256_max_ps(abs(v), m);
        }
        let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        let amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        if amax == 0.0 {
            *y = BlockQ8K::default();
            continue;
        }
        let wanted = _mm256_set1_ps(amax);
        let mut first = QK_K;
        for i in 0..QK_K / 8 {
            // SAFETY: as above.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs(v), wanted));
            if hit != 0 {
                first = 8 * i + hit.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127.0 / x[first];
        let s = _mm256_set1_ps(iscale);
        let top = _mm256_set1_epi32(127);
        for i in 0..QK_K / 16 {
            // SAFETY: as above, 16 values from 16·i.
            let (a, b) = unsafe {
                (
                    _mm256_loadu_ps(x.as_ptr().add(16 * i)),
                    _mm256_loadu_ps(x.as_ptr().add(16 * i + 8)),
                )
            };
            let qa = low_byte(_mm256_min_epi32(nearest_int_8(_mm256_mul_ps(s, a)), top));
            let qb = low_byte(_mm256_min_epi32(nearest_int_8(_mm256_mul_ps(s, b)), top));
            let sum = _mm256_add_epi32(qa, qb);
            let sum = _mm_add_epi32(
                _mm256_castsi256_si128(sum),
                _mm256_extracti128_si256::<1>(sum),
            );
            let sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
            let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01>(sum));
            y.bsums[i] = _mm_cvtsi128_si32(sum) as i16;
            // i16 lanes [a0-3, b0-3 | a4-7, b4-7], 64-bit units reordered to
            // [a0-7 | b0-7], then bytes: each half's first 8 are its codes.
            let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(qa, qb));
            let bytes = _mm256_permute4x64_epi64::<0b10_00>(_mm256_packs_epi16(w, w));
            // SAFETY: qs holds QK_K codes, 16 from 16·i.
            unsafe {
                _mm_storeu_si128(
                    y.qs.as_mut_ptr().add(16 * i).cast(),
                    _mm256_castsi256_si128(bytes),
                );
            }
        }
        y.d = 1.0 / iscale;
    }
}

/// [`quantize_row_q8_0_ref`] compiled for AVX2 + F16C: its scalar
/// operations (written to vectorize), which the compiler turns into
/// vectors without reordering or fusing a float operation, so the blocks
/// are the reference's bit for bit.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row_q8_0_avx2(x: &[f32], y: &mut [BlockQ8_0]) {
    quantize_row_q8_0_ref(x, y);
}
