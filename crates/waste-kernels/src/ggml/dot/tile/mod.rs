//! Batched products of k-quant and lattice i-quant weight rows with many
//! activation rows (prefill): each weight row is decoded once into an
//! [`Unpacked`] form (codes as bytes, per-16 scales and mins as f32) and
//! then multiplied by [`TOKENS`] activation rows at a time, packed once
//! per product into [`ActTile`]s, so a row's decoding is paid once per
//! tile of tokens instead of once per token. One micro-kernel
//! ([`GemmTile`]: `reference.rs` the scalar specification, `avx2.rs`,
//! `avx512.rs` with VNNI) serves every type; what is per type is the
//! decoding in [`unpack_row`].
//!
//! The arithmetic, per weight row, super-block and token t:
//! `d8_t · Σ_j (sc_j · Σ_{k∈j} q_k·a_tk − m_j · bsum_tj)` with `q` the
//! unsigned code, `a` the Q8_K activation codes and `j` the 16-weight
//! sub-blocks; `sc_j` and `m_j` fold the block's f16 scales into the
//! sub-block's integer scale and min (or code offset, for Q3_K, Q6_K and
//! the lattice types, whose codes are their signed grid values plus their
//! largest magnitude: up to 124, so AVX2 sums fewer in i16, [`wide`]), so
//! the integer sums are the `_ref` dot products' and only the f32 order
//! of their scaling differs. The tile holds unsigned activations
//! (`a + 128`): AVX-512's `vpdpbusd` multiplies them by the codes and
//! [`Unpacked::init`] holds the `-128 · Σ q` that takes the offset back
//! out, exactly, in i32; AVX2 turns them back to signed codes and scales
//! each sub-block's sum by its integer scale ([`Unpacked::isc`]) in i32.
//!
//! Owns no threading (the driver in [`super`] splits rows over rayon).

use super::super::act::{BlockQ8K, GgmlActs};
use super::super::iquants::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs,
};
use super::super::kquants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K, scale_k3, scale_min_k4,
};
use super::super::{GgmlType, blocks, f16_le};
use super::reference::LatticeInts;

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512;
pub mod q8_0;
pub mod reference;

/// Activation rows per tile: the lanes of one AVX-512 register of i32.
pub const TOKENS: usize = 16;
/// Weight rows per micro-kernel call.
pub const ROWS: usize = 8;
/// Sub-blocks of 16 weights per super-block.
const SUBS: usize = QK_K / 16;

/// One super-block of one weight row, decoded for the micro-kernel:
/// weight `16j + l` is `sc[j] · q[16j + l] − m[j]` (up to the f32
/// rounding of `sc` and `m`). 576 bytes.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct Unpacked {
    /// Unsigned codes, each below 128 (below 64 for the k-quants).
    pub q: [u8; QK_K],
    /// `-128 · Σ q[16j..16j + 16]`: what `Σ q · (a + 128)` exceeds `Σ q · a` by, negated.
    pub init: [i32; SUBS],
    /// Scale of sub-block j's codes (the block's f16 scale times its integer scale).
    pub sc: [f32; SUBS],
    /// What sub-block j subtracts per unit of its activations' sum.
    pub m: [f32; SUBS],
    /// Sub-block j's integer scale in both i16 halves (a `vpmaddwd`
    /// multiplier): `sc[j]` is `d · isc[j]` exactly.
    pub isc: [i32; SUBS],
    /// The block's scale of `isc`.
    pub d: f32,
    /// The codes' offset where `m` is only that (Q3_K, Q6_K and the
    /// lattice types: `m[j]` is `d · (off · isc[j])`), so a kernel may take
    /// `off · Σ a` from the integer sums instead; 0 where `m` holds the
    /// block's own mins (Q2_K, Q4_K, Q5_K).
    pub off: u32,
}
const _: () = assert!(size_of::<Unpacked>() == 576);

impl Default for Unpacked {
    fn default() -> Self {
        Self {
            q: [0; QK_K],
            init: [0; SUBS],
            sc: [0.0; SUBS],
            m: [0.0; SUBS],
            isc: [0; SUBS],
            d: 0.0,
            off: 0,
        }
    }
}

