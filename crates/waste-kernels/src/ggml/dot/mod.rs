//! Integer products of ggml weight matrices with f32 activations, as
//! llama.cpp computes them: each activation row is quantized once to the
//! weight type's pairing ([`Pairing`]: Q8_K for the k- and i-quants, Q8_0
//! for Q4_0, Q8_0, IQ4_NL, Q5_0, Q4_1 and Q5_1), then every weight row
//! meets it in a per-type
//! integer dot product (`reference.rs` the scalar specification, `avx2.rs`,
//! `avx512.rs` with VNNI), rows split over rayon ([`matmul_with`], the one
//! driver). Results differ from the exact f32 product by the activations'
//! 8-bit rounding only, as llama.cpp's do.
//!
//! A single token's product (decode) takes, for Q4_K, Q6_K and Q3_K (and
//! Q2_K on AVX-512), a multi-row kernel ([`RowsQ8K`]): on the AVX-512
//! tables four rows per call on the blocks as stored, each block's
//! activation codes and sums loaded once for the four, on 512-bit vectors
//! (a sub-block pair per instruction); on AVX2 one row at a time with a
//! prefetch a few KiB
//! ahead, the matrix read as one linear stream (four short rows at once
//! were four streams the memory served slower). Its specification is the
//! row `_ref`, row by row. A store's expert records hold Q4_0, IQ4_NL, Q4_K
//! and IQ4_XS rows interleaved by sixteen ([`layout`]), which sixteen-row
//! kernels read as one stream, one row to a 32-bit lane, with no
//! horizontal sums ([`matmul_laid`]). A
//! product of many tokens (prefill) takes a batched micro-kernel
//! ([`tile`]: the k-quants; [`tile::q8_0`]: the 32-weight types),
//! its products written by the tasks that own their rows straight into
//! the (tokens, rows) output.
//!
//! The lattice i-quants (IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S: `avx2_iq.rs`,
//! `avx512_iq.rs`; IQ1_S, IQ1_M and IQ2_S: `avx2_iq.rs`) have row kernels only: a product of several activation
//! rows (a prefill) runs them once per row, the batched micro-kernels
//! ([`tile`]) being the k-quants' and Q8_0's.
//!
//! Types without a kernel here ([`has_kernel`]) keep the exact path:
//! decode a row with the scalar decoder, dot it in f32.

#[cfg(target_arch = "x86_64")]
mod act_simd;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_iq;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_iq;
pub mod reference;
pub mod tile;

use std::cell::Cell;
use std::sync::OnceLock;

use rayon::prelude::*;

use super::GgmlType;
use super::act::{BlockQ8K, GgmlActs, Pairing};
use super::layout::{self, RowLayout};
use super::legacy::BlockQ8_0;
use crate::quant::Isa;
use crate::quant::dispatch::Needs;
use crate::stash::{Reuse, Stash};
use crate::{Error, Result};
use tile::q8_0::{ActTileQ8_0, GemmTileQ8_0, UnpackedQ8_0};
use tile::{ActTile, GemmTile, ROWS, TOKENS, Unpack, Unpacked};

/// A weight row (whole blocks) times a Q8_K activation row.
///
/// # Safety
/// The ISA the function was compiled for must be available.
pub type DotQ8K = unsafe fn(row: &[u8], acts: &[BlockQ8K]) -> f32;
/// A weight row (whole blocks) times a Q8_0 activation row.
///
/// # Safety
/// As [`DotQ8K`].
pub type DotQ8_0 = unsafe fn(row: &[u8], acts: &[BlockQ8_0]) -> f32;

/// Several weight rows (`rb` bytes each, back to back, whole blocks) times
/// one Q8_K activation row: `out[r] = row r · acts`, for `out.len()` rows.
/// The decode (one token) kernels: a block's activations are loaded once
/// for every row they meet.
///
/// # Safety
/// As [`DotQ8K`].
pub type RowsQ8K = unsafe fn(w: &[u8], rb: usize, acts: &[BlockQ8K], out: &mut [f32]);

/// [`RowsQ8K`] for one or more activation rows: `acts` holds `tokens`
/// rows of `rb`'s blocks back to back and `out[t · rows + r] = row r ·
/// acts row t` for `out.len() / tokens` rows. The word-major kernels,
/// which decode a block column once for several tokens.
///
/// # Safety
/// As [`DotQ8K`].
pub type RowsTokensQ8K = RowsQ8K;

/// [`RowsQ8K`] for the types that meet Q8_0 activations.
///
/// # Safety
/// As [`DotQ8K`].
pub type RowsQ8_0 = unsafe fn(w: &[u8], rb: usize, acts: &[BlockQ8_0], out: &mut [f32]);

/// A table's multi-row decode kernel for one type.
#[derive(Clone, Copy)]
enum Rows {
    Q8K(RowsQ8K),
    Q8_0(RowsQ8_0),
}

impl Rows {
    /// `out[r] = row r of w · acts[t]`.
    ///
    /// # Safety
    /// As [`RowDot::token`]; `w` holds `out.len()` rows of `rb` bytes laid
    /// as the kernel reads them.
    unsafe fn call(self, w: &[u8], rb: usize, acts: &GgmlActs, t: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                Rows::Q8K(f) => f(w, rb, acts.q8k_row(t), out),
                Rows::Q8_0(f) => f(w, rb, acts.q8_0_row(t), out),
            }
        }
    }
}

/// An activation row (whole blocks of 256) quantized to Q8_K, as
/// [`quantize_row_q8_k_ref`](super::act::quantize_row_q8_k_ref).
///
/// # Safety
/// As [`DotQ8K`].
pub type QuantizeQ8K = unsafe fn(x: &[f32], y: &mut [BlockQ8K]);

/// An activation row's Q8_0 quantizer: bit for bit
/// [`quantize_row_q8_0_ref`](super::act::quantize_row_q8_0_ref).
///
/// # Safety
/// As [`DotQ8K`].
pub type QuantizeQ8_0 = unsafe fn(x: &[f32], y: &mut [BlockQ8_0]);

/// One type's row dot product, by the activations it takes.
#[derive(Debug, Clone, Copy)]
enum RowDot {
    Q8K(DotQ8K),
    Q8_0(DotQ8_0),
}

impl RowDot {
    /// `row · acts[t]`.
    ///
    /// # Safety
    /// The kernel's ISA must be available (a `GgmlKernels` hands out only
    /// what `variants` checked); `row` holds as many blocks as `acts`'s rows.
    unsafe fn token(self, row: &[u8], acts: &GgmlActs, t: usize) -> f32 {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                RowDot::Q8K(f) => f(row, acts.q8k_row(t)),
                RowDot::Q8_0(f) => f(row, acts.q8_0_row(t)),
            }
        }
    }
}

