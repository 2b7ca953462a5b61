//! AVX-512 VNNI dot products of ggml weight rows: the AVX2 bodies of
//! `avx2.rs` with `vpdpbusd` (AVX512-VNNI + VL, on 256-bit vectors) as the
//! multiply-accumulate: one instruction per 32 weights instead of
//! `vpmaddubsw` + `vpmaddwd`, the same i32 lanes. Sub-block scales multiply
//! the i32 lanes (`vpmulld`) instead of riding in `vpmaddwd`.
//!
//! Q2_K, Q3_K and Q6_K (16-weight sub-blocks, their scales riding in
//! `vpmaddwd` after byte shuffles) take the AVX2 kernels in this table too:
//! `vpdpbusd` would need a `vpmulld` per 32 weights for the scales.
//! Without VNNI, the AVX-512 table takes the AVX2 kernels (as `quant`'s
//! does: F/BW/VL alone add nothing to these at 256 bits).

use std::arch::x86_64::*;

use super::super::act::BlockQ8K;
use super::super::iquants::BlockIq4Xs;
use super::super::kquants::{BlockQ4K, BlockQ5K};
use super::super::legacy::{BlockIq4Nl, BlockQ4_0, BlockQ8_0};
use super::avx2::{Mac, wrappers};

/// `vpdpbusd`.
#[derive(Debug)]
pub(crate) struct VnniMac;

impl Mac for VnniMac {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: callers run inlined into an AVX512-VNNI + VL function.
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        // SAFETY: callers run inlined into an AVX512-VNNI + VL function.
        unsafe {
            let sc = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
            _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), sc)
        }
    }
}

wrappers! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", VnniMac;
    q4_k_q8k = q4_k(BlockQ4K, BlockQ8K);
    q5_k_q8k = q5_k(BlockQ5K, BlockQ8K);
    iq4_xs_q8k = iq4_xs(BlockIq4Xs, BlockQ8K);
    q8_0_q8_0 = q8_0(BlockQ8_0, BlockQ8_0);
    q4_0_q8_0 = q4_0(BlockQ4_0, BlockQ8_0);
    iq4_nl_q8_0 = iq4_nl(BlockIq4Nl, BlockQ8_0);
}
