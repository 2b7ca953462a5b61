//! The native expert formats: routed-expert weights kept exactly as a release
//! stores them (bf16, f32, FP8 blocks, compressed-tensors int4, MXFP4), so
//! that `--experts native` is the exact path for every source with no second
//! quantization. Each row decodes exactly to f32 and is multiplied with f32
//! activations: no int8 activation rounding, unlike `q3`/`q4`/`q8`.
//!
//! A packed (rows, cols) matrix of a native format is two planes, nothing
//! else: the codes of every row, row-major ([`Format::row_bytes`] each), then
//! the scale plane of the format (none for `bf16` and `f32`):
//!
//! | format | codes per row | scale plane |
//! |---|---|---|
//! | `bf16` (5) | `2·cols`, LE bf16 | — |
//! | `f32` (6) | `4·cols`, LE f32 | — |
//! | `fp8-b128` (7) | `cols` E4M3FN bytes | f32 `[⌈rows/128⌉, ⌈cols/128⌉]`, one `scale_inv` per 128×128 block |
//! | `int4-g32` (8) | `4·⌈cols/8⌉`: LE u32 words, element j at bits `4·(j%8)`, stored `q + 8` | bf16 `[rows, ⌈cols/32⌉]` |
//! | `mxfp4` (9) | `⌈cols/2⌉`: e2m1 codes, even column in the low nibble | E8M0 bytes `[rows, ⌈cols/32⌉]` |
//! | ggml type `t` (256 + t) | `cols / QK` ggml blocks of `t`, scales inside | — |
//!
//! A ggml matrix is a GGUF tensor's rows as the file holds them; `cols`
//! must be a whole number of blocks (as ggml itself requires of `ne0`).
//! Its products leave this exact path where the type has an integer
//! kernel (`crate::ggml::dot`, llama.cpp's int8-activation arithmetic):
//! `PackedMatrix::matmul` sends them there.
//! Rows of plain floats (`bf16`, `f32`, a GGUF's F16) go to the dense
//! float kernels of the table's ISA, which widen each value in registers
//! and sum in the same order.
//! These are the release layouts (DeepSeek-V3 / Kimi-K2 fp8, Kimi-K2-Thinking
//! int4, Kimi K3 MXFP4) with their planes concatenated, so a converter copies
//! bytes. The scalar `_ref` decoders are in [`reference`] and, for ggml
//! blocks, [`crate::ggml`]; rows are decoded
//! into a scratch row and dotted with `dense::dot_f32`, the same sum the
//! dense exact path (`Matrix`) uses, so a native expert computes bit for bit
//! what the source's f32 weights compute.

pub mod reference;

use crate::quant::{Format, Isa, PackedMatrix};

/// Rows and columns of one FP8 scale block (DeepSeek-V3's `weight_block_size`).
pub const FP8_BLOCK: usize = 128;
/// Inputs per int4 scale (Kimi-K2-Thinking's compressed-tensors group).
pub const INT4_GROUP: usize = 32;
/// Inputs per MXFP4 E8M0 scale (the OCP block).
pub const MXFP4_GROUP: usize = 32;

/// [`reference::rows_dot_native_f32_ref`] with rows of plain floats (`f32`,
/// `bf16`, a GGUF's F32, F16 and BF16) on the dense float kernels of `isa`
/// (`DenseKernels::rows_of_floats`): the same sums, without a decode per
/// row. The other formats, and rows not aligned for their values, take the
/// reference path.
fn rows_dot_native_on(
    isa: crate::quant::Isa,
    m: &PackedMatrix<'_>,
    r0: usize,
    x: &[f32],
    n: usize,
    buf: &mut [f32],
    out: &mut [f32],
) {
    let dense = crate::dense::DenseKernels::for_isa(isa);
    if dense.is_some_and(|k| k.rows_of_floats(m, r0, x, n, out)) {
        return;
    }
    let cols = m.cols();
    if let Some(k) = dense
        && n > 0
        && cols > 0
    {
        // DECODED_ROWS rows at a time decoded into f32, then the dense
        // kernels: the decode's eight FMA chains for one token, the prefill
        // tile for a batch, whose lane sums are `dense::dot_f32`'s (the same
        // bits as a dot per row and activation row, at their rate instead
        // of one chain's).
        DECODED.with_borrow_mut(|rows| {
            let per = if n == 1 {
                DECODED_ROWS_ONE
            } else {
                DECODED_ROWS
            };
            for (c, o) in out.chunks_mut(per * n).enumerate() {
                let r = r0 + c * per;
                // Every value is decoded over: no need to zero it first.
                rows.resize(o.len() / n * cols, 0.0);
                for (i, row) in rows.chunks_exact_mut(cols).enumerate() {
                    decode_row(m, r + i, row);
                }
                k.rows_f32(rows, cols, x, n, o);
            }
        });
        return;
    }
    reference::rows_dot_native_f32_ref(m, r0, x, n, buf, out);
}

