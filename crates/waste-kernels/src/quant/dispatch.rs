//! Run-time kernel selection, resolved once: a table of row dot products per
//! ISA, chosen by CPU detection or forced with `WASTE_KERNELS` naming a
//! table (`ref`, `avx2`, `avx2-vnni`, `avx512-bw`, `avx512-vnni-half`,
//! `avx512-vnni`) or `avx512`, the best AVX-512 table this CPU runs.
//! AVX2 has two tables: `avx2-vnni` (with AVX-VNNI: Intel's client cores
//! from Alder Lake, AMD's from Zen 5), chosen where `is_x86_feature_detected!`
//! finds it, and `avx2`, an AVX2-only CPU's (which `WASTE_KERNELS=avx2`
//! stands in for on any AVX2 CPU). AVX-512 has two (three with Zen 4's
//! `avx512-vnni-half`): `avx512-vnni` (F/BW/VL + VNNI + VBMI: Ice Lake,
//! Zen 4 and later), chosen when `is_x86_feature_detected!` finds both
//! extensions, and `avx512-bw` (F/BW/VL only), whose block kernels are the
//! AVX2 ones: at 256 bits F/BW/VL alone did not beat them on Zen 4
//! (docs/QUANT.md).

use std::sync::OnceLock;

use super::Format;
use super::act::QuantizedActs;

/// The instruction sets kernels exist for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable scalar code: the specification.
    Ref,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F + BW + VL (with AVX2 + FMA + F16C); VNNI where detected.
    Avx512,
}

impl Isa {
    /// Every ISA, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Ref, Isa::Avx2, Isa::Avx512];