/// One super-block of [`TOKENS`] activation rows: 5184 bytes.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct ActTile {
    /// `a + 128` (unsigned), interleaved for the kernels: the four codes
    /// `4g..4g + 4` of token t at `64g + 4t`.
    pub a: [u8; QK_K * TOKENS],
    /// Sub-block sums of the codes, `bsum[16j + t]` (f32, exact).
    pub bsum: [f32; SUBS * TOKENS],
    /// The Q8_K scale of each token's block; 0 past the last token.
    pub d: [f32; TOKENS],
}
const _: () = assert!(size_of::<ActTile>() == 5184);

impl Default for ActTile {
    fn default() -> Self {
        Self {
            a: [0; QK_K * TOKENS],
            bsum: [0.0; SUBS * TOKENS],
            d: [0.0; TOKENS],
        }
    }
}

/// [`ROWS`] weight rows (`w[r · nsb + s]`, super-block s of row r) times
/// one tile of tokens (`acts[s]`); `out[16r + t]` is row r's product with
/// token t, for the first `tokens` of the tile (the others' products may
/// be left unwritten: a kernel may skip a half of the tile past them).
///
/// # Safety
/// The ISA the function was compiled for must be available;
/// `w.len() == ROWS · acts.len()`.
pub type GemmTile =
    unsafe fn(w: &[Unpacked], acts: &[ActTile], tokens: usize, out: &mut [f32; ROWS * TOKENS]);

/// Whether [`unpack_row`] decodes `ty`.
pub fn unpacks(ty: GgmlType) -> bool {
    code_bound(ty).is_some()
}

/// One past the largest code of `ty`'s unpacked rows, for the types that
/// unpack: the k-quants' unsigned codes, and the lattice i-quants' signed
/// grid values offset by their largest magnitude (`LatticeInts::MAX`).
fn code_bound(ty: GgmlType) -> Option<u32> {
    Some(match ty {
        GgmlType::Q2_K => 4,
        GgmlType::Q3_K => 8,
        GgmlType::Q4_K => 16,
        GgmlType::Q5_K => 32,
        GgmlType::Q6_K => 64,
        GgmlType::IQ2_XXS => lattice_bound::<BlockIq2Xxs>(),
        GgmlType::IQ2_XS => lattice_bound::<BlockIq2Xs>(),
        GgmlType::IQ3_XXS => lattice_bound::<BlockIq3Xxs>(),
        GgmlType::IQ3_S => lattice_bound::<BlockIq3S>(),
        GgmlType::IQ2_S => lattice_bound::<BlockIq2S>(),
        GgmlType::IQ1_S => lattice_bound::<BlockIq1S>(),
        GgmlType::IQ1_M => lattice_bound::<BlockIq1M>(),
        _ => return None,
    })
}

/// One past a lattice type's largest code: values in `-MAX..=MAX`, plus `MAX`.
fn lattice_bound<B: LatticeInts>() -> u32 {
    2 * u32::from(B::MAX) + 1
}

/// Whether every code of `ty`'s unpacked rows is below 32 (Q2_K to Q5_K,
/// IQ3_S): a kernel may then sum more products in i16.
pub fn narrow(ty: GgmlType) -> bool {
    code_bound(ty).is_some_and(|b| b <= 32)
}

/// Whether the two 16-weight sub-blocks of each 32 of `ty`'s unpacked rows
/// share their scale and min (`sc[2j] == sc[2j + 1]`, `m` alike): Q4_K
/// and Q5_K, whose scales are per 32, and the lattice types but IQ2_XS.
pub fn paired(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::IQ2_XXS | GgmlType::IQ3_XXS | GgmlType::IQ3_S
    )
}

/// Whether some code of `ty`'s unpacked rows may be 64 or more (IQ2_XXS,
/// IQ2_XS, IQ3_XXS; never 128 or more): a kernel may sum fewer products in
/// i16.
pub fn wide(ty: GgmlType) -> bool {
    code_bound(ty).is_some_and(|b| b > 64)
}