/// The ggml kernels of one ISA. Only obtainable for an ISA this CPU runs,
/// which is what makes calling its function pointers sound.
#[derive(Debug)]
pub struct GgmlKernels {
    isa: Isa,
    /// As the quantized kernels' table it matches (`ref`, `avx2`,
    /// `avx2-vnni`, `avx512-bw`, `avx512-vnni-half`, `avx512-vnni`).
    name: &'static str,
    /// What the table needs beyond its ISA (as the quantized kernels').
    needs: Needs,
    q2_k: DotQ8K,
    q3_k: DotQ8K,
    q4_k: DotQ8K,
    q5_k: DotQ8K,
    q6_k: DotQ8K,
    iq4_xs: DotQ8K,
    iq2_xxs: DotQ8K,
    iq2_xs: DotQ8K,
    iq3_xxs: DotQ8K,
    iq3_s: DotQ8K,
    iq1_s: DotQ8K,
    iq1_m: DotQ8K,
    iq2_s: DotQ8K,
    q8_0: DotQ8_0,
    q4_0: DotQ8_0,
    iq4_nl: DotQ8_0,
    q5_0: DotQ8_0,
    q4_1: DotQ8_0,
    q5_1: DotQ8_0,
    mxfp4: DotQ8_0,
    /// Multi-row decode kernels where the table has them (else one row at
    /// a time through the row dot above; the `_ref` of both is that).
    q2_k_rows: Option<RowsQ8K>,
    q4_k_rows: Option<RowsQ8K>,
    q6_k_rows: Option<RowsQ8K>,
    q3_k_rows: Option<RowsQ8K>,
    iq2_xxs_rows: Option<RowsQ8K>,
    iq2_xs_rows: Option<RowsQ8K>,
    iq3_xxs_rows: Option<RowsQ8K>,
    iq3_s_rows: Option<RowsQ8K>,
    q8_0_rows: Option<RowsQ8_0>,
    q4_0_rows: Option<RowsQ8_0>,
    iq4_nl_rows: Option<RowsQ8_0>,
    q5_0_rows: Option<RowsQ8_0>,
    q4_1_rows: Option<RowsQ8_0>,
    q5_1_rows: Option<RowsQ8_0>,
    mxfp4_rows: Option<RowsQ8_0>,
    /// The same on rows interleaved by sixteen ([`RowLayout`]), where the
    /// table reads them so (else such rows are put back in order first).
    q4_0_rows_interleaved: Option<RowsQ8_0>,
    iq4_nl_rows_interleaved: Option<RowsQ8_0>,
    mxfp4_rows_interleaved: Option<RowsQ8_0>,
    /// Q4_K's and IQ4_XS's on rows word-major by sixteen
    /// ([`RowLayout::Words16`]), for one or more tokens, each with the
    /// activation rows from which a product takes the tiles instead (which
    /// put each band back in row order first).
    q4_k_rows_words: Option<(RowsTokensQ8K, usize)>,
    iq4_xs_rows_words: Option<(RowsTokensQ8K, usize)>,
    /// Activation rows from which Q4_0 and IQ4_NL take the batched
    /// micro-kernel: [`BATCH_MIN`], or more where their multi-row kernel,
    /// run token by token, beats the tile on a few tokens.
    nibble_batch_min: usize,
    /// The same for Q8_0 (GGUF files' and the `q8` backbone's) against its
    /// one-row kernel.
    q8_0_batch_min: usize,
    /// The Q8_K activation quantizer.
    quantize_q8k: QuantizeQ8K,
    quantize_q8_0: QuantizeQ8_0,
    /// The batched micro-kernel of the k-quants ([`tile`]).
    gemm: GemmTile,
    /// The same for rows whose codes are all below 32 ([`tile::narrow`]),
    /// where the ISA has a cheaper one; else `gemm`.
    gemm_narrow: GemmTile,
    /// The same for rows with codes of 64 or more ([`tile::wide`]), where
    /// `gemm` cannot take them; else `gemm`.
    gemm_wide: GemmTile,
    /// The same for rows whose sub-blocks share scales in pairs
    /// ([`tile::paired`]), where the ISA has a cheaper one.
    gemm_paired: Option<GemmTile>,
    /// Their rows decoded for it.
    unpack: Unpack,
    /// The batched micro-kernel of Q8_0 ([`tile::q8_0`]), where the ISA
    /// has one.
    gemm_q8_0: Option<GemmTileQ8_0>,
    /// The same for the types paired with Q8_K activations (IQ4_XS), whose
    /// tiles' scales are one per eight blocks, where the ISA has a cheaper
    /// one ([`tile::q8_0::gemm_tile_q8_0_vnni_q8k`]).
    gemm_q8_0_q8k: Option<GemmTileQ8_0>,
    /// Its rows decoded for it ([`tile::q8_0::unpack_row_of`]).
    unpack_q8_0: tile::q8_0::UnpackQ8_0,
}

/// The `_ref` dot products over row bytes.
mod by_bytes {
    use super::super::act::BlockQ8K;
    use super::super::legacy::BlockQ8_0;
    use super::reference::*;

    macro_rules! refs {
        ($($name:ident = $f:ident($act:ty);)*) => {$(
            pub(super) fn $name(row: &[u8], acts: &[$act]) -> f32 {
                $f(crate::ggml::blocks(row).expect("a ggml row holds whole blocks"), acts)
            }
        )*};
    }
    refs! {
        q2_k = vec_dot_q2_k_q8k_ref(BlockQ8K);
        q3_k = vec_dot_q3_k_q8k_ref(BlockQ8K);
        q4_k = vec_dot_q4_k_q8k_ref(BlockQ8K);
        q5_k = vec_dot_q5_k_q8k_ref(BlockQ8K);
        q6_k = vec_dot_q6_k_q8k_ref(BlockQ8K);
        iq4_xs = vec_dot_iq4_xs_q8k_ref(BlockQ8K);
        iq2_xxs = vec_dot_iq2_xxs_q8k_ref(BlockQ8K);
        iq2_xs = vec_dot_iq2_xs_q8k_ref(BlockQ8K);
        iq3_xxs = vec_dot_iq3_xxs_q8k_ref(BlockQ8K);
        iq3_s = vec_dot_iq3_s_q8k_ref(BlockQ8K);
        iq1_s = vec_dot_iq1_s_q8k_ref(BlockQ8K);
        iq1_m = vec_dot_iq1_m_q8k_ref(BlockQ8K);
        iq2_s = vec_dot_iq2_s_q8k_ref(BlockQ8K);
        q8_0 = vec_dot_q8_0_q8_0_ref(BlockQ8_0);
        q4_0 = vec_dot_q4_0_q8_0_ref(BlockQ8_0);
        iq4_nl = vec_dot_iq4_nl_q8_0_ref(BlockQ8_0);
        q5_0 = vec_dot_q5_0_q8_0_ref(BlockQ8_0);
        q4_1 = vec_dot_q4_1_q8_0_ref(BlockQ8_0);
        q5_1 = vec_dot_q5_1_q8_0_ref(BlockQ8_0);
        mxfp4 = vec_dot_mxfp4_q8_0_ref(BlockQ8_0);
    }
}

static REF: GgmlKernels = GgmlKernels {
    isa: Isa::Ref,
    name: "ref",
    needs: Needs::Isa,
    q2_k: by_bytes::q2_k,
    q3_k: by_bytes::q3_k,
    q4_k: by_bytes::q4_k,
    q5_k: by_bytes::q5_k,
    q6_k: by_bytes::q6_k,
    iq4_xs: by_bytes::iq4_xs,
    iq2_xxs: by_bytes::iq2_xxs,
    iq2_xs: by_bytes::iq2_xs,
    iq3_xxs: by_bytes::iq3_xxs,
    iq3_s: by_bytes::iq3_s,
    iq1_s: by_bytes::iq1_s,
    iq1_m: by_bytes::iq1_m,
    iq2_s: by_bytes::iq2_s,
    q8_0: by_bytes::q8_0,
    q4_0: by_bytes::q4_0,
    iq4_nl: by_bytes::iq4_nl,
    q5_0: by_bytes::q5_0,
    q4_1: by_bytes::q4_1,
    q5_1: by_bytes::q5_1,
    mxfp4: by_bytes::mxfp4,
    q4_k_rows: None,
    q6_k_rows: None,
    q2_k_rows: None,
    q3_k_rows: None,
    iq2_xxs_rows: None,
    iq2_xs_rows: None,
    iq3_xxs_rows: None,
    iq3_s_rows: None,
    q8_0_rows: None,
    q4_0_rows: None,
    iq4_nl_rows: None,
    q5_0_rows: None,
    q4_1_rows: None,
    q5_1_rows: None,
    mxfp4_rows: None,
    q4_0_rows_interleaved: None,
    iq4_nl_rows_interleaved: None,
    mxfp4_rows_interleaved: None,
    q4_k_rows_words: None,
    iq4_xs_rows_words: None,
    nibble_batch_min: BATCH_MIN,
    q8_0_batch_min: BATCH_MIN,
    quantize_q8k: super::act::quantize_row_q8_k_ref,
    quantize_q8_0: super::act::quantize_row_q8_0_ref,
    gemm: tile::reference::gemm_tile_ref,
    gemm_narrow: tile::reference::gemm_tile_ref,
    gemm_wide: tile::reference::gemm_tile_ref,
    gemm_paired: None,
    unpack: tile::unpack_row_ref,
    gemm_q8_0: Some(tile::q8_0::gemm_tile_q8_0_ref),
    gemm_q8_0_q8k: None,
    unpack_q8_0: tile::q8_0::unpack_row_of_ref,
};