    /// The name `WASTE_KERNELS` uses.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Ref => "ref",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU runs it.
    pub fn available(self) -> bool {
        match self {
            Isa::Ref => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Row dot products over consecutive packed rows: `out[r·n + t] = row_r · acts[t]`
/// for the `out.len() / n` rows of `row_bytes` bytes each at the start of
/// `rows`. `grid` is the format's byte-shuffle table.
///
/// # Safety
/// The ISA the function was compiled for must be available.
pub type RowDot = unsafe fn(
    rows: &[u8],
    row_bytes: usize,
    grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
);

/// Products of a native matrix with f32 activations over rows `r0..`:
/// `out[i·n + t] = decode(row r0 + i) · x[t]` for `out.len() / n` rows; `buf`
/// is a scratch row of `cols` (see `crate::native`).
pub type ExactRowsDot = fn(
    m: &super::PackedMatrix<'_>,
    r0: usize,
    x: &[f32],
    n: usize,
    buf: &mut [f32],
    out: &mut [f32],
);

/// The `_ref` kernels over consecutive rows.
fn each_row(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedActs,
    out: &mut [f32],
    f: impl Fn(&[u8], &mut [f32]),
) {
    for (r, o) in out.chunks_mut(acts.n.max(1)).enumerate() {
        f(&rows[r * row_bytes..(r + 1) * row_bytes], o);
    }
}

fn q3_ref(rows: &[u8], row_bytes: usize, grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    each_row(rows, row_bytes, acts, out, |r, o| {
        crate::q3::reference::vec_dot_q3_q8_ref(r, grid, acts, o);
    });
}

fn q4_ref(rows: &[u8], row_bytes: usize, grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    each_row(rows, row_bytes, acts, out, |r, o| {
        crate::q4::reference::vec_dot_q4_q8_ref(r, grid, acts, o);
    });
}

fn q3tcq_ref(
    rows: &[u8],
    row_bytes: usize,
    _grid: &[i8; 16],
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    each_row(rows, row_bytes, acts, out, |r, o| {
        crate::q3tcq::dot::vec_dot_q3tcq_q8_ref(r, acts, o);
    });
}

fn q8_ref(rows: &[u8], row_bytes: usize, grid: &[i8; 16], acts: &QuantizedActs, out: &mut [f32]) {
    each_row(rows, row_bytes, acts, out, |r, o| {
        crate::q8::reference::vec_dot_q8_q8_ref(r, grid, acts, o);
    });
}

/// The kernels of one ISA. Only obtainable for an ISA this CPU runs, which is
/// what makes calling its function pointers sound.
#[derive(Debug)]
pub struct Kernels {
    isa: Isa,
    /// The table's name: the ISA's, or for a variant `isa-extension`.
    name: &'static str,
    /// What the table needs beyond its ISA.
    needs: Needs,
    q3: RowDot,
    q4: RowDot,
    q8: RowDot,
    /// `q3-tcq` against rotated activations (AVX2 on the F/BW/VL table).
    q3tcq: RowDot,
    /// The native formats' exact path: rows of plain floats on the dense
    /// float kernels of the table's ISA, the others decoded row by row in
    /// scalar code (byte lookups) and dotted with the dense `dot_f32`.
    exact: ExactRowsDot,
    /// The batched micro-kernels of the block formats (`super::tile`).
    tile: Option<super::tile::Tile>,
}

static REF: Kernels = Kernels {
    isa: Isa::Ref,
    name: "ref",
    needs: Needs::Isa,
    q3: q3_ref,
    q4: q4_ref,
    q8: q8_ref,
    q3tcq: q3tcq_ref,
    exact: crate::native::reference::rows_dot_native_f32_ref,
    tile: None,
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    name: "avx2",
    needs: Needs::Isa,
    q3: crate::q3::avx2::vec_dot_q3_q8,
    q4: crate::q4::avx2::vec_dot_q4_q8,
    q8: crate::q8::avx2::vec_dot_q8_q8,
    q3tcq: crate::q3tcq::avx2::vec_dot_q3tcq_q8,
    exact: crate::native::rows_dot_native_avx2,
    tile: Some(super::tile::Tile {
        unpack: super::tile::unpack_row_avx2,
        gemm: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_avx2,
        gemm_narrow: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_avx2_narrow,
        q8_min: super::tile::BATCH_MIN,
    }),
};

/// AVX2 with AVX-VNNI (Intel's client cores from Alder Lake, AMD's from Zen
/// 5): `q3`'s, `q4`'s and `q3-tcq`'s products and the batched tile with
/// one `vpdpbusd` per 32 weights; `q8` (bound by its reads) keeps the AVX2
/// kernel (docs/BENCH.md, "AVX-VNNI").
#[cfg(target_arch = "x86_64")]
static AVX2_VNNI: Kernels = Kernels {
    name: "avx2-vnni",
    needs: Needs::AvxVnni,
    q3: crate::q3::avx2::vec_dot_q3_q8_avx_vnni,
    q4: crate::q4::avx2::vec_dot_q4_q8_avx_vnni,
    q3tcq: crate::q3tcq::avx2::vec_dot_q3tcq_q8_avx_vnni,
    tile: Some(super::tile::Tile {
        unpack: super::tile::unpack_row_avx2,
        gemm: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_avx_vnni,
        gemm_narrow: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_avx_vnni,
        q8_min: super::tile::BATCH_MIN,
    }),
    ..AVX2
};

/// AVX-512 without VNNI + VBMI: the AVX2 block kernels (AVX-512 implies AVX2).
#[cfg(target_arch = "x86_64")]
static AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    name: "avx512-bw",
    ..AVX2
};

#[cfg(target_arch = "x86_64")]
static AVX512_VNNI: Kernels = Kernels {
    isa: Isa::Avx512,
    name: "avx512-vnni",
    needs: Needs::Avx512Vnni,
    q3: crate::q3::avx512::vec_dot_q3_q8_512,
    q4: crate::q4::avx512::vec_dot_q4_q8_512,
    q8: crate::q8::avx512::vec_dot_q8_q8,
    q3tcq: crate::q3tcq::avx512::vec_dot_q3tcq_q8,
    exact: crate::native::rows_dot_native_avx512,
    tile: Some(super::tile::Tile {
        unpack: super::tile::unpack_row_avx512,
        gemm: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_vnni,
        gemm_narrow: crate::ggml::dot::tile::q8_0::gemm_tile_q8_0_vnni,
        q8_min: 3,
    }),
};

/// [`AVX512_VNNI`] for CPUs that run a 512-bit operation as two 256-bit
/// halves (AMD Zen 4, [`crate::ggml::dot::halves_512`]): `q3` and `q4`
/// decoded to 256-bit vectors, as tuned there; the full-width table decodes
/// 64 weights to a 512-bit vector, `q3` 1.08-1.12 x and `q4` 1.39-1.50 x on
/// Zen 5 (docs/BENCH.md).
#[cfg(target_arch = "x86_64")]
static AVX512_VNNI_HALF: Kernels = Kernels {
    name: "avx512-vnni-half",
    q3: crate::q3::avx512::vec_dot_q3_q8,
    q4: crate::q4::avx512::vec_dot_q4_q8,
    ..AVX512_VNNI
};

/// Every table, slowest first.
#[cfg(target_arch = "x86_64")]
static ALL: [&Kernels; 6] = [
    &REF,
    &AVX2,
    &AVX2_VNNI,
    &AVX512,
    &AVX512_VNNI_HALF,
    &AVX512_VNNI,
];
#[cfg(not(target_arch = "x86_64"))]
static ALL: [&Kernels; 1] = [&REF];

/// What a table needs beyond its ISA's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Nothing.
    Isa,
    /// AVX-VNNI: `vpdpbusd` on 256-bit VEX vectors.
    AvxVnni,
    /// AVX512-VNNI, AVX512-VBMI, GFNI and BMI2.
    Avx512Vnni,
}

impl Needs {
    /// Whether this CPU has it.
    pub(crate) fn available(self) -> bool {
        match self {
            Needs::Isa => true,
            #[cfg(target_arch = "x86_64")]
            Needs::AvxVnni => is_x86_feature_detected!("avxvnni"),
            #[cfg(not(target_arch = "x86_64"))]
            Needs::AvxVnni => false,
            Needs::Avx512Vnni => vnni_available(),
        }
    }
}

/// Whether this CPU runs AVX512-VNNI, AVX512-VBMI, GFNI and BMI2 (Ice Lake, Zen 4 and
/// later; Cascade Lake has VNNI only and takes the F/BW/VL table).
fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vbmi")
            && is_x86_feature_detected!("gfni")
            && is_x86_feature_detected!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Kernels {
    /// The fastest kernels of `isa` this CPU runs, or `None` where it lacks
    /// `isa`: on a CPU that splits 512-bit operations, [`AVX512_VNNI_HALF`].
    pub fn for_isa(isa: Isa) -> Option<&'static Kernels> {
        #[cfg(target_arch = "x86_64")]
        let half = Some(&AVX512_VNNI_HALF);
        #[cfg(not(target_arch = "x86_64"))]
        let half = None;
        crate::ggml::dot::fastest_for(Kernels::variants(), isa, |k| k.isa, half)
    }