/// Rows decoded at a time by the exact path: a multiple of every dense
/// table's row groups, and at 7168 wide 448 KiB of f32, which stays in L2
/// between the decode writing it and the products reading it.
const DECODED_ROWS: usize = 16;
/// The same for one activation row: one group of the dense decode's eight
/// rows in flight (half the scratch: 1.03-1.11 x the one-token product of
/// sixteen, docs/BENCH.md).
const DECODED_ROWS_ONE: usize = 8;

thread_local! {
    /// Rows of an exact product decoded to f32, (rows, cols).
    static DECODED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`rows_dot_native_on`] for one ISA, as a table's exact path.
macro_rules! rows_dot_native_for {
    ($($name:ident = $isa:ident;)*) => {$(
        #[cfg(target_arch = "x86_64")]
        pub(crate) fn $name(
            m: &PackedMatrix<'_>,
            r0: usize,
            x: &[f32],
            n: usize,
            buf: &mut [f32],
            out: &mut [f32],
        ) {
            rows_dot_native_on(crate::quant::Isa::$isa, m, r0, x, n, buf, out);
        }
    )*};
}

rows_dot_native_for! {
    rows_dot_native_avx2 = Avx2;
    rows_dot_native_avx512 = Avx512;
}

/// Bytes of one row's codes; `None` for block formats.
pub(crate) fn code_row_bytes(format: Format, cols: usize) -> Option<usize> {
    Some(match format {
        Format::Bf16 => cols.checked_mul(2)?,
        Format::F32 => cols.checked_mul(4)?,
        Format::Fp8Block128 => cols,
        Format::Int4G32 => cols.div_ceil(8).checked_mul(4)?,
        Format::Mxfp4 => cols.div_ceil(2),
        // A type the decoders do not read has no matrices (sizes are `None`).
        Format::Ggml(t) if !t.is_decodable() => return None,
        Format::Ggml(t) => usize::try_from(t.row_bytes(cols as u64)?).ok()?,
        Format::Q3Tcq => crate::q3tcq::row_bytes(cols),
        Format::Q3 | Format::Q3Rtn | Format::Q4 | Format::Q8 => return None,
    })
}

/// Bytes of the scale plane of a (rows, cols) matrix; `None` on overflow or
/// for block formats.
pub fn scale_plane_bytes(format: Format, rows: usize, cols: usize) -> Option<usize> {
    match format {
        Format::Bf16 | Format::F32 | Format::Q3Tcq | Format::Ggml(_) => Some(0),
        Format::Fp8Block128 => rows
            .div_ceil(FP8_BLOCK)
            .checked_mul(cols.div_ceil(FP8_BLOCK))?
            .checked_mul(4),
        Format::Int4G32 => rows.checked_mul(cols.div_ceil(INT4_GROUP))?.checked_mul(2),
        Format::Mxfp4 => rows.checked_mul(cols.div_ceil(MXFP4_GROUP)),
        Format::Q3 | Format::Q3Rtn | Format::Q4 | Format::Q8 => None,
    }
}

/// Bytes of a packed (rows, cols) matrix of a native format: codes then scales.
pub(crate) fn packed_size(format: Format, rows: usize, cols: usize) -> Option<usize> {
    rows.checked_mul(code_row_bytes(format, cols)?)?
        .checked_add(scale_plane_bytes(format, rows, cols)?)
}

/// A native matrix from its two planes (codes row-major, then the scale
/// plane), length-checked: what a converter builds from a release's tensors.
pub fn matrix_bytes(
    format: Format,
    rows: usize,
    cols: usize,
    codes: &[u8],
    scales: &[u8],
) -> crate::Result<Vec<u8>> {
    let want_codes = code_row_bytes(format, cols).and_then(|b| b.checked_mul(rows));
    let want_scales = scale_plane_bytes(format, rows, cols);
    if want_codes != Some(codes.len()) || want_scales != Some(scales.len()) {
        return Err(crate::Error::PackedSize {
            format: format.name(),
            rows,
            cols,
            expected: packed_size(format, rows, cols).unwrap_or(usize::MAX),
            got: codes.len() + scales.len(),
        });
    }
    let mut out = Vec::with_capacity(codes.len() + scales.len());
    out.extend_from_slice(codes);
    out.extend_from_slice(scales);
    Ok(out)
}