/// Fills `out` (one entry per super-block) from one weight row of `ty`.
/// Panics if `ty` does not unpack ([`unpacks`]) or the lengths disagree.
/// The scalar specification of the per-ISA unpackers ([`Unpack`]).
pub fn unpack_row(ty: GgmlType, row: &[u8], out: &mut [Unpacked]) {
    fn each<B: KScales>(row: &[u8], out: &mut [Unpacked], codes: fn(&B, &mut Unpacked)) {
        for_blocks(row, out, |b: &B, u| {
            codes(b, u);
            B::scales(b, u);
            for (i, q) in u.init.iter_mut().zip(u.q.chunks_exact(16)) {
                *i = -128 * q.iter().map(|&q| i32::from(q)).sum::<i32>();
            }
        });
    }
    match ty {
        GgmlType::Q2_K => each(row, out, codes_q2_k),
        GgmlType::Q3_K => each(row, out, codes_q3_k),
        GgmlType::Q4_K => each(row, out, codes_q4_k),
        GgmlType::Q5_K => each(row, out, codes_q5_k),
        GgmlType::Q6_K => each(row, out, codes_q6_k),
        GgmlType::IQ2_XXS => each(row, out, codes_lattice::<BlockIq2Xxs>),
        GgmlType::IQ2_XS => each(row, out, codes_lattice::<BlockIq2Xs>),
        GgmlType::IQ3_XXS => each(row, out, codes_lattice::<BlockIq3Xxs>),
        GgmlType::IQ3_S => each(row, out, codes_lattice::<BlockIq3S>),
        GgmlType::IQ2_S => each(row, out, codes_lattice::<BlockIq2S>),
        GgmlType::IQ1_S => each(row, out, codes_lattice::<BlockIq1S>),
        GgmlType::IQ1_M => each(row, out, codes_lattice::<BlockIq1M>),
        _ => panic!("{ty} has no batched kernel"),
    }
}

/// A lattice block's codes: its signed values offset by `MAX`.
fn codes_lattice<B: LatticeInts>(b: &B, u: &mut Unpacked) {
    for (q, v) in u.q.iter_mut().zip(b.values()) {
        *q = (i16::from(v) + i16::from(B::MAX)) as u8;
    }
}

/// A lattice block's scales: `d · FACTOR` times each 16 weights' odd
/// scale, less `MAX` times that per unit of activation sum (the codes'
/// offset).
pub(in crate::ggml::dot) fn scales_lattice<B: LatticeInts>(b: &B, u: &mut Unpacked) {
    let d = b.d() * B::FACTOR;
    u.d = d;
    u.off = u32::from(B::MAX);
    for (j, &isc) in b.scales16().iter().enumerate() {
        u.sc[j] = d * isc as f32;
        u.isc[j] = i16_pair(isc as i16);
        u.m[j] = d * (f32::from(B::MAX) * isc as f32);
    }
}

macro_rules! lattice_scales {
    ($($block:ty)*) => {$(
        impl KScales for $block {
            fn scales(&self, u: &mut Unpacked) {
                scales_lattice(self, u);
            }
        }
    )*};
}
lattice_scales!(BlockIq2Xxs BlockIq2Xs BlockIq3Xxs BlockIq3S BlockIq2S BlockIq1S BlockIq1M);

/// One weight row of `ty` into `out`, one entry per super-block, as
/// [`unpack_row`] does. Panics as it does.
///
/// # Safety
/// The ISA the function was compiled for must be available.
pub type Unpack = unsafe fn(ty: GgmlType, row: &[u8], out: &mut [Unpacked]);

/// [`unpack_row`] as an [`Unpack`] (the `ref` table's).
///
/// # Safety
/// None (safe code; `unsafe` to fit the table).
pub unsafe fn unpack_row_ref(ty: GgmlType, row: &[u8], out: &mut [Unpacked]) {
    unpack_row(ty, row, out);
}

/// `f` on each block of `row` and its unpacked entry.
fn for_blocks<B: super::super::GgmlBlock>(
    row: &[u8],
    out: &mut [Unpacked],
    mut f: impl FnMut(&B, &mut Unpacked),
) {
    let b: &[B] = blocks(row).expect("a ggml row holds whole blocks");
    assert_eq!(b.len(), out.len(), "one unpacked block per super-block");
    for (b, u) in b.iter().zip(out.iter_mut()) {
        f(b, u);
    }
}

