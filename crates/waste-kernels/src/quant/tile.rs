//! Batched products of the block formats (`q3`, `q3-rtn`, `q4`, `q8`) with
//! many activation rows (prefill, and experts that meet several tokens):
//! each weight row is decoded once into Q8_0's unpacked form (the signed
//! grid values as bytes, the block's f32 scale) and met by
//! [`TOKENS`] activation rows at a time through the Q8_0 micro-kernel
//! (`ggml::dot::tile::q8_0`), so a block's decoding is paid once per
//! product instead of once per token.
//!
//! The arithmetic is the `_ref` dot product's: per block
//! `SCALES[s] · d_a · Σ grid[c] · q_a`, the integer sum exact; only the
//! f32 rounding of the scaling differs (the kernel fuses it into an FMA).
//! Every format's grid value fits the kernel's signed byte (|v| ≤ 127).
//!
//! Owns the unpacking ([`unpack_row`], the scalar specification, and its
//! SIMD version) and the packing of [`QuantizedActs`] into tiles; the loop
//! over rows and tiles and the threading are `crate::par`'s.

use super::{Format, PackedMatrix, QuantizedActs};
use crate::ggml::dot::tile::q8_0::{ActTileQ8_0, GemmTileQ8_0, UnpackedQ8_0};
use crate::ggml::dot::tile::{ROWS, TOKENS};
use crate::{q3, q3tcq, q4, q8};

/// Activation rows from which a product takes the batched micro-kernel:
/// below it the row kernels, which decode a block once per 4 tokens, win
/// (`waste bench kernels --n`, docs/BENCH.md); `q8` on a table that says
/// otherwise ([`Tile::q8_min`]).
pub const BATCH_MIN: usize = 8;

/// One weight row of `format` into `out` (one entry per block of 32).
///
/// # Safety
/// The ISA the function was compiled for must be available.
pub type UnpackRow = unsafe fn(format: Format, row: &[u8], out: &mut [UnpackedQ8_0]);

/// The batched kernel of a table: its unpacker and micro-kernels.
#[derive(Debug, Clone, Copy)]
pub struct Tile {
    pub unpack: UnpackRow,
    /// Any codes (-128..=127).
    pub gemm: GemmTileQ8_0,
    /// Codes within ±64 (`q3`'s grids, [`narrow`]): AVX2 keeps the
    /// cheaper `a + 128` pairing there; elsewhere the same as `gemm`.
    pub gemm_narrow: GemmTileQ8_0,
    /// Activation rows from which `q8`, whose rows need no decoding to
    /// unpack, takes the tile: 3 with VNNI, where the tile runs a few
    /// tokens on 256-bit lanes; [`BATCH_MIN`] on AVX2, whose tile loses
    /// to the row kernels below it.
    pub q8_min: usize,
}

impl Tile {
    /// Activation rows from which a product of `format` takes this tile.
    pub fn min_rows(&self, format: Format) -> usize {
        if format == Format::Q8 {
            self.q8_min
        } else {
            BATCH_MIN
        }
    }

    /// The micro-kernel that multiplies `format`'s unpacked rows exactly.
    pub fn gemm_for(&self, format: Format) -> GemmTileQ8_0 {
        if narrow(format) {
            self.gemm_narrow
        } else {
            self.gemm
        }
    }
}

/// Whether every weight code of `format` lies within ±64.
pub fn narrow(format: Format) -> bool {
    matches!(format, Format::Q3 | Format::Q3Rtn)
}

/// Whether `format` has a batched path (the block formats).
pub fn unpacks(format: Format) -> bool {
    matches!(
        format,
        Format::Q3 | Format::Q3Rtn | Format::Q4 | Format::Q8 | Format::Q3Tcq
    )
}

/// `-128 · Σ q`: [`UnpackedQ8_0::init`] of codes `q`.
fn init(q: &[u8; 32]) -> i32 {
    -128 * q.iter().map(|&v| i32::from(v as i8)).sum::<i32>()
}

/// Fills `out` from one packed row of `format` (`out.len()` blocks): the
/// scalar specification of the SIMD unpackers. Panics if `format` does not
/// unpack ([`unpacks`]) or the row is shorter than `out`'s blocks.
pub fn unpack_row(format: Format, row: &[u8], out: &mut [UnpackedQ8_0]) {
    assert!(unpacks(format), "{format} has no batched kernel");
    if format == Format::Q3Tcq {
        return q3tcq::dot::unpack_row(row, out);
    }
    let bb = format.block_bytes();
    assert!(row.len() >= out.len() * bb, "row shorter than its blocks");
    let grid = format.grid();
    for (blk, u) in row.chunks_exact(bb).zip(out.iter_mut()) {
        let (d, value): (f32, &dyn Fn(usize) -> i8) = match format {
            Format::Q3 | Format::Q3Rtn => {
                (q3::SCALES[usize::from(blk[0])], &|i| grid[q3::code(blk, i)])
            }
            Format::Q4 => (q4::SCALES[usize::from(blk[0])], &|i| grid[q4::code(blk, i)]),
            _ => (q8::scale(blk), &|i| blk[2 + i] as i8),
        };
        for (i, q) in u.q.iter_mut().enumerate() {
            *q = value(i) as u8;
        }
        u.init = init(&u.q);
        u.d = d;
    }
}