/// The scale bytes that row `r` of `m` uses (empty for bf16/f32).
fn row_scales<'a>(m: &PackedMatrix<'a>, r: usize) -> &'a [u8] {
    let codes = m.rows() * m.format().row_bytes(m.cols());
    let plane = &m.bytes()[codes..];
    match m.format() {
        Format::Fp8Block128 => {
            let per_row = m.cols().div_ceil(FP8_BLOCK) * 4;
            &plane[(r / FP8_BLOCK) * per_row..][..per_row]
        }
        Format::Int4G32 => {
            let per_row = m.cols().div_ceil(INT4_GROUP) * 2;
            &plane[r * per_row..][..per_row]
        }
        Format::Mxfp4 => {
            let per_row = m.cols().div_ceil(MXFP4_GROUP);
            &plane[r * per_row..][..per_row]
        }
        _ => &[],
    }
}

/// Row `r` of a native matrix decoded exactly into `out` (len = cols).
pub fn decode_row(m: &PackedMatrix<'_>, r: usize, out: &mut [f32]) {
    let codes = &*m.row_in_order(r);
    let scales = row_scales(m, r);
    match m.format() {
        Format::Bf16 => reference::decode_row_bf16_ref(codes, out),
        Format::F32 => reference::decode_row_f32_ref(codes, out),
        Format::Fp8Block128 => decode_row_fp8_on(crate::quant::kernels().isa(), codes, scales, out),
        Format::Int4G32 => decode_row_int4_on(crate::quant::kernels().isa(), codes, scales, out),
        Format::Mxfp4 => decode_row_mxfp4(codes, scales, out),
        Format::Q3Tcq => crate::q3tcq::dequantize_row(codes, out),
        Format::Ggml(t) => crate::ggml::dequantize_into(t, codes, out)
            .expect("a ggml matrix holds whole decodable blocks (PackedMatrix::new checked)"),
        f => unreachable!("{f} is not a native format (callers check is_exact)"),
    }
}

/// [`reference::decode_row_fp8_ref`] on `isa` (eight values at a time on
/// AVX2, sixteen on AVX-512), bit for bit. Panics if this CPU lacks it.
pub fn decode_row_fp8_on(isa: Isa, codes: &[u8], scales: &[u8], out: &mut [f32]) {
    let mut k = 0;
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available(), "this CPU lacks {}", isa.name());
        // Whole vectors in whole scale blocks (a block holds 8 of 16, 16 of 8).
        let lanes = if isa == Isa::Avx512 { 16 } else { 8 };
        k = (out.len().min(codes.len()) / lanes * lanes).min(scales.len() / 4 * FP8_BLOCK);
        // SAFETY: the ISA's features (checked); the lengths bound every access.
        unsafe {
            if isa == Isa::Avx512 {
                decode_fp8_avx512(&codes[..k], scales, &mut out[..k]);
            } else {
                decode_fp8_avx2(&codes[..k], scales, &mut out[..k]);
            }
        }
    }
    if k == out.len() {
        return;
    }
    let (tail_scales, skip) = (&scales[k / FP8_BLOCK * 4..], k % FP8_BLOCK);
    let mut rest = vec![0f32; skip + out.len() - k];
    let mut codes_rest = vec![0u8; skip];
    codes_rest.extend_from_slice(&codes[k..]);
    reference::decode_row_fp8_ref(&codes_rest, tail_scales, &mut rest);
    out[k..].copy_from_slice(&rest[skip..]);
}