/// A k-quant block's scales and mins as [`Unpacked::sc`] and [`Unpacked::m`]
/// (shared by every ISA's unpacker: 16 values per 256 weights).
trait KScales: super::super::GgmlBlock {
    fn scales(&self, u: &mut Unpacked);
}

impl KScales for BlockQ2K {
    fn scales(&self, u: &mut Unpacked) {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        u.d = d;
        u.off = 0;
        for (j, &sc) in self.scales.iter().enumerate() {
            u.sc[j] = d * f32::from(sc & 0x0F);
            u.isc[j] = i16_pair(i16::from(sc & 0x0F));
            u.m[j] = dmin * f32::from(sc >> 4);
        }
    }
}

impl KScales for BlockQ3K {
    fn scales(&self, u: &mut Unpacked) {
        let d = f16_le(self.d);
        u.d = d;
        u.off = 4;
        for j in 0..SUBS {
            let isc = scale_k3(j, &self.scales);
            let sc = f32::from(isc);
            u.sc[j] = d * sc;
            u.isc[j] = i16_pair(i16::from(isc));
            u.m[j] = d * (4.0 * sc);
        }
    }
}

/// Q4_K's and Q5_K's per-32 (sc, m), each on both of its 16-weight halves.
fn scales_k4(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12], u: &mut Unpacked) {
    let (d, dmin) = (f16_le(d), f16_le(dmin));
    u.d = d;
    u.off = 0;
    for j in 0..8 {
        let (isc, m) = scale_min_k4(j, scales);
        let (sc, m) = (d * f32::from(isc), dmin * f32::from(m));
        u.sc[2 * j..2 * j + 2].fill(sc);
        u.isc[2 * j..2 * j + 2].fill(i16_pair(i16::from(isc)));
        u.m[2 * j..2 * j + 2].fill(m);
    }
}

impl KScales for BlockQ4K {
    fn scales(&self, u: &mut Unpacked) {
        scales_k4(self.d, self.dmin, &self.scales, u);
    }
}

impl KScales for BlockQ5K {
    fn scales(&self, u: &mut Unpacked) {
        scales_k4(self.d, self.dmin, &self.scales, u);
    }
}

impl KScales for BlockQ6K {
    fn scales(&self, u: &mut Unpacked) {
        let d = f16_le(self.d);
        u.d = d;
        u.off = 32;
        for (j, &sc) in self.scales.iter().enumerate() {
            let isc = sc as i8;
            let sc = f32::from(isc);
            u.sc[j] = d * sc;
            u.isc[j] = i16_pair(i16::from(isc));
            u.m[j] = d * (32.0 * sc);
        }
    }
}

/// `v` in both i16 halves of an i32.
fn i16_pair(v: i16) -> i32 {
    let h = u32::from(v as u16);
    (h | (h << 16)) as i32
}

fn codes_q2_k(b: &BlockQ2K, u: &mut Unpacked) {
    for h in 0..2 {
        for s in 0..4 {
            let q = &mut u.q[128 * h + 32 * s..][..32];
            for (q, &c) in q.iter_mut().zip(&b.qs[32 * h..][..32]) {
                *q = (c >> (2 * s)) & 3;
            }
        }
    }
}

fn codes_q3_k(b: &BlockQ3K, u: &mut Unpacked) {
    for h in 0..2 {
        for s in 0..4 {
            let q = &mut u.q[128 * h + 32 * s..][..32];
            for ((q, &c), &hm) in q.iter_mut().zip(&b.qs[32 * h..][..32]).zip(&b.hmask) {
                *q = ((c >> (2 * s)) & 3) | (((hm >> (4 * h + s)) & 1) << 2);
            }
        }
    }
}

/// The codes of a Q4_K/Q5_K block's 4-bit runs.
fn codes_k4(qs: &[u8; 128], u: &mut Unpacked) {
    for j in 0..8 {
        let q = &mut u.q[32 * j..][..32];
        for (q, &c) in q.iter_mut().zip(&qs[32 * (j / 2)..][..32]) {
            *q = (c >> (4 * (j % 2))) & 0x0F;
        }
    }
}