#[cfg(target_arch = "x86_64")]
static AVX2: GgmlKernels = GgmlKernels {
    isa: Isa::Avx2,
    name: "avx2",
    needs: Needs::Isa,
    q2_k: avx2::q2_k_q8k,
    q3_k: avx2::q3_k_q8k,
    q4_k: avx2::q4_k_q8k,
    q5_k: avx2::q5_k_q8k,
    q6_k: avx2::q6_k_q8k,
    iq4_xs: avx2::iq4_xs_q8k,
    iq2_xxs: avx2_iq::iq2_xxs_q8k,
    iq2_xs: avx2_iq::iq2_xs_q8k,
    iq3_xxs: avx2_iq::iq3_xxs_q8k,
    iq3_s: avx2_iq::iq3_s_q8k,
    iq1_s: avx2_iq::iq1_s_q8k,
    iq1_m: avx2_iq::iq1_m_q8k,
    iq2_s: avx2_iq::iq2_s_q8k,
    q8_0: avx2::q8_0_q8_0,
    q4_0: avx2::q4_0_q8_0,
    iq4_nl: avx2::iq4_nl_q8_0,
    q5_0: avx2::q5_0_q8_0,
    q4_1: avx2::q4_1_q8_0,
    q5_1: avx2::q5_1_q8_0,
    mxfp4: avx2::mxfp4_q8_0,
    q4_k_rows: Some(avx2::q4_k_rows_q8k),
    q6_k_rows: Some(avx2::q6_k_rows_q8k),
    q2_k_rows: None,
    q3_k_rows: Some(avx2::q3_k_rows_q8k),
    iq2_xxs_rows: None,
    iq2_xs_rows: None,
    iq3_xxs_rows: None,
    iq3_s_rows: None,
    q8_0_rows: Some(avx2::q8_0_rows_q8_0),
    q4_0_rows: Some(avx2::q4_0_rows8_q8_0),
    iq4_nl_rows: Some(avx2::iq4_nl_rows8_q8_0),
    q5_0_rows: Some(avx2::q5_0_rows8_q8_0),
    q4_1_rows: Some(avx2::q4_1_rows8_q8_0),
    q5_1_rows: Some(avx2::q5_1_rows8_q8_0),
    mxfp4_rows: Some(avx2::mxfp4_rows8_q8_0),
    q4_0_rows_interleaved: Some(avx2::q4_0_rows8_interleaved_q8_0),
    iq4_nl_rows_interleaved: Some(avx2::iq4_nl_rows8_interleaved_q8_0),
    mxfp4_rows_interleaved: Some(avx2::mxfp4_rows8_interleaved_q8_0),
    // The word-major kernels, three or four tokens per decoded column,
    // against the tiles (on the rows put back in order), one core,
    // resident, per token: 1.15-1.3 x at 32 tokens (two a column),
    // 1.08-1.17 x at 120 against 128 (docs/BENCH.md, "Word-major
    // products for several tokens at once")
    q4_k_rows_words: Some((avx2::q4_k_rows16_words_q8k, 128)),
    iq4_xs_rows_words: Some((avx2::iq4_xs_rows16_words_q8k, 128)),
    // Rows token by token against the tile on this table, one core,
    // streaming, GB/s x tokens (docs/BENCH.md, "A few tokens on the AVX2
    // table"): Q4_0 2.5-3.2 x at 4 tokens, 1.15-1.4 x at 12, 1.0-1.15 x
    // at 16; IQ4_NL 2.2-2.4 x at 4, 1.1 x at 12, 0.8 x at 16; Q8_0
    // 1.5-1.7 x at 4, 0.85-0.95 x at 6.
    nibble_batch_min: 16,
    q8_0_batch_min: 6,
    quantize_q8k: act_simd::quantize_row_q8k_avx2,
    quantize_q8_0: act_simd::quantize_row_q8_0_avx2,
    gemm: tile::avx2::gemm_tile,
    gemm_narrow: tile::avx2::gemm_tile_narrow,
    gemm_wide: tile::avx2::gemm_tile_wide,
    gemm_paired: None,
    unpack: tile::avx2::unpack_row,
    gemm_q8_0: Some(tile::q8_0::gemm_tile_q8_0_avx2),
    gemm_q8_0_q8k: None,
    unpack_q8_0: tile::q8_0::unpack_row_of_avx2,
};

/// AVX2 with AVX-VNNI (`quant`'s `avx2-vnni`): the AVX2 kernels, and on
/// [`avx2::AvxVnniMac`] those of Q8_0, Q4_0 and IQ4_NL, and both batched tiles,
/// where `vpdpbusd` beat the pair `vpmaddubsw`, `vpmaddwd` (docs/BENCH.md,
/// "AVX-VNNI"; Q4_K's decode measured no gain).
#[cfg(target_arch = "x86_64")]
static AVX2_VNNI: GgmlKernels = GgmlKernels {
    name: "avx2-vnni",
    needs: Needs::AvxVnni,
    q8_0: avx2::q8_0_q8_0_avx_vnni,
    iq4_nl: avx2::iq4_nl_q8_0_avx_vnni,
    q8_0_rows: Some(avx2::q8_0_rows_q8_0_avx_vnni),
    iq4_nl_rows: Some(avx2::iq4_nl_rows8_q8_0_avx_vnni),
    iq4_nl_rows_interleaved: Some(avx2::iq4_nl_rows8_interleaved_q8_0_avx_vnni),
    mxfp4_rows_interleaved: Some(avx2::mxfp4_rows8_interleaved_q8_0_avx_vnni),
    q4_0: avx2::q4_0_q8_0_avx_vnni,
    q4_0_rows: Some(avx2::q4_0_rows8_q8_0_avx_vnni),
    q4_0_rows_interleaved: Some(avx2::q4_0_rows8_interleaved_q8_0_avx_vnni),
    q5_0: avx2::q5_0_q8_0_avx_vnni,
    q4_1: avx2::q4_1_q8_0_avx_vnni,
    q5_1: avx2::q5_1_q8_0_avx_vnni,
    mxfp4: avx2::mxfp4_q8_0_avx_vnni,
    q5_0_rows: Some(avx2::q5_0_rows8_q8_0_avx_vnni),
    q4_1_rows: Some(avx2::q4_1_rows8_q8_0_avx_vnni),
    q5_1_rows: Some(avx2::q5_1_rows8_q8_0_avx_vnni),
    mxfp4_rows: Some(avx2::mxfp4_rows8_q8_0_avx_vnni),
    gemm: tile::avx2::gemm_tile_avx_vnni,
    gemm_narrow: tile::avx2::gemm_tile_avx_vnni,
    gemm_wide: tile::avx2::gemm_tile_avx_vnni,
    gemm_q8_0: Some(tile::q8_0::gemm_tile_q8_0_avx_vnni),
    // the tile on `vpdpbusd` was measured against these rows on Zen 5 only
    nibble_batch_min: BATCH_MIN,
    q8_0_batch_min: BATCH_MIN,
    ..AVX2
};

/// AVX-512 without VNNI: the AVX2 row kernels (AVX-512 implies AVX2) and
/// the 512-bit multi-row ones with `vpmaddwd`.
#[cfg(target_arch = "x86_64")]
static AVX512: GgmlKernels = GgmlKernels {
    isa: Isa::Avx512,
    name: "avx512-bw",
    q4_k_rows: Some(avx512::q4_k_rows_bw),
    q6_k_rows: Some(avx512::q6_k_rows_bw),
    q2_k_rows: Some(avx512::q2_k_rows_bw),
    q3_k_rows: Some(avx512::q3_k_rows_bw),
    nibble_batch_min: BATCH_MIN,
    q8_0_batch_min: BATCH_MIN,
    quantize_q8k: act_simd::quantize_row_q8k_avx512,
    quantize_q8_0: act_simd::quantize_row_q8_0_avx2,
    iq3_xxs: avx512_iq::iq3_xxs_bw,
    iq2_xxs: avx512_iq::iq2_xxs_bw,
    iq2_xs: avx512_iq::iq2_xs_bw,
    iq3_s: avx512_iq::iq3_s_bw,
    ..AVX2
};

/// How far ahead [`AVX512_VNNI`]'s word-major kernels ask for their lines,
/// in bytes: on Zen 5 the hardware's prefetch alone left their one stream
/// at 0.62 (Q4_K) and 0.75 (IQ4_XS) x a plain read in decode, their
/// arithmetic being 1.6-1.9 x it; asked 4.5-9 KiB ahead they reach 0.9-1.05
/// x, 18 KiB falls back (docs/BENCH.md, "Zen 5: kernels and side by side,
/// and word-major decode with a software prefetch"). Zen 4's table keeps
/// none: not measured there.
#[cfg(target_arch = "x86_64")]
const WORDS_AHEAD: usize = 8 << 10;