/// AVX2 [`reference::decode_row_fp8_ref`]: eight E4M3FN bytes widened to
/// lanes, their seven low bits placed as an f32's exponent and mantissa
/// (`<< 20`) and times 2^120 (exact, subnormals included: 0 < e gives
/// `2^(e-7)·(1 + m/8)`, e = 0 the f32 subnormal `m · 2^-129` times 2^120),
/// 0x7F made the reference's NaN, the sign put back, then times the block's
/// scale: the reference's one product.
///
/// # Safety
/// AVX2 must be available; `out.len()` a multiple of 8, `codes` and
/// `scales` cover it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_fp8_avx2(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let seven = _mm256_set1_epi32(0x7F);
    let rebias = _mm256_set1_ps(f32::from_bits((127 + 120) << 23));
    let nan = _mm256_set1_ps(f32::NAN);
    // A scale block at a time: its scale read and broadcast once.
    for ((o, c), s) in out
        .chunks_mut(FP8_BLOCK)
        .zip(codes.chunks(FP8_BLOCK))
        .zip(scales.chunks_exact(4))
    {
        let scale = _mm256_set1_ps(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        for (o, c) in o.chunks_exact_mut(8).zip(c.chunks_exact(8)) {
            // SAFETY: 8 bytes read inside `c`.
            let b = _mm256_cvtepu8_epi32(unsafe { _mm_loadu_si64(c.as_ptr()) });
            let mag = _mm256_and_si256(b, seven);
            let v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32::<20>(mag)), rebias);
            let v = _mm256_blendv_ps(v, nan, _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, seven)));
            let sign = _mm256_slli_epi32::<24>(_mm256_andnot_si256(seven, b));
            let v = _mm256_or_ps(v, _mm256_castsi256_ps(sign));
            // SAFETY: 8 f32 written inside `o`.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(v, scale)) };
        }
    }
}

/// AVX-512 [`decode_fp8_avx2`]: sixteen bytes at a time, NaN by a mask.
///
/// # Safety
/// AVX-512 F must be available; `out.len()` a multiple of 16, `codes` and
/// `scales` cover it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn decode_fp8_avx512(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let seven = _mm512_set1_epi32(0x7F);
    let rebias = _mm512_set1_ps(f32::from_bits((127 + 120) << 23));
    let nan = _mm512_set1_ps(f32::NAN);
    for ((o, c), s) in out
        .chunks_mut(FP8_BLOCK)
        .zip(codes.chunks(FP8_BLOCK))
        .zip(scales.chunks_exact(4))
    {
        let scale = _mm512_set1_ps(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        for (o, c) in o.chunks_exact_mut(16).zip(c.chunks_exact(16)) {
            // SAFETY: 16 bytes read inside `c`.
            let b = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(c.as_ptr().cast()) });
            let mag = _mm512_and_si512(b, seven);
            let v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32::<20>(mag)), rebias);
            let v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, seven), nan);
            let sign = _mm512_slli_epi32::<24>(_mm512_andnot_si512(seven, b));
            let v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
            // SAFETY: 16 f32 written inside `o`.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(v, scale)) };
        }
    }
}

/// [`reference::decode_row_int4_ref`] on `isa` (AVX-512 a group of 32
/// values at a time, then AVX2 a word of eight), bit for bit. Panics if
/// this CPU lacks it.
pub fn decode_row_int4_on(isa: Isa, codes: &[u8], scales: &[u8], out: &mut [f32]) {
    let mut k = 0;
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available(), "this CPU lacks {}", isa.name());
        k = (out.len() / 8 * 8)
            .min(codes.len() / 4 * 8)
            .min(scales.len() / 2 * INT4_GROUP);
        let groups = if isa == Isa::Avx512 {
            k / INT4_GROUP * INT4_GROUP
        } else {
            0
        };
        // SAFETY: the ISA's features (checked); the lengths bound every
        // access, and the AVX2 part starts on a group.
        unsafe {
            if groups > 0 {
                decode_int4_avx512(&codes[..groups / 2], scales, &mut out[..groups]);
            }
            decode_int4_avx2(
                &codes[groups / 2..k / 2],
                &scales[groups / INT4_GROUP * 2..],
                &mut out[groups..k],
            );
        }
    }
    if k == out.len() {
        return;
    }
    // The rest starts on a word (k is a multiple of 8) and in its group.
    let (skip, words) = (k % INT4_GROUP, k / 8 * 4);
    let mut rest = vec![0f32; skip + out.len() - k];
    let mut codes_rest = vec![0u8; skip / 2];
    codes_rest.extend_from_slice(&codes[words..]);
    reference::decode_row_int4_ref(&codes_rest, &scales[k / INT4_GROUP * 2..], &mut rest);
    out[k..].copy_from_slice(&rest[skip..]);
}