    /// Every table this CPU runs, slowest first: one per ISA, and for
    /// AVX-512 both the F/BW/VL table and, where detected, the VNNI + VBMI
    /// one (so that tests and benchmarks reach every path).
    pub fn variants() -> Vec<&'static Kernels> {
        ALL.iter()
            .copied()
            .filter(|k| k.isa.available() && k.needs.available())
            .collect()
    }

    /// The table of that name ([`Kernels::name`]) if this CPU runs it.
    pub fn by_name(name: &str) -> Option<&'static Kernels> {
        Kernels::variants().into_iter().find(|k| k.name == name)
    }

    /// The ISA of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The table's name: `ref`, `avx2`, `avx2-vnni` (+ AVX-VNNI),
    /// `avx512-bw` (F/BW/VL), `avx512-vnni` (+ VNNI + VBMI) or Zen 4's
    /// `avx512-vnni-half`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The batched kernel a product of `n` activation rows with a `format`
    /// matrix takes, if any (`super::tile`: from its
    /// [`super::tile::Tile::min_rows`], on a table that has one).
    pub fn tile(&self, format: Format, n: usize) -> Option<super::tile::Tile> {
        self.tile
            .filter(|t| n >= t.min_rows(format) && super::tile::unpacks(format))
    }

    /// `out[t] = row · acts[t]` for one packed row of `format` (`out.len() == acts.n`).
    pub fn row_dot(&self, format: Format, row: &[u8], acts: &QuantizedActs, out: &mut [f32]) {
        self.rows_dot(format, row, row.len(), acts, out);
    }

    /// `out[r·n + t] = row_r · acts[t]` for the `out.len() / n` consecutive
    /// packed rows of `row_bytes` bytes at the start of `rows`. Panics if
    /// `rows` is too short (callers pass a checked [`super::PackedMatrix`]).
    pub fn rows_dot(
        &self,
        format: Format,
        rows: &[u8],
        row_bytes: usize,
        acts: &QuantizedActs,
        out: &mut [f32],
    ) {
        let f = match format {
            Format::Q3 | Format::Q3Rtn => self.q3,
            Format::Q4 => self.q4,
            Format::Q8 => self.q8,
            Format::Q3Tcq => self.q3tcq,
            native => panic!(
                "{native} takes f32 activations: PackedMatrix::matmul routes it to rows_dot_exact"
            ),
        };
        assert!(
            row_bytes >= format.row_bytes(acts.cols),
            "packed row narrower than the activations"
        );
        // SAFETY: a `Kernels` is only handed out by `variants` (through
        // `for_isa`, `by_name`), which checked that this CPU runs its ISA
        // (`Isa::available`) and, for the VNNI table, `avx512vnni`.
        unsafe { f(rows, row_bytes, format.grid(), acts, out) }
    }
}