#[cfg(target_arch = "x86_64")]
static AVX512_VNNI: GgmlKernels = GgmlKernels {
    isa: Isa::Avx512,
    name: "avx512-vnni",
    needs: Needs::Avx512Vnni,
    // per-16 scales: the AVX2 kernels (see avx512.rs)
    q2_k: avx2::q2_k_q8k,
    q3_k: avx2::q3_k_q8k,
    q4_k: avx512::q4_k_q8k,
    q5_k: avx512::q5_k_q8k,
    q6_k: avx2::q6_k_q8k,
    iq4_xs: avx512::iq4_xs_q8k,
    iq2_xxs: avx512_iq::iq2_xxs_vbmi,
    iq2_xs: avx512_iq::iq2_xs_vbmi,
    iq3_xxs: avx512_iq::iq3_xxs_vbmi,
    iq3_s: avx512_iq::iq3_s_vbmi,
    iq1_s: avx512::iq1_s_q8k,
    iq1_m: avx512::iq1_m_q8k,
    iq2_s: avx2_iq::iq2_s_q8k,
    q8_0: avx512::q8_0_q8_0,
    q4_0: avx512::q4_0_q8_0,
    iq4_nl: avx512::iq4_nl_q8_0,
    q5_0: avx512::q5_0_q8_0,
    q4_1: avx512::q4_1_q8_0,
    q5_1: avx512::q5_1_q8_0,
    mxfp4: avx512::mxfp4_q8_0,
    q4_k_rows: Some(avx512::q4_k_rows_vnni),
    q6_k_rows: Some(avx512::q6_k_rows_vnni),
    q2_k_rows: Some(avx512::q2_k_rows_vnni),
    q3_k_rows: Some(avx512::q3_k_rows_vnni),
    iq2_xxs_rows: Some(avx512_iq::iq2_xxs_rows_vbmi),
    iq2_xs_rows: Some(avx512_iq::iq2_xs_rows_vbmi),
    iq3_xxs_rows: Some(avx512_iq::iq3_xxs_rows_vbmi),
    iq3_s_rows: Some(avx512_iq::iq3_s_rows_vbmi),
    // its 512-bit one-row kernel (not measured against these)
    q8_0_rows: None,
    q4_0_rows: Some(avx512::q4_0_rows16_vnni),
    iq4_nl_rows: Some(avx512::iq4_nl_rows16_vnni),
    q5_0_rows: Some(avx512::q5_0_rows16_vnni),
    q4_1_rows: Some(avx512::q4_1_rows16_vnni),
    q5_1_rows: Some(avx512::q5_1_rows16_vnni),
    mxfp4_rows: Some(avx512::mxfp4_rows16_vnni),
    q4_0_rows_interleaved: Some(avx512::q4_0_rows16_interleaved_vnni),
    iq4_nl_rows_interleaved: Some(avx512::iq4_nl_rows16_interleaved_vnni),
    mxfp4_rows_interleaved: Some(avx512::mxfp4_rows16_interleaved_vnni),
    // the same on VNNI, four tokens per column: IQ4_XS 1.7-1.9 x at 16
    // tokens, both 1.0-1.3 x at 64, level at 128
    q4_k_rows_words: Some((avx512::q4_k_rows16_words_vnni::<WORDS_AHEAD>, 128)),
    iq4_xs_rows_words: Some((avx512::iq4_xs_rows16_words_vnni::<WORDS_AHEAD>, 128)),
    // the sixteen-row kernels token by token: 4 tokens 1.2-1.4 x the
    // tile, 5 tokens 1.0-1.1 x, 6 tokens 0.8-0.9 x (docs/BENCH.md, "A few
    // tokens through the multi-row kernels")
    nibble_batch_min: 6,
    q8_0_batch_min: BATCH_MIN,
    quantize_q8k: act_simd::quantize_row_q8k_avx512,
    quantize_q8_0: act_simd::quantize_row_q8_0_avx2,
    gemm: tile::avx512::gemm_tile,
    gemm_narrow: tile::avx512::gemm_tile,
    gemm_wide: tile::avx512::gemm_tile,
    gemm_paired: Some(tile::avx512::gemm_tile_paired),
    unpack: avx512_iq::unpack_row_vbmi,
    gemm_q8_0: Some(tile::q8_0::gemm_tile_q8_0_vnni),
    gemm_q8_0_q8k: Some(tile::q8_0::gemm_tile_q8_0_vnni_q8k),
    unpack_q8_0: tile::q8_0::unpack_row_of_avx2,
};

/// [`AVX512_VNNI`] for CPUs that run a 512-bit operation as two 256-bit
/// halves ([`halves_512`], AMD Zen 4): there the 512-bit multi-row
/// kernels of Q3_K, Q4_K and Q6_K and the 512-bit Q4_K row kernel, built
/// for full-width units, lose to the AVX2 ones (docs/BENCH.md, "GGUF
/// kernels on a CPU that splits 512-bit operations"), so this table takes
/// the AVX2 Q4_K kernels and, for Q3_K and Q6_K decode, the AVX2 one-row
/// bodies on 256-bit VNNI + GFNI ([`avx512::VnniGfniMac`]: docs/BENCH.md,
/// "K-quant decode on 256-bit VNNI and GFNI"), those two decoding rows and
/// the word-major kernels with no software prefetch ([`WORDS_AHEAD`]); the
/// rest as [`AVX512_VNNI`].
#[cfg(target_arch = "x86_64")]
static AVX512_VNNI_HALF: GgmlKernels = GgmlKernels {
    name: "avx512-vnni-half",
    q4_k: avx2::q4_k_q8k,
    q4_k_rows: Some(avx2::q4_k_rows_q8k),
    q6_k_rows: Some(avx512::q6_k_rows_vnni256),
    q2_k_rows: None,
    q3_k_rows: Some(avx512::q3_k_rows_vnni256),
    q4_k_rows_words: Some((avx512::q4_k_rows16_words_vnni::<0>, 128)),
    iq4_xs_rows_words: Some((avx512::iq4_xs_rows16_words_vnni::<0>, 128)),
    ..AVX512_VNNI
};

#[cfg(target_arch = "x86_64")]
static ALL: [&GgmlKernels; 6] = [
    &REF,
    &AVX2,
    &AVX2_VNNI,
    &AVX512,
    &AVX512_VNNI_HALF,
    &AVX512_VNNI,
];
#[cfg(not(target_arch = "x86_64"))]
static ALL: [&GgmlKernels; 1] = [&REF];

/// The activation blocks `ty`'s integer dot product takes, or `None` where
/// `ty` has no integer kernel (it runs the exact decode + f32 dot path).
pub fn pairing(ty: GgmlType) -> Option<Pairing> {
    match ty {
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::IQ4_XS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M
        | GgmlType::IQ2_S => Some(Pairing::Q8K),
        GgmlType::Q8_0
        | GgmlType::Q4_0
        | GgmlType::IQ4_NL
        | GgmlType::Q5_0
        | GgmlType::Q4_1
        | GgmlType::Q5_1
        | GgmlType::MXFP4 => Some(Pairing::Q8_0),
        _ => None,
    }
}

/// Whether `ty` has an integer kernel here.
pub fn has_kernel(ty: GgmlType) -> bool {
    pairing(ty).is_some()
}