/// [`unpack_row`] as an [`UnpackRow`].
///
/// # Safety
/// None (safe code; `unsafe` to fit the table).
pub unsafe fn unpack_row_ref(format: Format, row: &[u8], out: &mut [UnpackedQ8_0]) {
    unpack_row(format, row, out);
}

/// [`unpack_row`] on the AVX2 block decoders (`Avx2Block::decode`): one
/// decode, an offset subtracted and a `vpsadbw` for `init` per block.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_row_avx2(format: Format, row: &[u8], out: &mut [UnpackedQ8_0]) {
    use crate::quant::avx2::Avx2Block;
    let unpack = match format {
        Format::Q3 | Format::Q3Rtn => unpack_simd::<q3::avx2::Q3>,
        Format::Q4 => unpack_simd::<q4::avx2::Q4>,
        Format::Q8 => unpack_simd::<q8::avx2::Q8>,
        // SAFETY: the ISA is this function's contract.
        Format::Q3Tcq => return unsafe { q3tcq::avx2::unpack_row(row, out) },
        _ => panic!("{format} has no batched kernel"),
    };
    // SAFETY: the ISA is this function's contract.
    unsafe { unpack(format.grid(), row, out) };

    /// # Safety
    /// AVX2, FMA and F16C available.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_simd<B: Avx2Block>(grid: &[i8; 16], row: &[u8], out: &mut [UnpackedQ8_0]) {
        use std::arch::x86_64::*;
        assert!(
            row.len() >= out.len() * B::BYTES,
            "row shorter than its blocks"
        );
        let lut = crate::quant::avx2::lut::<B>(grid);
        let (off, flip) = (_mm256_set1_epi8(B::OFFSET), _mm256_set1_epi8(i8::MIN));
        for (b, u) in out.iter_mut().enumerate() {
            // SAFETY: block b lies in `row` (asserted); `u.q` is 32 bytes.
            unsafe {
                let p = row.as_ptr().add(b * B::BYTES);
                let v = _mm256_sub_epi8(B::decode(p, lut), off);
                _mm256_storeu_si256(u.q.as_mut_ptr().cast(), v);
                // Σ (v + 128) over the 32 bytes, in four u64 lanes.
                let s = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());
                let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                let s = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s)));
                u.init = -128 * (s - 32 * 128);
                u.d = B::scale(p);
            }
        }
    }
}

/// [`unpack_row_avx2`], but `q3-tcq` rows on its AVX-512 decoder.
///
/// # Safety
/// AVX-512 F, BW, VL and VBMI, GFNI, BMI2, AVX2, FMA and F16C must be
/// available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni,bmi2,avx2,fma,f16c")]
pub unsafe fn unpack_row_avx512(format: Format, row: &[u8], out: &mut [UnpackedQ8_0]) {
    // SAFETY: the ISA is this function's contract.
    unsafe {
        if format == Format::Q3Tcq {
            q3tcq::avx512::unpack_row(row, out);
        } else {
            unpack_row_avx2(format, row, out);
        }
    }
}

/// Packs the activation rows into tiles, `tiles[tile · blocks + b]` for
/// block b of tokens `16·tile..`: the codes as `a + 128`, interleaved by
/// four, and each token's f32 block scale; tokens past the last are zero.
pub fn pack_acts(acts: &QuantizedActs, tiles: &mut Vec<ActTileQ8_0>) {
    let nb = acts.blocks;
    tiles.clear();
    tiles.resize(acts.n.div_ceil(TOKENS) * nb, ActTileQ8_0::default());
    for t in 0..acts.n {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        let (qs, ds) = (acts.row_qs(t), acts.row_d(t));
        for (b, (q, &d)) in qs.chunks_exact(32).zip(ds).enumerate() {
            let q: &[u8] = bytemuck::cast_slice(q);
            crate::ggml::dot::tile::q8_0::pack_block(&mut tiles[tile * nb + b], lane, q, d);
        }
    }
}