fn codes_q4_k(b: &BlockQ4K, u: &mut Unpacked) {
    codes_k4(&b.qs, u);
}

fn codes_q5_k(b: &BlockQ5K, u: &mut Unpacked) {
    codes_k4(&b.qs, u);
    for j in 0..8 {
        for (q, &h) in u.q[32 * j..][..32].iter_mut().zip(&b.qh) {
            *q |= ((h >> j) & 1) << 4;
        }
    }
}

fn codes_q6_k(b: &BlockQ6K, u: &mut Unpacked) {
    for h in 0..2 {
        for s in 0..4 {
            let q = &mut u.q[128 * h + 32 * s..][..32];
            let ql = &b.ql[64 * h + 32 * (s & 1)..][..32];
            for ((q, &lo), &hi) in q.iter_mut().zip(ql).zip(&b.qh[32 * h..][..32]) {
                *q = ((lo >> (4 * (s / 2))) & 0x0F) | (((hi >> (2 * s)) & 3) << 4);
            }
        }
    }
}

/// Packs Q8_K activation rows into tiles, `tiles[tile · nsb + s]` for
/// super-block s of tokens `16·tile..`; tokens past the last are zero
/// (their products come out 0 and are never read).
pub fn pack_acts(acts: &GgmlActs, tiles: &mut Vec<ActTile>) {
    let nsb = acts.cols / QK_K;
    let n_tiles = acts.n.div_ceil(TOKENS);
    tiles.clear();
    tiles.resize(n_tiles * nsb, ActTile::default());
    for t in 0..acts.n {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        for (s, b) in acts.q8k_row(t).iter().enumerate() {
            pack_block(b, lane, &mut tiles[tile * nsb + s]);
        }
    }
}

fn pack_block(b: &BlockQ8K, lane: usize, tile: &mut ActTile) {
    for (g, a) in b.qs.chunks_exact(4).enumerate() {
        let dst = &mut tile.a[64 * g + 4 * lane..][..4];
        for (d, &a) in dst.iter_mut().zip(a) {
            *d = (a as u8) ^ 0x80;
        }
    }
    for (j, &s) in b.bsums.iter().enumerate() {
        tile.bsum[TOKENS * j + lane] = f32::from(s);
    }
    tile.d[lane] = b.d;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every type's unpacked weights are its decoder's values.
    #[test]
    fn unpacked_blocks_decode_to_the_ggml_values() {
        let mut seed = 0x1234_5678_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for ty in [
            GgmlType::Q2_K,
            GgmlType::Q3_K,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let (_, size) = ty.block().unwrap();
            let mut row: Vec<u8> = (0..3 * size).map(|_| next() as u8).collect();
            for blk in row.chunks_exact_mut(size) {
                for &at in super::super::scale_fields(ty) {
                    // f16 0.0078125 · (1 + small), finite
                    blk[at..at + 2]
                        .copy_from_slice(&(0x2000u16 | (next() as u16 & 0x3ff)).to_le_bytes());
                }
            }
            let want = crate::ggml::dequantize(ty, &row).unwrap();
            let mut u = vec![Unpacked::default(); 3];
            unpack_row(ty, &row, &mut u);
            for (s, u) in u.iter().enumerate() {
                for k in 0..QK_K {
                    let j = k / 16;
                    assert!(u.q[k] < 64);
                    let got = u.sc[j] * f32::from(u.q[k]) - u.m[j];
                    let w = want[s * QK_K + k];
                    assert!(
                        (got - w).abs() <= 1e-6 * w.abs().max(u.m[j].abs()),
                        "{ty} [{s},{k}]: {got} vs {w}"
                    );
                }
                for j in 0..SUBS {
                    let isc = u.isc[j] as i16;
                    assert_eq!(u.isc[j] >> 16, i32::from(isc), "{ty} both halves");
                    assert_eq!(u.sc[j].to_bits(), (u.d * f32::from(isc)).to_bits());
                }
                for (j, i) in u.init.iter().enumerate() {
                    assert_eq!(
                        *i,
                        -128 * u.q[16 * j..16 * j + 16]
                            .iter()
                            .map(|&q| i32::from(q))
                            .sum::<i32>()
                    );
                }
            }
        }
    }
}