impl GgmlKernels {
    /// Every table this CPU runs, slowest first (as `quant::Kernels::variants`).
    pub fn variants() -> Vec<&'static GgmlKernels> {
        ALL.iter()
            .copied()
            .filter(|k| k.isa.available() && k.needs.available())
            .collect()
    }

    /// The table this CPU runs for `isa`: its fastest variant, which on a
    /// CPU that splits 512-bit operations ([`halves_512`]) is
    /// [`AVX512_VNNI_HALF`].
    pub fn for_isa(isa: Isa) -> Option<&'static GgmlKernels> {
        #[cfg(target_arch = "x86_64")]
        let half = Some(&AVX512_VNNI_HALF);
        #[cfg(not(target_arch = "x86_64"))]
        let half = None;
        fastest_for(Self::variants(), isa, |k| k.isa, half)
    }

    /// [`kernels`] where it is of `isa` (so that `WASTE_KERNELS` holds for
    /// every caller), else [`GgmlKernels::for_isa`]: the table the products
    /// of a per-ISA caller (the dense kernels' tables) take.
    pub fn for_isa_chosen(isa: Isa) -> Option<&'static GgmlKernels> {
        let chosen = kernels();
        if chosen.isa == isa {
            Some(chosen)
        } else {
            Self::for_isa(isa)
        }
    }

    /// The table of that name, if this CPU runs it.
    pub fn by_name(name: &str) -> Option<&'static GgmlKernels> {
        Self::variants().into_iter().find(|k| k.name == name)
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The table's name (that of the quantized kernels' table it matches).
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn row_dot(&self, ty: GgmlType) -> Option<RowDot> {
        Some(match ty {
            GgmlType::Q2_K => RowDot::Q8K(self.q2_k),
            GgmlType::Q3_K => RowDot::Q8K(self.q3_k),
            GgmlType::Q4_K => RowDot::Q8K(self.q4_k),
            GgmlType::Q5_K => RowDot::Q8K(self.q5_k),
            GgmlType::Q6_K => RowDot::Q8K(self.q6_k),
            GgmlType::IQ4_XS => RowDot::Q8K(self.iq4_xs),
            GgmlType::IQ2_XXS => RowDot::Q8K(self.iq2_xxs),
            GgmlType::IQ2_XS => RowDot::Q8K(self.iq2_xs),
            GgmlType::IQ3_XXS => RowDot::Q8K(self.iq3_xxs),
            GgmlType::IQ3_S => RowDot::Q8K(self.iq3_s),
            GgmlType::IQ1_S => RowDot::Q8K(self.iq1_s),
            GgmlType::IQ1_M => RowDot::Q8K(self.iq1_m),
            GgmlType::IQ2_S => RowDot::Q8K(self.iq2_s),
            GgmlType::Q8_0 => RowDot::Q8_0(self.q8_0),
            GgmlType::Q4_0 => RowDot::Q8_0(self.q4_0),
            GgmlType::IQ4_NL => RowDot::Q8_0(self.iq4_nl),
            GgmlType::Q5_0 => RowDot::Q8_0(self.q5_0),
            GgmlType::Q4_1 => RowDot::Q8_0(self.q4_1),
            GgmlType::Q5_1 => RowDot::Q8_0(self.q5_1),
            GgmlType::MXFP4 => RowDot::Q8_0(self.mxfp4),
            _ => return None,
        })
    }

    fn rows(&self, ty: GgmlType) -> Option<Rows> {
        match ty {
            GgmlType::Q2_K => self.q2_k_rows.map(Rows::Q8K),
            GgmlType::Q4_K => self.q4_k_rows.map(Rows::Q8K),
            GgmlType::Q6_K => self.q6_k_rows.map(Rows::Q8K),
            GgmlType::Q3_K => self.q3_k_rows.map(Rows::Q8K),
            GgmlType::IQ2_XXS => self.iq2_xxs_rows.map(Rows::Q8K),
            GgmlType::IQ2_XS => self.iq2_xs_rows.map(Rows::Q8K),
            GgmlType::IQ3_XXS => self.iq3_xxs_rows.map(Rows::Q8K),
            GgmlType::IQ3_S => self.iq3_s_rows.map(Rows::Q8K),
            GgmlType::Q8_0 => self.q8_0_rows.map(Rows::Q8_0),
            GgmlType::Q4_0 => self.q4_0_rows.map(Rows::Q8_0),
            GgmlType::IQ4_NL => self.iq4_nl_rows.map(Rows::Q8_0),
            GgmlType::Q5_0 => self.q5_0_rows.map(Rows::Q8_0),
            GgmlType::Q4_1 => self.q4_1_rows.map(Rows::Q8_0),
            GgmlType::Q5_1 => self.q5_1_rows.map(Rows::Q8_0),
            GgmlType::MXFP4 => self.mxfp4_rows.map(Rows::Q8_0),
            _ => None,
        }
    }

    /// The word-major kernel of `ty` and its tiles' threshold, where the
    /// table has one.
    fn words(&self, ty: GgmlType) -> Option<(RowsTokensQ8K, usize)> {
        match ty {
            GgmlType::Q4_K => self.q4_k_rows_words,
            GgmlType::IQ4_XS => self.iq4_xs_rows_words,
            _ => None,
        }
    }

    /// The multi-row kernel of `ty` that reads rows as `layout` lays them,
    /// where the table has one.
    fn rows_laid(&self, ty: GgmlType, layout: RowLayout) -> Option<Rows> {
        match (layout, ty) {
            (RowLayout::RowMajor, _) => self.rows(ty),
            (RowLayout::Interleaved16, GgmlType::Q4_0) => {
                self.q4_0_rows_interleaved.map(Rows::Q8_0)
            }
            (RowLayout::Interleaved16, GgmlType::IQ4_NL) => {
                self.iq4_nl_rows_interleaved.map(Rows::Q8_0)
            }
            (RowLayout::Interleaved16, GgmlType::MXFP4) => {
                self.mxfp4_rows_interleaved.map(Rows::Q8_0)
            }
            (RowLayout::Words16, _) => self.words(ty).map(|(f, _)| Rows::Q8K(f)),
            (RowLayout::Interleaved16, _) => None,
        }
    }

    /// `out[r] = row r · acts[0]` for the `out.len()` rows of `rb` bytes at
    /// the start of `w` and the first activation row: the table's
    /// multi-row kernel where it has one for `ty`, else row by row. Panics
    /// if `ty` has no kernel or the shapes disagree.
    pub fn rows_dot_act(
        &self,
        ty: GgmlType,
        w: &[u8],
        rb: usize,
        acts: &GgmlActs,
        out: &mut [f32],
    ) {
        self.rows_dot_token(ty, RowLayout::RowMajor, w, rb, acts, 0, out);
    }

    /// [`Self::rows_dot_act`] with activation row `t`, on rows laid as
    /// `layout` (from a group's first row; interleaved only where
    /// [`Self::rows_laid`] has a kernel).
    #[allow(clippy::too_many_arguments)]
    fn rows_dot_token(
        &self,
        ty: GgmlType,
        layout: RowLayout,
        w: &[u8],
        rb: usize,
        acts: &GgmlActs,
        t: usize,
        out: &mut [f32],
    ) {
        let (qk, size) = ty.block().expect("a known type");
        assert_eq!(rb, acts.cols / qk * size, "row and activations disagree");
        assert!(t < acts.n && w.len() >= out.len() * rb, "too few rows");
        let Some(f) = self.rows_laid(ty, layout) else {
            assert_eq!(layout, RowLayout::RowMajor, "a kernel for the layout");
            let f = self.row_dot(ty).expect("a type with an integer kernel");
            for (r, o) in out.iter_mut().enumerate() {
                // SAFETY: a `GgmlKernels` is only handed out by `variants`,
                // which checked that this CPU runs its ISA (and VNNI for
                // that table); the row holds as many blocks as each
                // activation row (asserted).
                *o = unsafe { f.token(&w[r * rb..][..rb], acts, t) };
            }
            return;
        };
        // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
        // checked that this CPU runs its ISA (and VNNI for that table); `w`
        // holds out.len() rows of as many blocks as the activation row
        // (asserted).
        unsafe { f.call(&w[..out.len() * rb], rb, acts, t, out) }
    }

    /// One weight row of `ty` decoded for the batched micro-kernel by this
    /// table's unpacker (what [`tile::unpack_row`] specifies). Panics if
    /// `ty` does not unpack ([`tile::unpacks`]) or the lengths disagree.
    pub fn unpack_row(&self, ty: GgmlType, row: &[u8], out: &mut [Unpacked]) {
        assert!(tile::unpacks(ty), "{ty} has no batched kernel");
        // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
        // checked that this CPU runs its ISA.
        unsafe { (self.unpack)(ty, row, out) }
    }

    /// One weight row of `ty` decoded for the Q8_0 micro-kernel by this
    /// table's unpacker (what [`tile::q8_0::unpack_row_of`] specifies).
    /// Panics if `ty` does not unpack so or the lengths disagree.
    pub fn unpack_row_q8_0(&self, ty: GgmlType, row: &[u8], out: &mut [tile::q8_0::UnpackedQ8_0]) {
        assert!(
            tile::q8_0::unpacks(ty),
            "{ty} has no Q8_0-paired batched kernel"
        );
        // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
        // checked that this CPU runs its ISA.
        unsafe { (self.unpack_q8_0)(ty, row, out) }
    }

    /// `x` (a multiple of 256 long) as Q8_K blocks into `y`, bit for bit
    /// [`quantize_row_q8_k_ref`](super::act::quantize_row_q8_k_ref)'s.
    pub fn quantize_row_q8k(&self, x: &[f32], y: &mut [BlockQ8K]) {
        // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
        // checked that this CPU runs its ISA; the quantizer checks lengths.
        unsafe { (self.quantize_q8k)(x, y) }
    }

    /// `x` as Q8_0 blocks into `y`, bit for bit
    /// [`quantize_row_q8_0_ref`](super::act::quantize_row_q8_0_ref)'s.
    pub fn quantize_row_q8_0(&self, x: &[f32], y: &mut [BlockQ8_0]) {
        // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
        // checked that this CPU runs its ISA; the quantizer checks lengths.
        unsafe { (self.quantize_q8_0)(x, y) }
    }

    /// `x` (n, cols) quantized into `acts` for `pairing` by this table's
    /// quantizers (the same blocks as [`GgmlActs::quantize`]).
    pub fn quantize(
        &self,
        acts: &mut GgmlActs,
        pairing: Pairing,
        x: &[f32],
        n: usize,
        cols: usize,
    ) {
        acts.quantize_by(
            pairing,
            x,
            n,
            cols,
            |x, y| self.quantize_row_q8k(x, y),
            |x, y| self.quantize_row_q8_0(x, y),
        );
    }

    /// `out[t] = row · acts[t]` for one row of `ty` and every activation row.
    /// Panics if `ty` has no kernel or the shapes disagree.
    pub fn row_dot_acts(&self, ty: GgmlType, row: &[u8], acts: &GgmlActs, out: &mut [f32]) {
        let f = self.row_dot(ty).expect("a type with an integer kernel");
        let (qk, size) = ty.block().expect("a known type");
        assert_eq!(
            row.len(),
            acts.cols / qk * size,
            "row and activations disagree"
        );
        for (t, o) in out.iter_mut().enumerate().take(acts.n) {
            // SAFETY: a `GgmlKernels` is only handed out by `variants`, which
            // checked that this CPU runs its ISA (and VNNI for that table);
            // the row holds as many blocks as each activation row (asserted).
            *o = unsafe { f.token(row, acts, t) };
        }
    }
}