/// AVX2 [`reference::decode_row_int4_ref`]: a LE word's eight nibbles
/// shifted into eight lanes, less 8, to f32, times the group's bf16 scale
/// widened: the reference's one exact product.
///
/// # Safety
/// AVX2 must be available; `out.len()` a multiple of 8, `codes` (4 bytes a
/// word) and `scales` (a bf16 per 32) cover it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_int4_avx2(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let (nibble, eight) = (_mm256_set1_epi32(0xF), _mm256_set1_epi32(8));
    for (j, o) in out.chunks_exact_mut(8).enumerate() {
        let s = &scales[8 * j / INT4_GROUP * 2..][..2];
        let scale = half::bf16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
        let w = &codes[4 * j..][..4];
        let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let q = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), shifts),
            nibble,
        );
        let v = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, eight));
        // SAFETY: 8 f32 written inside `o`.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(v, _mm256_set1_ps(scale))) };
    }
}

/// AVX-512 [`decode_int4_avx2`], a group at a time: its 16 bytes widened
/// to lanes, low and high nibbles split and put back in value order by two
/// two-source permutes, less 8, to f32, times the group's scale: the
/// reference's one exact product.
///
/// # Safety
/// AVX-512 F must be available; `out.len()` a multiple of 32, `codes` (16
/// bytes a group) and `scales` (a bf16 per group) cover it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn decode_int4_avx512(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    // Value 2i is byte i's low nibble, value 2i + 1 its high one.
    let first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    let second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    let (nibble, eight) = (_mm512_set1_epi32(0xF), _mm512_set1_epi32(8));
    for (g, o) in out.chunks_exact_mut(INT4_GROUP).enumerate() {
        let s = &scales[2 * g..][..2];
        let scale = _mm512_set1_ps(f32::from_bits(
            u32::from(u16::from_le_bytes([s[0], s[1]])) << 16,
        ));
        let c = &codes[16 * g..][..16];
        // SAFETY: 16 bytes read inside `c`.
        let b = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(c.as_ptr().cast()) });
        let lo = _mm512_sub_epi32(_mm512_and_si512(b, nibble), eight);
        let hi = _mm512_sub_epi32(_mm512_srli_epi32::<4>(b), eight);
        for (half, idx) in o.chunks_exact_mut(16).zip([first, second]) {
            let v = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, idx, hi));
            // SAFETY: 16 f32 written inside `half`.
            unsafe { _mm512_storeu_ps(half.as_mut_ptr(), _mm512_mul_ps(v, scale)) };
        }
    }
}

/// [`reference::decode_row_mxfp4_ref`] on the dispatched ISA
/// (`WASTE_KERNELS` forces one): the same values, bit for bit.
pub fn decode_row_mxfp4(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    decode_row_mxfp4_on(crate::quant::kernels().isa(), codes, scales, out);
}

/// [`decode_row_mxfp4`] on `isa`. Panics if this CPU lacks it.
pub fn decode_row_mxfp4_on(isa: Isa, codes: &[u8], scales: &[u8], out: &mut [f32]) {
    // The SIMD bodies take the whole groups, the scalar one the rest.
    let simd = cfg!(target_arch = "x86_64") && isa >= Isa::Avx2;
    let whole = if simd {
        (out.len() / MXFP4_GROUP).min(scales.len())
    } else {
        0
    };
    let k = whole * MXFP4_GROUP;
    #[cfg(target_arch = "x86_64")]
    if simd {
        assert!(isa.available(), "this CPU lacks {}", isa.name());
        let (codes, scales, out) = (&codes[..k / 2], &scales[..whole], &mut out[..k]);
        // SAFETY: the ISA's features (checked); AVX2 is part of AVX-512's.
        unsafe {
            if isa == Isa::Avx512 {
                decode_groups_mxfp4_avx512(codes, scales, out);
            } else {
                decode_groups_mxfp4_avx2(codes, scales, out);
            }
        }
    }
    decode_row_mxfp4_groups(&codes[k / 2..], &scales[whole..], &mut out[k..]);
}

/// The reference a group at a time: the 16 values of a group's exponent
/// computed once (the reference's products, so the same bits) and the
/// codes looked up, where the reference widens both code and exponent for
/// every weight (3.4 x the time).
fn decode_row_mxfp4_groups(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    let groups = out
        .chunks_mut(MXFP4_GROUP)
        .zip(codes.chunks(MXFP4_GROUP / 2));
    for ((o, c), &e) in groups.zip(scales) {
        let scale = reference::e8m0_to_f32(e);
        let values: [f32; 16] = std::array::from_fn(|i| reference::e2m1_to_f32(i as u8) * scale);
        for (pair, &byte) in o.chunks_mut(2).zip(c) {
            pair[0] = values[usize::from(byte & 0xF)];
            if let Some(v) = pair.get_mut(1) {
                *v = values[usize::from(byte >> 4)];
            }
        }
    }
}

