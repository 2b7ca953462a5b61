//! AVX-512 `q3` decode (the shared kernel is `quant/avx512.rs`): two blocks
//! per step, in the activations' `qs_pair` order, where i32 lane `d` of a
//! dot product holds 4 weights of block `b + d % 2`.
//!
//! Per pair, from the 32 bytes starting 3 before block `b` (block `b` at
//! bytes 3..16, `b + 1` at 16..29): one permute gathers the low-bit bytes
//! each lane's weights need, one the high-bit bytes; then for each half
//! (weights 0..16, 16..32 of both blocks) a qword shift places the low bits
//! on bits 0..2 of each byte, a dword shift or rotate the high bit on bit
//! 2, one `vpternlogd` merges them, and one table lookup gives grid + 64.
//! The permutes are `vpermb`, the lookup a 32-entry `vpermb`. The scale
//! bytes of 4 pairs come from their 4 windows (two `vpermt2b`) and become
//! f32 by a mantissa permute and integer arithmetic, bit for bit [`SCALES`].

use std::arch::x86_64::*;

#[cfg(doc)]
use super::SCALES;
use super::avx2::Q3;
use super::{BLOCK_BYTES, SCALE_TOP_EXP};
use crate::quant::act::QuantizedActs;
use crate::quant::avx2::{Avx2Block, lut};
use crate::quant::avx512::{Avx512Block, log_scales8, vec_dot};
use crate::quant::scale::mantissa_bits;

/// Offset of block `b + 1` in the pair's window, and of `b`.
const B1: usize = 3 + BLOCK_BYTES;
const B0: usize = 3;

/// The per-call constants of the pair decode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Consts {
    /// The AVX2 tables, for a row's odd last block.
    lut2: [__m256i; 2],
    /// grid + 64 at every index `i` (by `i % 8`): 16 entries for `vpshufb`
    /// (in both lanes), 32 for `vpermb`.
    lut: __m256i,
    /// The window bytes holding each lane byte's low bits / high bit.
    perm_lo: __m256i,
    perm_hi: __m256i,
    /// `vpermt2b` indices of the scale bytes of two windows (bytes 3 and 16
    /// of each) into the low byte of 4 dwords.
    scale_idx: __m256i,
    /// The f32 bits of the scale mantissas, [`mantissa_bits`].
    mant: __m256i,
    /// Qword shifts bringing the low bits to bits 0..2, per half.
    lo_shift: [__m256i; 2],
    /// Dword right shifts (weights 0..16) and left rotations (16..32)
    /// bringing the high bit to bit 2.
    hi_shift: __m256i,
    hi_rot: __m256i,
    /// Both as left rotations, for [`Avx512Block::decode_pair512`]'s halves.
    hi_rot512: __m512i,
    /// `lut` in both halves, for the 512-bit decodes.
    lut512: __m512i,
    /// [`Avx512Block::decode_oct`]'s `vpermt2b` indices into its two loads:
    /// each 64-bit lane `l` the `qs` of block `l`, ...
    oct_qs: __m512i,
    /// ... each the `qh` of block `l` twice, ...
    oct_qh: __m512i,
    /// ... and the 8 scale bytes, one in the low byte of each dword.
    oct_scale: __m512i,
    /// Per vector `k`, the left rotation of each dword bringing its bytes'
    /// high bits (weight `8k + j`'s is bit `7 - 2k - j / 4` of `qh` byte
    /// `j % 4`) to bit 2.
    oct_rot: [__m512i; 4],
}

/// The byte of [`Avx512Block::decode_oct`]'s two loads (`x0` = bytes
/// 0..64 of the 8 blocks, `x1` = their last 64) that holds byte `m` of the
/// blocks, as a `vpermt2b` index.
const fn oct_byte(m: usize) -> u8 {
    // where `x1` starts
    const SECOND: usize = 8 * BLOCK_BYTES - 64;
    (if m < 64 { m } else { 64 + m - SECOND }) as u8
}