/// The ggml kernels every caller uses: where `WASTE_KERNELS` forces the
/// quantized kernels' choice ([`crate::quant::kernels`]), the table of that
/// name; unforced, the table [`GgmlKernels::for_isa`] gives for that ISA (on a
/// CPU that splits 512-bit operations, [`AVX512_VNNI_HALF`]).
pub fn kernels() -> &'static GgmlKernels {
    static CHOSEN: OnceLock<&'static GgmlKernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let k = crate::quant::kernels();
        let forced = std::env::var_os("WASTE_KERNELS")
            .is_some()
            .then(|| GgmlKernels::by_name(k.name()))
            .flatten();
        forced
            .or_else(|| GgmlKernels::for_isa(k.isa()))
            .unwrap_or(&REF)
    })
}

/// The table a CPU runs for `isa` among `variants` (this CPU's, slowest
/// first; `isa_of` a table's ISA): the last of `isa`, except that on a CPU
/// that splits 512-bit operations ([`halves_512`]) the AVX-512 one is
/// `half` where that is among them. The one rule of both kernel families'
/// tables (`quant::Kernels`, [`GgmlKernels`]).
pub(crate) fn fastest_for<T>(
    variants: Vec<&'static T>,
    isa: Isa,
    isa_of: fn(&T) -> Isa,
    half: Option<&'static T>,
) -> Option<&'static T> {
    if isa == Isa::Avx512
        && halves_512()
        && let Some(half) = half.filter(|h| variants.iter().any(|k| std::ptr::eq(*k, *h)))
    {
        return Some(half);
    }
    variants.into_iter().rev().find(|k| isa_of(k) == isa)
}