impl Kernels {
    /// `out[i·n + t] = decode(row r0 + i) · x[t]` for the `out.len() / n` rows
    /// from `r0` of a native matrix `m` (x is (n, cols), `buf` a scratch row).
    pub fn rows_dot_exact(
        &self,
        m: &super::PackedMatrix<'_>,
        r0: usize,
        x: &[f32],
        n: usize,
        buf: &mut [f32],
        out: &mut [f32],
    ) {
        assert!(m.format().is_exact(), "{} is a block format", m.format());
        (self.exact)(m, r0, x, n, buf, out);
    }
}

/// The kernels every caller uses: the best ISA of this CPU, or the table
/// `WASTE_KERNELS` names (a table's name first, then an ISA's: its best
/// table), falling back, with a note on stderr, when the CPU lacks it.
pub fn kernels() -> &'static Kernels {
    static CHOSEN: OnceLock<&'static Kernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let best = Isa::ALL
            .iter()
            .rev()
            .find_map(|&i| Kernels::for_isa(i))
            .unwrap_or(&REF);
        let Ok(want) = std::env::var("WASTE_KERNELS") else {
            return best;
        };
        let known = Isa::ALL.iter().any(|i| i.name() == want) || ALL.iter().any(|k| k.name == want);
        let found = Kernels::by_name(&want).or_else(|| {
            Isa::ALL
                .iter()
                .find(|i| i.name() == want)
                .and_then(|&i| Kernels::for_isa(i))
        });
        found.unwrap_or_else(|| {
            let why = if known {
                "this CPU lacks it"
            } else {
                "unknown (ref|avx2|avx2-vnni|avx512|avx512-bw|avx512-vnni-half|avx512-vnni)"
            };
            eprintln!("WASTE_KERNELS={want}: {why}, using {}", best.name);
            best
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_unique_names_and_isa_picks_the_fastest() {
        let v = Kernels::variants();
        assert_eq!(v[0].name(), "ref");
        for (i, k) in v.iter().enumerate() {
            assert!(v[i + 1..].iter().all(|o| o.name() != k.name()));
            assert!(std::ptr::eq(Kernels::by_name(k.name()).unwrap(), *k));
        }
        // The last table of each ISA is the one `for_isa` hands out.
        for isa in Isa::ALL {
            let last = v.iter().rev().find(|k| k.isa() == isa);
            assert_eq!(
                last.map(|k| k.name()),
                Kernels::for_isa(isa).map(Kernels::name)
            );
        }
    }
}