/// AVX-512 [`decode_row_mxfp4_groups`]: per group the 16 values of its
/// exponent in one vector (the reference's products, signs included);
/// sixteen codes (eight bytes, low nibble first) shifted into sixteen
/// lanes and looked up by one `vpermps` on their low four bits; whole
/// groups only (one exponent per [`MXFP4_GROUP`] values of `out`).
///
/// # Safety
/// AVX-512 F must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn decode_groups_mxfp4_avx512(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let signed: [f32; 16] = std::array::from_fn(|i| reference::e2m1_to_f32(i as u8));
    // SAFETY: 16 f32 read from `signed`.
    let codes_values = unsafe { _mm512_loadu_ps(signed.as_ptr()) };
    let shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    for (g, &e) in scales.iter().enumerate() {
        let values = _mm512_mul_ps(codes_values, _mm512_set1_ps(reference::e8m0_to_f32(e)));
        for h in 0..MXFP4_GROUP / 16 {
            let at = MXFP4_GROUP / 2 * g + 8 * h;
            let word = u64::from_le_bytes(codes[at..at + 8].try_into().expect("8 bytes"));
            let lanes = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi32(word as i32)),
                _mm256_set1_epi32((word >> 32) as i32),
            );
            let v = _mm512_permutexvar_ps(_mm512_srlv_epi32(lanes, shifts), values);
            let o = &mut out[MXFP4_GROUP * g + 16 * h..][..16];
            // SAFETY: 16 f32 written inside `o`.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), v) };
        }
    }
}

/// AVX2 [`decode_row_mxfp4_groups`]: per group the eight magnitudes times
/// the exponent in one vector; eight codes (four bytes, low nibble first)
/// shifted into eight lanes, looked up by `vpermps` on their low three
/// bits, their sign bit moved to bit 31 (`-(v·s)` is `(-v)·s`); whole
/// groups only, as [`decode_groups_mxfp4_avx512`].
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_groups_mxfp4_avx2(codes: &[u8], scales: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let sign_bit = _mm256_set1_epi32(8);
    // SAFETY: 8 f32 read from the table.
    let magnitudes = unsafe { _mm256_loadu_ps(reference::E2M1.as_ptr()) };
    for (g, &e) in scales.iter().enumerate() {
        let values = _mm256_mul_ps(magnitudes, _mm256_set1_ps(reference::e8m0_to_f32(e)));
        for q in 0..MXFP4_GROUP / 8 {
            let at = MXFP4_GROUP / 2 * g + 4 * q;
            let word = u32::from_le_bytes([codes[at], codes[at + 1], codes[at + 2], codes[at + 3]]);
            let idx = _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), shifts);
            let sign = _mm256_slli_epi32::<28>(_mm256_and_si256(idx, sign_bit));
            let v = _mm256_xor_ps(
                _mm256_permutevar8x32_ps(values, idx),
                _mm256_castsi256_ps(sign),
            );
            let o = &mut out[MXFP4_GROUP * g + 8 * q..][..8];
            // SAFETY: 8 f32 written inside `o`.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
        }
    }
}

/// Row `r` of `f32` values as packed bytes of `format` (`bf16`: rounded to
/// nearest even; `f32`: copied); returns the squared error. The formats with
/// scales have no quantizer: their bytes come from a release.
pub(crate) fn encode_row(format: Format, w: &[f32], out: &mut [u8]) -> f64 {
    match format {
        Format::Bf16 => {
            let mut err = 0f64;
            for (o, &x) in out.chunks_exact_mut(2).zip(w) {
                let b = half::bf16::from_f32(x);
                o.copy_from_slice(&b.to_bits().to_le_bytes());
                err += f64::from(x - b.to_f32()).powi(2);
            }
            err
        }
        Format::F32 => {
            for (o, &x) in out.chunks_exact_mut(4).zip(w) {
                o.copy_from_slice(&x.to_le_bytes());
            }
            0.0
        }
        f => unreachable!("{f} has no row encoder (quantize refuses it)"),
    }
}