/// Whether this CPU runs a 512-bit vector operation as two 256-bit
/// halves: AMD's family 19h with AVX-512 (Zen 4; Zen 5, family 1Ah, has
/// full-width units, as have Intel's AVX-512 server cores).
///
/// Asked once: `cpuid` traps to the hypervisor on a VM, and the dense
/// products reach this through [`GgmlKernels::for_isa`].
pub fn halves_512() -> bool {
    static HALVES: OnceLock<bool> = OnceLock::new();
    *HALVES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__cpuid;
            let (vendor, id) = (__cpuid(0), __cpuid(1));
            let amd =
                (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            let base = (id.eax >> 8) & 0xf;
            let family = if base == 0xf {
                base + ((id.eax >> 20) & 0xff)
            } else {
                base
            };
            amd && family == 0x19 && is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Rows per rayon task (as `crate::par`'s); a multiple of [`ROWS`].
const ROWS_PER_TASK: usize = 32;
const _: () = assert!(ROWS_PER_TASK.is_multiple_of(ROWS));

/// Activation rows from which a k-quant product takes the batched
/// micro-kernel ([`tile`]): below it, decoding each weight row once per
/// tile costs more than it saves (`waste bench kernels --n`).
pub const BATCH_MIN: usize = 4;

thread_local! {
    /// Quantized activations, reused across products on this thread (held
    /// across the product's rayon tasks: a stash, for nested products).
    static ACTS: Stash<GgmlActs> = const { Stash::new() };
    /// Activation tiles of the batched path.
    static TILES: Stash<Vec<ActTile>> = const { Stash::new() };
    /// Q8_0 activation tiles of the batched path.
    static TILES_Q8_0: Stash<Vec<ActTileQ8_0>> = const { Stash::new() };
    /// Their per-block `d_a · Σ a`, for the types with mins.
    static SUMS_Q8_0: Stash<Vec<f32>> = const { Stash::new() };
    /// [`ROWS`] weight rows unpacked, on each worker thread.
    static UNPACKED: Cell<Vec<Unpacked>> = const { Cell::new(Vec::new()) };
    /// [`ROWS`] Q8_0 weight rows unpacked, on each worker thread.
    static UNPACKED_Q8_0: Cell<Vec<UnpackedQ8_0>> = const { Cell::new(Vec::new()) };
    /// A band of interleaved rows put back in order ([`in_order`]).
    static IN_ORDER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on `band` (rows of `rb` bytes laid as `layout`, from a group's
/// first row) as a kernel reads it: as it is where `native` (the kernel
/// reads that layout), else with the rows put back in order.
fn in_order<R>(
    ty: GgmlType,
    layout: RowLayout,
    native: bool,
    band: &[u8],
    rb: usize,
    f: impl FnOnce(&[u8], RowLayout) -> R,
) -> R {
    if layout == RowLayout::RowMajor || native {
        return f(band, layout);
    }
    let (_, bs) = ty.block().expect("a known type");
    let mut rows = IN_ORDER.take();
    layout::to_row_major_into(layout, band, rb, bs, &mut rows);
    let r = f(&rows, RowLayout::RowMajor);
    IN_ORDER.set(rows);
    r
}

/// The activations of a batched product, packed for its micro-kernel.
#[derive(Debug, Clone, Copy)]
enum Tiles<'a> {
    /// One token at a time through the row kernels.
    Rows,
    KQuant(&'a [ActTile]),
    /// The tiles, and for a type with mins ([`tile::q8_0::has_min`])
    /// their [`tile::q8_0::act_sums`] (else empty).
    Q8_0(&'a [ActTileQ8_0], &'a [f32]),
}

impl GgmlKernels {
    /// The batched micro-kernel that multiplies `ty`'s unpacked rows exactly.
    fn gemm_for(&self, ty: GgmlType) -> GemmTile {
        if tile::paired(ty)
            && let Some(g) = self.gemm_paired
        {
            g
        } else if tile::narrow(ty) {
            self.gemm_narrow
        } else if tile::wide(ty) {
            self.gemm_wide
        } else {
            self.gemm
        }
    }

    /// Whether a product of n activation rows with a `ty` matrix takes a
    /// batched micro-kernel of this table.
    pub fn batched(&self, ty: GgmlType, n: usize) -> bool {
        self.batched_laid(ty, RowLayout::RowMajor, n)
    }

    /// [`Self::batched`] for rows laid as `layout`.
    fn batched_laid(&self, ty: GgmlType, layout: RowLayout, n: usize) -> bool {
        let min = match (ty, layout) {
            (GgmlType::Q4_0 | GgmlType::IQ4_NL | GgmlType::MXFP4, _) => self.nibble_batch_min,
            (GgmlType::Q8_0, _) => self.q8_0_batch_min,
            (_, RowLayout::Words16) => self.words(ty).map_or(BATCH_MIN, |(_, min)| min),
            _ => BATCH_MIN,
        };
        n >= min && (tile::unpacks(ty) || (tile::q8_0::unpacks(ty) && self.gemm_q8_0.is_some()))
    }

    /// `acts` packed for `ty`'s micro-kernel into `kq` or `q8`, if a
    /// product of `acts.n` rows takes one.
    fn pack<'a>(
        &self,
        ty: GgmlType,
        layout: RowLayout,
        acts: &GgmlActs,
        kq: &'a mut Vec<ActTile>,
        (q8, sums): (&'a mut Vec<ActTileQ8_0>, &'a mut Vec<f32>),
    ) -> Tiles<'a> {
        if !self.batched_laid(ty, layout, acts.n) {
            return Tiles::Rows;
        }
        if tile::q8_0::unpacks(ty) {
            tile::q8_0::pack_acts(acts, pairing(ty).expect("a type with a kernel"), q8);
            sums.clear();
            if tile::q8_0::has_min(ty) {
                tile::q8_0::act_sums(acts, sums);
            }
            Tiles::Q8_0(q8, sums)
        } else {
            tile::pack_acts(acts, kq);
            Tiles::KQuant(kq)
        }
    }
}

/// `out = x · wᵀ` for a (rows, cols) matrix `w` of `ty`'s blocks and n
/// activation rows x (n, cols): out is (n, rows). Each activation row is
/// quantized once to `ty`'s pairing, then rows split over rayon; from
/// [`BATCH_MIN`] rows on, the k-quants and the lattice i-quants, and
/// Q8_0, Q4_0 and IQ4_NL where the table has their kernel, take a batched
/// micro-kernel ([`GgmlKernels::batched`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_with(
    k: &GgmlKernels,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    n: usize,
    out: &mut [f32],
) -> Result<()> {
    matmul_laid(k, ty, RowLayout::RowMajor, rows, cols, w, x, n, out)
}

/// [`matmul_with`] on a matrix whose rows are laid as `layout` (other
/// than row-major only as the type's [`layout::interleaving`]): a band of
/// rows goes to a kernel that reads that layout where the table has one,
/// else it is put back in order first.
#[allow(clippy::too_many_arguments)]
pub fn matmul_laid(
    k: &GgmlKernels,
    ty: GgmlType,
    layout: RowLayout,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    n: usize,
    out: &mut [f32],
) -> Result<()> {
    if !layout::lays(ty, layout) {
        return Err(Error::UnknownFormat {
            what: format!("{ty} rows laid {layout:?}"),
        });
    }
    let pairing = pairing(ty).ok_or_else(|| Error::UnknownFormat {
        what: format!("{ty}: no integer ggml kernel"),
    })?;
    let rb = usize::try_from(ty.row_bytes(cols as u64).unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    if rows.checked_mul(rb) != Some(w.len()) {
        return Err(Error::PackedSize {
            format: ty.name().unwrap_or("ggml"),
            rows,
            cols,
            expected: rows.saturating_mul(rb),
            got: w.len(),
        });
    }
    for (what, expected, got) in [
        ("matmul input", n * cols, x.len()),
        ("matmul output", n * rows, out.len()),
    ] {
        if expected != got {
            return Err(Error::DimMismatch {
                what,
                expected,
                got,
            });
        }
    }
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let mut acts = ACTS.take_one();
    k.quantize(&mut acts, pairing, x, n, cols);
    let reads_layout = k.rows_laid(ty, layout).is_some();
    if n == 1 {
        let per = crate::par::decode_rows_per_task(rows, ROWS_PER_TASK, ROWS);
        out.par_chunks_mut(per).enumerate().for_each(|(c, o)| {
            let band = &w[c * per * rb..][..o.len() * rb];
            in_order(ty, layout, reads_layout, band, rb, |band, laid| {
                k.rows_dot_token(ty, laid, band, rb, &acts, 0, o);
            });
        });
        ACTS.give_back(acts);
        return Ok(());
    }
    let (mut kq, mut q8, mut sums) = (
        TILES.take_one(),
        TILES_Q8_0.take_one(),
        SUMS_Q8_0.take_one(),
    );
    let tiles = k.pack(ty, layout, &acts, &mut kq, (&mut q8, &mut sums));
    // the tiles unpack rows one by one: in order
    let native = reads_layout && matches!(tiles, Tiles::Rows);
    let dst = crate::par::ByToken::new(out, n, rows);
    (0..rows.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .for_each(|c| {
            let r0 = c * ROWS_PER_TASK;
            let r1 = (r0 + ROWS_PER_TASK).min(rows);
            in_order(
                ty,
                layout,
                native,
                &w[r0 * rb..r1 * rb],
                rb,
                |band, laid| {
                    // SAFETY: this task alone writes rows r0..r1, and
                    // `rows_into` hands out rows below r1 - r0 and tokens
                    // below n.
                    rows_into(k, ty, laid, band, rb, &acts, tiles, unsafe { dst.band(r0) });
                },
            );
        });
    TILES.give_back(kq);
    TILES_Q8_0.give_back(q8);
    SUMS_Q8_0.give_back(sums);
    ACTS.give_back(acts);
    Ok(())
}

/// [`matmul_with`] on the dispatched kernels.
pub fn matmul(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    n: usize,
    out: &mut [f32],
) -> Result<()> {
    matmul_with(kernels(), ty, rows, cols, w, x, n, out)
}

/// Single-threaded: `put(r, t0, v)` receives `v[i] = row r · acts[t0 + i]`
/// for each weight row r of `rb` bytes in `w` (every row and token once);
/// `tiles` (the activations packed by [`tile::pack_acts`]) takes the
/// batched micro-kernel. Rows laid other than row-major only with
/// [`Tiles::Rows`] and a table that reads them so.
#[allow(clippy::too_many_arguments)]
fn rows_into(
    k: &GgmlKernels,
    ty: GgmlType,
    layout: RowLayout,
    w: &[u8],
    rb: usize,
    acts: &GgmlActs,
    tiles: Tiles<'_>,
    mut put: impl crate::par::Products,
) {
    let n = acts.n.max(1);
    let rows = w.len() / rb.max(1);
    assert!(
        layout == RowLayout::RowMajor || matches!(tiles, Tiles::Rows),
        "the tiles unpack rows in order"
    );
    let tiles = match tiles {
        Tiles::KQuant(t) => t,
        Tiles::Q8_0(t, sums) if tile::q8_0::has_min(ty) => {
            let mins = WithMins::new(k, ty, w, rb, sums, put);
            return rows_into_q8_0(k, ty, w, rb, t, n, mins);
        }
        Tiles::Q8_0(t, _) => return rows_into_q8_0(k, ty, w, rb, t, n, put),
        Tiles::Rows if acts.n == 1 => {
            let mut o = vec![0f32; rows];
            k.rows_dot_token(ty, layout, w, rb, acts, 0, &mut o);
            for (r, v) in o.iter().enumerate() {
                put.row(r, 0, std::slice::from_ref(v));
            }
            return;
        }
        // word-major rows: every token at once, each block column decoded
        // once for several
        Tiles::Rows if layout == RowLayout::Words16 => {
            let f = k.words(ty).expect("a kernel for the layout").0;
            let mut o = vec![0f32; rows * n];
            // SAFETY: a `GgmlKernels` is only handed out by `variants`,
            // which checked that this CPU runs its ISA; `w` holds `rows`
            // rows of as many blocks as each of the n activation rows.
            unsafe { f(w, rb, &acts.q8k, &mut o) };
            for t in 0..n {
                for r in 0..rows {
                    put.row(r, t, std::slice::from_ref(&o[t * rows + r]));
                }
            }
            return;
        }
        // the multi-row kernels token by token where they save work per
        // row that a row's own kernel would repeat for each token (the
        // sixteen-row transposition, the lattice types' tables held in
        // registers); the band's rows come from the cache after the first
        // token. The row-major k-quants' gain nothing so and lose their
        // row's reuse across tokens (docs/BENCH.md, "A few tokens through
        // the multi-row kernels").
        Tiles::Rows
            if (matches!(
                ty,
                GgmlType::Q4_0
                    | GgmlType::IQ4_NL
                    | GgmlType::MXFP4
                    | GgmlType::IQ2_XXS
                    | GgmlType::IQ2_XS
                    | GgmlType::IQ3_XXS
                    | GgmlType::IQ3_S
            ) && k.rows(ty).is_some())
                || layout != RowLayout::RowMajor =>
        {
            let mut o = vec![0f32; rows];
            for t in 0..n {
                k.rows_dot_token(ty, layout, w, rb, acts, t, &mut o);
                for (r, v) in o.iter().enumerate() {
                    put.row(r, t, std::slice::from_ref(v));
                }
            }
            return;
        }
        Tiles::Rows => {
            assert_eq!(layout, RowLayout::RowMajor, "row by row: rows in order");
            let mut o = vec![0f32; n];
            for r in 0..rows {
                k.row_dot_acts(ty, &w[r * rb..(r + 1) * rb], acts, &mut o);
                put.row(r, 0, &o);
            }
            return;
        }
    };
    let nsb = acts.cols / super::kquants::QK_K;
    let gemm = k.gemm_for(ty);
    let mut u = UNPACKED.take();
    crate::par::tile_rows(
        w,
        rb,
        tiles,
        nsb,
        n,
        &mut u,
        // SAFETY (both): a `GgmlKernels` is only handed out by `variants`,
        // which checked that this CPU runs its ISA; `tile_rows` hands the
        // unpacker one row and ROWS rows of nsb super-blocks to `gemm`,
        // with one tile's nsb.
        |row, dst| unsafe { (k.unpack)(ty, row, dst) },
        |u, at, nt, res| unsafe { gemm(u, at, nt, res) },
        put,
    );
    UNPACKED.set(u);
}

/// [`rows_into`] for Q8_0, Q4_0 and IQ4_NL rows on packed Q8_0 tiles
/// ([`tile::q8_0`]).
fn rows_into_q8_0(
    k: &GgmlKernels,
    ty: GgmlType,
    w: &[u8],
    rb: usize,
    tiles: &[ActTileQ8_0],
    n: usize,
    put: impl crate::par::Products,
) {
    let gemm = match pairing(ty) {
        Some(Pairing::Q8K) => k.gemm_q8_0_q8k.or(k.gemm_q8_0),
        _ => k.gemm_q8_0,
    }
    .expect("Q8_0 tiles come from a table with their kernel");
    // Q8_0 tiles of 32 codes: IQ4_XS's 256-weight blocks are eight
    let (qk, block) = ty.block().expect("a known type");
    let nb = rb / block * (qk / super::legacy::QK);
    let mut u = UNPACKED_Q8_0.take();
    crate::par::tile_rows(
        w,
        rb,
        tiles,
        nb,
        n,
        &mut u,
        // SAFETY: as in `rows_into`.
        |row, dst| unsafe { (k.unpack_q8_0)(ty, row, dst) },
        // SAFETY: as in `rows_into`.
        |u, at, nt, res| unsafe { gemm(u, at, nt, res) },
        put,
    );
    UNPACKED_Q8_0.set(u);
}

/// The products of a type with mins (Q4_1, Q5_1: `w = d·q + m`) handed on
/// with the mins' part added: the micro-kernel multiplies the codes `q`
/// under `d` only, and each tile meets `Σ_b m_b · d_a,b · Σ a_b`
/// ([`tile::q8_0::add_mins`]) here, each row group's mins read once.
struct WithMins<'a, P> {
    inner: P,
    /// The band's rows, `rb` bytes each, of `block`-byte blocks.
    w: &'a [u8],
    rb: usize,
    block: usize,
    nb: usize,
    /// [`tile::q8_0::act_sums`] of the product's tiles.
    sums: &'a [f32],
    /// The rows of the group from `group` on, `mins[k · nb + b]`.
    mins: Vec<f32>,
    group: Option<usize>,
    add: AddMins,
}

/// [`tile::q8_0::add_mins`] as compiled for one ISA.
type AddMins = unsafe fn(&[f32], &[f32], usize, usize, &mut [f32; ROWS * TOKENS]);

impl<'a, P: crate::par::Products> WithMins<'a, P> {
    fn new(
        k: &GgmlKernels,
        ty: GgmlType,
        w: &'a [u8],
        rb: usize,
        sums: &'a [f32],
        inner: P,
    ) -> Self {
        let (_, block) = ty.block().expect("a known type");
        let nb = rb / block;
        Self {
            inner,
            w,
            rb,
            block,
            nb,
            sums,
            mins: vec![0.0; ROWS * nb],
            group: None,
            add: add_mins_for(k.isa),
        }
    }

    /// Reads the mins of the rows from `r0` on (up to [`ROWS`]) unless held.
    fn mins_from(&mut self, r0: usize, live: usize) {
        if self.group == Some(r0) {
            return;
        }
        for (k, m) in self.mins.chunks_exact_mut(self.nb).take(live).enumerate() {
            tile::q8_0::row_mins(&self.w[(r0 + k) * self.rb..][..self.rb], self.block, m);
        }
        self.group = Some(r0);
    }
}

impl<P: crate::par::Products> crate::par::Products for WithMins<'_, P> {
    fn row(&mut self, r: usize, t0: usize, v: &[f32]) {
        self.mins_from(r, 1);
        let nb = self.nb;
        let mut with = v.to_vec();
        for (i, o) in with.iter_mut().enumerate() {
            let (tile, lane) = ((t0 + i) / TOKENS, (t0 + i) % TOKENS);
            let sums = &self.sums[tile * nb * TOKENS..];
            *o += (0..nb)
                .map(|b| self.mins[b] * sums[b * TOKENS + lane])
                .sum::<f32>();
        }
        self.inner.row(r, t0, &with);
    }

    fn tile(&mut self, r0: usize, t0: usize, live: usize, nt: usize, v: &[f32; ROWS * TOKENS]) {
        self.mins_from(r0, live);
        let mut with = *v;
        let sums = &self.sums[t0 / TOKENS * self.nb * TOKENS..][..self.nb * TOKENS];
        // SAFETY: `add_mins_for` gave the variant of the table's ISA, which
        // this CPU runs (a `GgmlKernels` is only handed out so).
        unsafe { (self.add)(&self.mins, sums, self.nb, live, &mut with) };
        self.inner.tile(r0, t0, live, nt, &with);
    }
}

/// [`tile::q8_0::add_mins`] compiled for `isa`, so that it takes that
/// ISA's vectors.
fn add_mins_for(isa: Isa) -> AddMins {
    /// # Safety
    /// None (safe code; `unsafe` to fit the type).
    unsafe fn portable(m: &[f32], s: &[f32], nb: usize, live: usize, v: &mut [f32; ROWS * TOKENS]) {
        tile::q8_0::add_mins(m, s, nb, live, v);
    }
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(m: &[f32], s: &[f32], nb: usize, live: usize, v: &mut [f32; ROWS * TOKENS]) {
        tile::q8_0::add_mins(m, s, nb, live, v);
    }
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(m: &[f32], s: &[f32], nb: usize, live: usize, v: &mut [f32; ROWS * TOKENS]) {
        tile::q8_0::add_mins(m, s, nb, live, v);
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512,
        _ => portable,
    }
}

/// Single-threaded: `out[r·n + t] = row r · acts[t]` for the `out.len() / n`
/// rows of `rb` bytes at the start of `w` (benchmarks; the driver splits
/// the same work over rayon), batched as [`matmul_with`] batches.
pub fn rows_dot(
    k: &GgmlKernels,
    ty: GgmlType,
    w: &[u8],
    rb: usize,
    acts: &GgmlActs,
    out: &mut [f32],
) {
    rows_dot_laid(k, ty, RowLayout::RowMajor, w, rb, acts, out);
}

/// [`rows_dot`] on rows laid as `layout` (as [`matmul_laid`] takes them).
pub fn rows_dot_laid(
    k: &GgmlKernels,
    ty: GgmlType,
    layout: RowLayout,
    w: &[u8],
    rb: usize,
    acts: &GgmlActs,
    out: &mut [f32],
) {
    let rows = out.len() / acts.n.max(1);
    let (mut kq, mut q8, mut sums) = (Vec::new(), Vec::new(), Vec::new());
    let tiles = k.pack(ty, layout, acts, &mut kq, (&mut q8, &mut sums));
    let native = k.rows_laid(ty, layout).is_some() && matches!(tiles, Tiles::Rows);
    let n = acts.n.max(1);
    in_order(ty, layout, native, &w[..rows * rb], rb, |w, laid| {
        rows_into(k, ty, laid, w, rb, acts, tiles, |r, t0, v: &[f32]| {
            out[r * n + t0..][..v.len()].copy_from_slice(v);
        });
    });
}

/// Byte offsets of the f16 scale fields in a block of `ty` (a type with a
/// kernel; empty otherwise): what test and benchmark data set to valid
/// scales.
pub fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::IQ4_XS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ2_S
        | GgmlType::Q8_0
        | GgmlType::Q4_0
        | GgmlType::IQ4_NL
        | GgmlType::Q5_0 => &[0],
        _ => &[],
    }
}

/// What `waste inspect` says of `ty`'s products under table `k`.
pub fn kernel_name(ty: GgmlType, k: &GgmlKernels) -> Option<String> {
    let act = match pairing(ty)? {
        Pairing::Q8K => "Q8_K",
        Pairing::Q8_0 => "Q8_0",
    };
    Some(format!(
        "{} {ty}·{act} int8 block dot (ggml's arithmetic)",
        k.name()
    ))
}
