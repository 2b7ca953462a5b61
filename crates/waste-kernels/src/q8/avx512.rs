//! AVX-512 `q8` dot products. Where 512-bit operations are split (Zen 4)
//! `q8` streams 34 bytes per 32 weights and is bound by memory: the AVX2
//! kernel (a VNNI version with codes + 128 for `vpdpbusd`, the offset
//! cancelled in i32, scales copied ahead like `q4`'s, measured 0.6-1.0x
//! it). On full-width units it is not: [`vec_dot_q8_q8_vnni`].

use std::arch::x86_64::*;

use super::BLOCK_BYTES;
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::check;

/// AVX-512 version of [`super::reference::vec_dot_q8_q8_ref`]: the AVX2
/// kernel ([`super::avx2::vec_dot_q8_q8`]).
///
/// # Safety
/// AVX2, FMA and F16C must be available (implied by the AVX-512 tables).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { super::avx2::vec_dot_q8_q8(rows, row_bytes, grid, acts, out) }
}

/// VNNI version of [`super::reference::vec_dot_q8_q8_ref`], for CPUs with
/// full-width 512-bit units (Zen 5), where `q8` is not bound by memory (the
/// AVX2 chunk stream there: 0.66-0.73 x one core's read): each block's
/// codes as magnitudes against the activations signed by them (`vpabsb`,
/// `vpsignb`; codes are within ±127), one `vpdpbusd`, the block's f16 scale
/// read with it and times the activation block's in one FMA; even and odd
/// blocks on two chains. Row by row, every activation row in turn.
///
/// # Safety
/// AVX-512 F/BW/VL + VNNI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_q8_vnni(
    rows: &[u8],
    row_bytes: usize,
    _grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    let nrows = check(rows, row_bytes, BLOCK_BYTES, acts, out);
    let (nb, n) = (acts.blocks, acts.n);
    // SAFETY: `check` checked that the rows hold `nb` blocks each and the
    // activations `n` rows of `nb` blocks; the loads stay inside them.
    unsafe {
        let block = |w: *const u8, a: *const i8, da: f32, acc: __m256| {
            let c = _mm256_loadu_si256(w.add(2).cast());
            let x = _mm256_loadu_si256(a.cast());
            let p = _mm256_dpbusd_epi32(
                _mm256_setzero_si256(),
                _mm256_abs_epi8(c),
                _mm256_sign_epi8(x, c),
            );
            // the block's first 16 bytes (the scale in lane 0): a narrower load
            // became an insert into the other chain's accumulator, which
            // serialized the two chains
            let dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_loadu_si128(w.cast())));
            _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(p), acc)
        };
        for r in 0..nrows {
            let row = rows.as_ptr().add(r * row_bytes);
            for t in 0..n {
                let a = acts.qs.as_ptr().add(t * nb * 32);
                let d = &acts.d[t * nb..][..nb];
                let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut b = 0;
                while b + 2 <= nb {
                    even = block(row.add(b * BLOCK_BYTES), a.add(b * 32), d[b], even);
                    odd = block(
                        row.add((b + 1) * BLOCK_BYTES),
                        a.add((b + 1) * 32),
                        d[b + 1],
                        odd,
                    );
                    b += 2;
                }
                if b < nb {
                    even = block(row.add(b * BLOCK_BYTES), a.add(b * 32), d[b], even);
                }
                let v = _mm256_add_ps(even, odd);
                let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
                out[r * n + t] = _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
            }
        }
    }
}