/// The batched product of rows `rows` of `m` with the packed `tiles` of
/// `n` activation rows: `put(r, t0, v)` receives `v[i] = row rows.start + r
/// · acts[t0 + i]`, every row and token once. Single-threaded.
pub(crate) fn rows_into(
    tile: Tile,
    m: &PackedMatrix<'_>,
    rows: std::ops::Range<usize>,
    tiles: &[ActTileQ8_0],
    n: usize,
    unpacked: &mut Vec<UnpackedQ8_0>,
    put: impl crate::par::Products,
) {
    let (format, blocks) = (m.format(), m.cols().div_ceil(32));
    let rb = format.row_bytes(m.cols());
    debug_assert_eq!(tiles.len(), n.div_ceil(TOKENS) * blocks);
    let gemm = tile.gemm_for(format);
    crate::par::tile_rows(
        &m.bytes()[rows.start * rb..rows.end * rb],
        rb,
        tiles,
        blocks,
        n,
        unpacked,
        // SAFETY (both): a `Tile` comes from a `Kernels` table, handed out
        // only for an ISA this CPU runs; `tile_rows` passes whole rows and
        // ROWS rows of `blocks` blocks with one tile's `blocks`.
        |row, dst| unsafe { (tile.unpack)(format, row, dst) },
        |u, at, nt, res: &mut [f32; ROWS * TOKENS]| unsafe { gemm(u, at, nt, res) },
        put,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_row(format: Format, blocks: usize, seed: &mut u64) -> Vec<u8> {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let mut row: Vec<u8> = (0..blocks * format.block_bytes())
            .map(|_| next() as u8)
            .collect();
        if format == Format::Q8 {
            for blk in row.chunks_exact_mut(q8::BLOCK_BYTES) {
                let d = half::f16::from_f32(1e-3 * (1.0 + f32::from(blk[0]) / 256.0));
                blk[..2].copy_from_slice(&d.to_bits().to_le_bytes());
                for q in &mut blk[2..] {
                    // The quantizer writes codes in -127..=127.
                    *q = (*q as i8).max(-127) as u8;
                }
            }
        }
        row
    }

    /// The unpacked values times the scale are the format's dequantized weights.
    #[test]
    fn unpacked_blocks_are_the_dequantized_weights() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for format in [Format::Q3, Format::Q3Rtn, Format::Q4, Format::Q8] {
            let row = random_row(format, 5, &mut seed);
            let mut want = vec![0f32; 5 * 32];
            format.dequantize_row(&row, &mut want);
            let mut u = vec![UnpackedQ8_0::default(); 5];
            unpack_row(format, &row, &mut u);
            for (b, u) in u.iter().enumerate() {
                for (i, &q) in u.q.iter().enumerate() {
                    let got = u.d * f32::from(q as i8);
                    assert_eq!(got, want[32 * b + i], "{format} block {b} weight {i}");
                }
                assert_eq!(u.init, init(&u.q));
            }
        }
    }

    /// `q3-tcq`'s unpacked values times the scale are its weights in the
    /// rotated basis: the rotation undone, its dequantized row.
    #[test]
    fn unpacked_q3_tcq_blocks_are_the_rotated_weights() {
        let mut seed = 0x853c_49e6_748f_ea9b_u64;
        for blocks in [1, 6, 7, 13] {
            let row = random_row(Format::Q3Tcq, blocks, &mut seed);
            let cols = 32 * blocks;
            let mut want = vec![0f32; cols];
            q3tcq::dequantize_row(&row, &mut want);
            let mut u = vec![UnpackedQ8_0::default(); blocks];
            unpack_row(Format::Q3Tcq, &row, &mut u);
            let mut got: Vec<f32> = u
                .iter()
                .flat_map(|u| u.q.map(|q| u.d * f32::from(q as i8)))
                .collect();
            q3tcq::Rotation::new(cols).undo(&mut got);
            let norm = want.iter().map(|v| v * v).sum::<f32>().sqrt();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-5 * norm, "{blocks} blocks: weight {i}");
            }
            assert!(u.iter().all(|u| u.init == init(&u.q)));
        }
    }

    /// The formats [`narrow`] names keep every weight within ±64: the
    /// bound under which the narrow kernels' `vpmaddubsw` pairs cannot
    /// saturate.
    #[test]
    fn narrow_formats_are_the_grids_within_64() {
        for format in Format::ALL {
            let widest = match format {
                Format::Q8 => 127,
                f => f.grid().iter().map(|&g| i32::from(g).abs()).max().unwrap(),
            };
            assert_eq!(narrow(format), widest <= 64, "{format}: {widest}");
        }
    }

    /// Every table's unpacker writes the scalar one's bytes, scales and sums.
    #[test]
    fn simd_unpacking_is_the_scalar_unpacking() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for k in crate::quant::Kernels::variants() {
            for format in [
                Format::Q3,
                Format::Q3Rtn,
                Format::Q4,
                Format::Q8,
                Format::Q3Tcq,
            ] {
                let Some(tile) = k.tile(format, usize::MAX) else {
                    continue;
                };
                for blocks in [1, 2, 7, 12, 17, 64] {
                    let row = random_row(format, blocks, &mut seed);
                    let mut want = vec![UnpackedQ8_0::default(); blocks];
                    let mut got = want.clone();
                    unpack_row(format, &row, &mut want);
                    // SAFETY: `variants` hands out only tables this CPU runs.
                    unsafe { (tile.unpack)(format, &row, &mut got) };
                    for (b, (g, w)) in got.iter().zip(&want).enumerate() {
                        let at = format!("{} {format} {blocks} blocks: block {b}", k.name());
                        assert_eq!(g.q, w.q, "{at}");
                        assert_eq!(g.init, w.init, "{at}");
                        assert_eq!(g.d.to_bits(), w.d.to_bits(), "{at}");
                    }
                }
            }
        }
    }
}
