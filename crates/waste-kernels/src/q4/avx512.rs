//! AVX-512 `q4` dot product: with VNNI, one block per vector, the nibbles
//! looked up as grid + 128 (unsigned, for `vpdpbusd`; the shared kernel is
//! `quant/avx512.rs`). Without VNNI the AVX2 kernel is as fast: AVX-512 at
//! 256 bits adds nothing to its sign trick.

use std::arch::x86_64::*;

use super::avx2::Q4;
use crate::quant::act::QuantizedActs;
use crate::quant::avx512::{Avx512Block, log_scales8, vec_dot};

impl Avx512Block for Q4 {
    const PAIRED: bool = false;
    const VNNI_OFFSET: i32 = 128;
    /// grid + 128 in both lanes.
    type Consts = __m256i;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn consts(grid: &[i8; 16]) -> __m256i {
        // SAFETY: `grid` is 16 readable bytes.
        let g = unsafe { _mm_loadu_si128(grid.as_ptr().cast()) };
        _mm256_broadcastsi128_si256(_mm_xor_si128(g, _mm_set1_epi8(i8::MIN)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_u8(blk: *const u8, lut: &__m256i) -> __m256i {
        // SAFETY: the caller guarantees 17 readable bytes at `blk`.
        let q = unsafe { _mm_loadu_si128(blk.add(1).cast()) };
        let m = _mm_set1_epi8(15);
        let c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
        _mm256_shuffle_epi8(*lut, c)
    }

    const TWO_512: bool = true;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_two(x: __m512i, lut: &__m256i) -> __m512i {
        // Byte o of the result: half h = o / 32 (low nibbles, then high),
        // run o % 32 / 4 of four codes alternating between the blocks, code
        // 4 · (run / 2) + o % 4 of that half: the code byte at 17 · block
        // + 1 + that.
        const PICK: [u8; 64] = {
            let mut t = [0u8; 64];
            let mut o = 0;
            while o < 64 {
                let run = o % 32 / 4;
                t[o] = (17 * (run % 2) + 1 + 4 * (run / 2) + o % 4) as u8;
                o += 1;
            }
            t
        };
        // SAFETY: a 64-byte load of `PICK`.
        unsafe {
            let bytes = _mm512_permutexvar_epi8(_mm512_loadu_si512(PICK.as_ptr().cast()), x);
            // the high halves' codes are the high nibbles
            let shift = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(4));
            let codes = _mm512_and_si512(_mm512_srlv_epi16(bytes, shift), _mm512_set1_epi8(15));
            _mm512_shuffle_epi8(_mm512_broadcast_i64x4(*lut), codes)
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn two_scales8(x: &[__m512i; 4], _lut: &__m256i) -> __m256 {
        // byte 0 of dword d: the scale byte 17 · (d % 2) of pair d / 2 % 2
        // of the two windows
        const AT: [u8; 64] = {
            let mut t = [0u8; 64];
            let mut d = 0;
            while d < 16 {
                t[4 * d] = (64 * (d / 2 % 2) + 17 * (d % 2)) as u8;
                d += 1;
            }
            t
        };
        const MANT: [i32; 8] = crate::quant::scale::mantissa_bits(super::SCALE_TOP_EXP - 5);
        // SAFETY: 64- and 32-byte loads of the tables above.
        unsafe {
            let at = _mm512_loadu_si512(AT.as_ptr().cast());
            let lo = _mm512_maskz_permutex2var_epi8(0x1111, x[0], at, x[1]);
            let hi = _mm512_maskz_permutex2var_epi8(0x1111_0000, x[2], at, x[3]);
            let s = _mm512_castsi512_si256(_mm512_or_si512(lo, hi));
            log_scales8(s, _mm256_loadu_si256(MANT.as_ptr().cast()))
        }
    }

    unsafe fn pair_scales8(_x: &[__m256i; 4], _c: &Self::Consts) -> __m256 {
        unreachable!("not paired")
    }

    unsafe fn decode_pair(_x: __m256i, _lut: &__m256i) -> [__m256i; 2] {
        unreachable!("q4 blocks are not paired")
    }
}

/// AVX-512 (VNNI, VBMI) version of [`super::reference::vec_dot_q4_q8_ref`], over
/// `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, AVX2, FMA and F16C must be available
/// (the VNNI table's contract; these kernels use VNNI only).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q4, false>(rows, row_bytes, grid, acts, out) }
}

/// [`vec_dot_q4_q8`] two blocks to a 512-bit vector
/// (`quant::avx512::stream_twos`), for CPUs with full-width 512-bit units.
///
/// # Safety
/// As [`vec_dot_q4_q8`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_q8_512(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q4, true>(rows, row_bytes, grid, acts, out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::q4::{BLOCK_BYTES, GRID_Q4, SCALES};

    #[test]
    fn two_scales_are_the_table_for_every_byte() {
        if !crate::quant::avx512::vbmi_available() {
            println!("SKIPPED: AVX-512 VBMI (this CPU lacks it)");
            return;
        }
        for first in (0..256).step_by(8) {
            // 8 blocks whose scale bytes are first..first + 8
            let mut row = [0u8; 8 * BLOCK_BYTES + 64];
            for i in 0..8 {
                row[i * BLOCK_BYTES] = (first + i) as u8;
            }
            // SAFETY: AVX-512 F/BW/VL/VBMI checked above; each window is 64
            // readable bytes of `row`.
            let got: [f32; 8] = unsafe {
                let c = <Q4 as Avx512Block>::consts(&GRID_Q4);
                let x = std::array::from_fn(|u| {
                    _mm512_loadu_si512(row.as_ptr().add(u * 2 * BLOCK_BYTES).cast())
                });
                std::mem::transmute(<Q4 as Avx512Block>::two_scales8(&x, &c))
            };
            for (i, g) in got.iter().enumerate() {
                assert_eq!(
                    g.to_bits(),
                    SCALES[first + i].to_bits(),
                    "byte {}",
                    first + i
                );
            }
        }
    }
}