/// 64 bytes as a vector.
///
/// # Safety
/// AVX-512F available.
#[inline]
#[target_feature(enable = "avx512f")]
fn bytes64(b: [u8; 64]) -> __m512i {
    // SAFETY: `b` is 64 readable bytes.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Bytes of a 32-byte vector.
///
/// # Safety
/// AVX available.
#[inline]
#[target_feature(enable = "avx2")]
fn bytes(b: [u8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// The grid-independent byte vectors of [`Consts`], built at compile
/// time: a call builds only the grid's table. Every rayon task of a
/// product is a call, and building these per call showed in the product's
/// rate, the more so the fewer rows a call (docs/BENCH.md).
struct ConstBytes {
    perm_lo: [u8; 32],
    perm_hi: [u8; 32],
    scale_idx: [u8; 32],
    oct_qs: [u8; 64],
    oct_qh: [u8; 64],
    oct_scale: [u8; 64],
    oct_rot: [[i32; 16]; 4],
}

static CONST_BYTES: ConstBytes = {
    let mut t = ConstBytes {
        perm_lo: [0; 32],
        perm_hi: [0; 32],
        scale_idx: [0; 32],
        oct_qs: [0; 64],
        oct_qh: [0; 64],
        oct_scale: [0; 64],
        oct_rot: [[0; 16]; 4],
    };
    // Lane byte (d, e) = byte e of dword d: weight 4·(d/2) + e of block
    // b + d % 2 (plus 16 in the second half); its low bits are in
    // `qs[(4·(d/2) + e) % 8]`, its high bit in `qh[e]`.
    let mut i = 0;
    while i < 32 {
        let (d, e) = (i / 4, i % 4);
        let base = if d % 2 == 0 { B0 } else { B1 };
        t.perm_lo[i] = (base + 1 + (4 * (d / 2) + e) % 8) as u8;
        t.perm_hi[i] = (base + 9 + e) as u8;
        i += 1;
    }
    // Dword d (and d + 4): window w / 2 (of the pair), block w % 2, w = d.
    let mut d = 0;
    while d < 4 {
        let at = 32 * (d / 2) + if d % 2 == 0 { B0 } else { B1 };
        t.scale_idx[4 * d] = at as u8;
        t.scale_idx[16 + 4 * d] = at as u8;
        d += 1;
    }
    let mut i = 0;
    while i < 64 {
        t.oct_qs[i] = oct_byte(BLOCK_BYTES * (i / 8) + 1 + i % 8);
        t.oct_qh[i] = oct_byte(BLOCK_BYTES * (i / 8) + 9 + i % 4);
        if i % 4 == 0 && i / 4 < 8 {
            t.oct_scale[i] = oct_byte(BLOCK_BYTES * (i / 4));
        }
        i += 1;
    }
    // Per vector k, dword d: bytes j = 4 (d % 2) + e, from bit 7 - 2k - d %
    // 2 to bit 2.
    let mut k = 0;
    while k < 4 {
        let mut d = 0;
        while d < 16 {
            t.oct_rot[k][d] = (2 * k as i32 + (d % 2) as i32 - 5).rem_euclid(32);
            d += 1;
        }
        k += 1;
    }
    t
};

/// 16 i32 as a vector.
///
/// # Safety
/// AVX-512F available.
#[inline]
#[target_feature(enable = "avx512f")]
fn rot64(r: &[i32; 16]) -> __m512i {
    // SAFETY: `r` is 16 readable i32.
    unsafe { _mm512_loadu_si512(r.as_ptr().cast()) }
}

impl Avx512Block for Q3 {
    const PAIRED: bool = true;
    const PAIR_LEAD: usize = B0;
    const VNNI_OFFSET: i32 = 64;
    type Consts = Consts;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn consts(grid: &[i8; 16]) -> Consts {
        let t = &CONST_BYTES;
        let table: [u8; 32] =
            std::array::from_fn(|i| grid[i % 8].wrapping_add(<Q3 as Avx2Block>::OFFSET) as u8);
        // SAFETY: 8 readable i32.
        let mant = unsafe { _mm256_loadu_si256(mantissa_bits(SCALE_TOP_EXP - 4).as_ptr().cast()) };
        Consts {
            lut2: lut::<Q3>(grid),
            lut: bytes(table),
            perm_lo: bytes(t.perm_lo),
            perm_hi: bytes(t.perm_hi),
            scale_idx: bytes(t.scale_idx),
            mant,
            lo_shift: [
                _mm256_setr_epi64x(0, 0, 2, 2),
                _mm256_setr_epi64x(4, 4, 6, 6),
            ],
            // Weight 4k + e's high bit is bit 8e + 7 - k (first half) or
            // 8e + 3 - k (second) of its dword; k = d / 2.
            hi_shift: _mm256_setr_epi32(5, 5, 4, 4, 3, 3, 2, 2),
            hi_rot: _mm256_setr_epi32(31, 31, 0, 0, 1, 1, 2, 2),
            // the right shifts 5, 5, 4, 4, 3, 3, 2, 2 as left rotations
            hi_rot512: _mm512_setr_epi32(27, 27, 28, 28, 29, 29, 30, 30, 31, 31, 0, 0, 1, 1, 2, 2),
            lut512: _mm512_broadcast_i64x4(bytes(table)),
            oct_qs: bytes64(t.oct_qs),
            oct_qh: bytes64(t.oct_qh),
            oct_scale: bytes64(t.oct_scale),
            oct_rot: [
                rot64(&t.oct_rot[0]),
                rot64(&t.oct_rot[1]),
                rot64(&t.oct_rot[2]),
                rot64(&t.oct_rot[3]),
            ],
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_u8(blk: *const u8, c: &Consts) -> __m256i {
        // SAFETY: the caller guarantees 13 readable bytes at `blk`.
        unsafe { <Q3 as Avx2Block>::decode(blk, c.lut2) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_pair(x: __m256i, c: &Consts) -> [__m256i; 2] {
        let lo = _mm256_permutexvar_epi8(c.perm_lo, x);
        let hi = _mm256_permutexvar_epi8(c.perm_hi, x);
        // Bits 0 and 1 from the low bits, the others from the high bit's
        // vector: its bit 2 (bits 3 and 4 index copies of the table, the
        // rest `vpermb` ignores).
        let pick = _mm256_set1_epi8(3);
        let a = _mm256_ternarylogic_epi32::<0xe4>(
            _mm256_srlv_epi64(lo, c.lo_shift[0]),
            _mm256_srlv_epi32(hi, c.hi_shift),
            pick,
        );
        let b = _mm256_ternarylogic_epi32::<0xe4>(
            _mm256_srlv_epi64(lo, c.lo_shift[1]),
            _mm256_rolv_epi32(hi, c.hi_rot),
            pick,
        );
        [
            _mm256_permutexvar_epi8(a, c.lut),
            _mm256_permutexvar_epi8(b, c.lut),
        ]
    }

    const PAIR_512: bool = true;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_pair512(x: __m512i, c: &Consts) -> __m512i {
        // `decode_pair`'s two vectors as the halves of one: the same byte
        // picks (below 32: the window) in both, the halves' own shifts. The
        // first half's high bits by a rotation where `decode_pair` shifts:
        // bit 2 of every byte is the same (shifts of at most 5 move no bit
        // across the dword's end into it), and the bits above 2, rotated or
        // not, index copies of the table (`vpermb` reads six bits here).
        let w = |v: __m256i| _mm512_broadcast_i64x4(v);
        let cat = |a: __m256i, b: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        let lo = _mm512_permutexvar_epi8(w(c.perm_lo), x);
        let hi = _mm512_permutexvar_epi8(w(c.perm_hi), x);
        let v = _mm512_ternarylogic_epi32::<0xe4>(
            _mm512_srlv_epi64(lo, cat(c.lo_shift[0], c.lo_shift[1])),
            _mm512_rolv_epi32(hi, c.hi_rot512),
            _mm512_set1_epi8(3),
        );
        _mm512_permutexvar_epi8(v, c.lut512)
    }

    const OCT: bool = true;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn decode_oct(x0: __m512i, x1: __m512i, c: &Consts) -> ([__m512i; 4], __m256) {
        // Each 64-bit lane one block's `qs` (weights j, j + 8, j + 16, j +
        // 24 in byte j) and its `qh` twice: a qword shift by 2k leaves the
        // low bits of weights 8k..8k + 8 in the lane's bytes, a dword
        // rotation their high bits; three shuffles for 8 blocks and one
        // table lookup a vector, where pairs take three a pair.
        let qs = _mm512_permutex2var_epi8(x0, c.oct_qs, x1);
        let qh = _mm512_permutex2var_epi8(x0, c.oct_qh, x1);
        let lut = c.lut512;
        let pick = _mm512_set1_epi8(3);
        // Called here, not passed to `array::from_fn`: intrinsics in a
        // closure passed on are not inlined.
        let decode = |lo: __m512i, rot: __m512i| {
            let idx = _mm512_ternarylogic_epi32::<0xe4>(lo, _mm512_rolv_epi32(qh, rot), pick);
            _mm512_permutexvar_epi8(idx, lut)
        };
        let v = [
            decode(qs, c.oct_rot[0]),
            decode(_mm512_srli_epi64::<2>(qs), c.oct_rot[1]),
            decode(_mm512_srli_epi64::<4>(qs), c.oct_rot[2]),
            decode(_mm512_srli_epi64::<6>(qs), c.oct_rot[3]),
        ];
        let s = _mm512_maskz_permutex2var_epi8(0x1111_1111, x0, c.oct_scale, x1);
        // SAFETY: this function's ISA.
        (v, unsafe { log_scales8(_mm512_castsi512_si256(s), c.mant) })
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
    unsafe fn pair_scales8(x: &[__m256i; 4], c: &Consts) -> __m256 {
        // The 8 scale bytes, one per dword (blocks in order), zero-extended.
        let lo = _mm256_maskz_permutex2var_epi8(0x1111, x[0], c.scale_idx, x[1]);
        let hi = _mm256_maskz_permutex2var_epi8(0x1111_0000, x[2], c.scale_idx, x[3]);
        // SAFETY: this function's ISA.
        unsafe { log_scales8(_mm256_or_si256(lo, hi), c.mant) }
    }
}

/// AVX-512 version of [`super::reference::vec_dot_q3_q8_ref`] (VNNI and
/// VBMI), over `out.len() / acts.n` rows.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI and VBMI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_q8(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3, false>(rows, row_bytes, grid, acts, out) }
}

/// [`vec_dot_q3_q8`] a pair of blocks to a 512-bit vector
/// ([`Avx512Block::decode_pair512`]), for CPUs with full-width 512-bit
/// units.
///
/// # Safety
/// As [`vec_dot_q3_q8`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_q8_512(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    // SAFETY: same contract.
    unsafe { vec_dot::<Q3, true>(rows, row_bytes, grid, acts, out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::q3::{GRID_Q3, SCALES};

    #[test]
    fn pair_scales_are_the_table_for_every_byte() {
        if !crate::quant::avx512::vbmi_available() {
            println!("SKIPPED: AVX-512 VBMI (this CPU lacks it)");
            return;
        }
        for first in (0..256).step_by(8) {
            // 8 blocks whose scale bytes are first..first + 8, 3 bytes of lead.
            let mut row = [0u8; 3 + 8 * BLOCK_BYTES + 32];
            for i in 0..8 {
                row[3 + i * BLOCK_BYTES] = (first + i) as u8;
            }
            // SAFETY: AVX-512 F/BW/VL/VBMI checked above; each window is 32
            // readable bytes of `row`.
            let got: [f32; 8] = unsafe {
                let c = <Q3 as Avx512Block>::consts(&GRID_Q3);
                let x = std::array::from_fn(|u| {
                    _mm256_loadu_si256(row.as_ptr().add(u * 2 * BLOCK_BYTES).cast())
                });
                std::mem::transmute(<Q3 as Avx512Block>::pair_scales8(&x, &c))
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
