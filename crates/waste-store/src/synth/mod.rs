//! `waste synth-store`: a complete store written directly, for benchmarks
//! at real scale: expert records of a family's real size and format (valid
//! packed records, so ComputeExperts and a node can run them) with random
//! contents, a random backbone (bf16, or its matrices in waste's q8, q4 or
//! q3 blocks as `waste convert --backbone q8|q4|q3` writes them) with a byte-level
//! tokenizer, each folder's completion marker (after
//! `backbone/waste-backbone.json`, as `waste convert` writes them), and a
//! manifest written last. It checks free space before
//! writing anything.
//!
//! Records are cheap to make: per layer, a block of random rows is
//! quantized once per matrix, and each expert's matrix tiles those rows
//! from its own seeded start, so records differ (distinct checksums, no
//! dedup possible) while only a few megabytes are ever quantized.

mod families;
pub mod tokenizer;

use std::collections::BTreeMap;
use std::path::Path;

use half::bf16;
use waste_format::backbone::{
    BLOCKS_SUFFIX, FORMAT_SUFFIX, SHAPE_SUFFIX, SafetensorsWriter, TensorSpec, format_id_bytes,
    shape_bytes, shard_files, write_index,
};
use waste_format::experts::LayerHeader;
use waste_format::manifest::{Finish, Source, sha256_hex};
use waste_format::{ExpertsIndex, LayerWriter, io::available_bytes};
use waste_kernels::record::{Recipe, build_record, record_len};
use waste_kernels::{Format, Quantized, quantize};

pub use families::Family;
pub use waste_family::release::ExpertShape;

use crate::error::{Error, Result};

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthSpec {
    pub family: Family,
    pub layers: u32,
    pub experts: u32,
    pub recipe: Recipe,
    pub seed: u64,
    /// Write experts/ only (what `waste bench store` reads), no backbone.
    pub experts_only: bool,
    /// How the backbone's matrices are stored.
    pub backbone: BackboneFormat,
}

/// The precision of a synthetic backbone's matrices (`--backbone`), named as
/// `waste convert` names them. Norms, routers and vectors stay as the
/// family has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackboneFormat {
    #[default]
    Bf16,
    /// waste `q8` blocks, which a node holds packed: about half of bf16.
    Q8,
    /// waste `q4` blocks (4.25 bits per weight), held packed.
    Q4,
    /// waste `q3` blocks (3.25 bits per weight), held packed.
    Q3,
}

impl BackboneFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Q8 => "q8",
            Self::Q4 => "q4",
            Self::Q3 => "q3",
        }
    }

    /// The block format of the matrices; `None` for bf16.
    fn blocks(self) -> Option<Format> {
        match self {
            Self::Bf16 => None,
            Self::Q8 => Some(Format::Q8),
            Self::Q4 => Some(Format::Q4),
            Self::Q3 => Some(Format::Q3),
        }
    }
}

impl std::str::FromStr for BackboneFormat {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bf16" => Ok(Self::Bf16),
            "q8" => Ok(Self::Q8),
            "q4" => Ok(Self::Q4),
            "q3" => Ok(Self::Q3),
            other => Err(format!(
                "unknown backbone format {other:?} (bf16, q8, q4, q3)"
            )),
        }
    }
}

impl SynthSpec {
    /// Whether the store gets a backbone a node can load.
    pub fn writes_backbone(&self) -> bool {
        self.family.has_backbone() && !self.experts_only
    }
}

/// Sizes of the store a spec makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthPlan {
    pub record_bytes: u64,
    pub expert_bytes: u64,
    pub backbone_bytes: u64,
}

impl SynthPlan {
    pub fn total(&self) -> u64 {
        self.expert_bytes + self.backbone_bytes
    }
}

/// Rows of random weights quantized per matrix and layer.
const BASE_ROWS: usize = 256;

fn bad(reason: String) -> Error {
    Error::Config { reason }
}

/// Sizes, before anything is written.
pub fn plan(spec: &SynthSpec) -> Result<SynthPlan> {
    let e = spec.family.experts();
    if spec.layers == 0 || spec.experts == 0 || spec.layers > 1000 || spec.experts > 100_000 {
        return Err(bad(format!(
            "--layers {} / --experts {} out of range",
            spec.layers, spec.experts
        )));
    }
    let rec = record_len(spec.recipe.formats(), e.d_model, e.d_ff)
        .ok_or_else(|| bad("record size overflows".into()))? as u64;
    let expert_bytes =
        u64::from(spec.layers) * u64::from(spec.experts) * waste_format::align_up(rec);
    let backbone_bytes = if spec.writes_backbone() {
        backbone_tensors(spec)
            .iter()
            .flatten()
            .flat_map(Logical::specs)
            .map(|t| t.bytes as u64)
            .sum()
    } else {
        0
    };
    Ok(SynthPlan {
        record_bytes: rec,
        expert_bytes,
        backbone_bytes,
    })
}

/// Writes the store into `out` (created; must be empty or absent).
/// `progress(done, total)` counts expert records.
pub fn write_store(
    out: &Path,
    spec: &SynthSpec,
    mut progress: impl FnMut(u64, u64),
) -> Result<SynthPlan> {
    let plan = plan(spec)?;
    let io = |p: &Path| {
        let path = p.to_path_buf();
        move |source| Error::Io { path, source }
    };
    if out.exists() && fs_err::read_dir(out).map_err(io(out))?.next().is_some() {
        return Err(bad(format!("{} exists and is not empty", out.display())));
    }
    let (experts, backbone) = (out.join("experts"), out.join("backbone"));
    fs_err::create_dir_all(&experts).map_err(io(&experts))?;
    let free = available_bytes(out)?;
    let need = plan.total() + plan.total() / 50 + (64 << 20);
    if free < need {
        return Err(bad(format!(
            "{} has {:.2} GB free, the store needs {:.2} GB",
            out.display(),
            free as f64 / 1e9,
            need as f64 / 1e9
        )));
    }
    write_experts(&experts, spec, &mut progress)?;
    if spec.writes_backbone() {
        fs_err::create_dir_all(&backbone).map_err(io(&backbone))?;
        write_backbone(&backbone, spec)?;
    } else {
        fs_err::create_dir_all(&backbone).map_err(io(&backbone))?;
        write_index(&backbone, &BTreeMap::new(), 0)?;
    }
    let created_by = format!("waste synth-store {}", env!("CARGO_PKG_VERSION"));
    let shards = shard_files(&backbone)?;
    let config = spec
        .family
        .config(spec.layers, spec.experts, tokenizer::VOCAB, tokenizer::EOS);
    waste_format::manifest::finish_store(
        out,
        shards.iter().map(String::as_str),
        Finish {
            created_by: &created_by,
            source: Source {
                path: format!("synth:{}:seed={}", spec.family.name(), spec.seed),
                kind: "synth".into(),
                config_sha256: sha256_hex(config.to_string().as_bytes()),
                files: Vec::new(),
            },
            experts_format: spec.recipe.name(),
            backbone_format: spec.backbone.name(),
        },
    )?;
    Ok(plan)
}

/// A seeded xorshift stream: fast, and the same bytes for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn write_experts(dir: &Path, spec: &SynthSpec, progress: &mut impl FnMut(u64, u64)) -> Result<()> {
    let e = spec.family.experts();
    let formats = spec.recipe.formats();
    let mut index = ExpertsIndex::new(
        spec.family.model_type(),
        spec.recipe.name(),
        formats[0].id(),
        e.top_k.min(spec.experts),
    );
    index.activation = spec.family.activation();
    let total = u64::from(spec.layers) * u64::from(spec.experts);
    let mut done = 0;
    let q = |f, rows: usize, cols: usize, rng: &mut Rng| -> Result<Quantized> {
        // Roughly the scale of trained expert weights (std ~ 1/sqrt(cols)).
        let scale = 1.7 / (cols as f32).sqrt();
        let w: Vec<f32> = (0..rows * cols).map(|_| rng.unit() * scale).collect();
        quantize(f, rows, cols, &w).map_err(|k| bad(format!("quantize: {k}")))
    };
    for layer in 0..spec.layers {
        let mut rng = Rng::new(spec.seed ^ (u64::from(layer) << 32));
        let shapes = [
            (e.d_ff, e.d_model),
            (e.d_ff, e.d_model),
            (e.d_model, e.d_ff),
        ];
        let bases = (0..3)
            .map(|i| {
                q(
                    formats[i],
                    BASE_ROWS.min(shapes[i].0),
                    shapes[i].1,
                    &mut rng,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let rec_len = record_len(formats, e.d_model, e.d_ff).expect("planned");
        let h = LayerHeader::new(
            layer,
            spec.experts,
            formats[0].id(),
            e.d_model as u32,
            e.d_ff as u32,
            rec_len as u64,
        );
        let mut w = LayerWriter::create(dir, h)?;
        for _ in 0..spec.experts {
            let parts: Vec<Quantized> = bases
                .iter()
                .zip(shapes)
                .map(|(b, (rows, cols))| tile_rows(b, rows, cols, rng.next_u64()))
                .collect();
            let rec = build_record(&parts[0], &parts[1], &parts[2])
                .map_err(|k| bad(format!("record: {k}")))?;
            w.push(&rec)?;
            done += 1;
            progress(done, total);
        }
        index.layers.push(w.finish()?);
    }
    index.save(dir)?;
    Ok(())
}

/// A (rows, cols) matrix whose packed rows cycle through `base`'s from `start`.
fn tile_rows(base: &Quantized, rows: usize, cols: usize, start: u64) -> Quantized {
    let rb = base.format.row_bytes(cols);
    let n = base.rows;
    let mut bytes = Vec::with_capacity(rows * rb);
    let s = (start % n as u64) as usize;
    for r in 0..rows {
        let i = (s + r) % n;
        bytes.extend_from_slice(&base.bytes[i * rb..(i + 1) * rb]);
    }
    Quantized {
        format: base.format,
        rows,
        cols,
        bytes,
        sq_error: 0.0,
        sq_norm: 0.0,
    }
}

/// How one synthetic backbone tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    F32,
    Bf16,
    /// `<p>.weight_blocks` of this format, `<p>.weight_shape` and
    /// `<p>.weight_format`, as `waste convert --backbone q8|q4|q3` writes it.
    Blocks(Format),
}

/// One logical tensor of a synthetic backbone.
#[derive(Debug, Clone)]
struct Logical {
    name: String,
    shape: Vec<usize>,
    stored: Stored,
}

impl Logical {
    /// The safetensors entries it is written as (two for q8: blocks, shape).
    fn specs(&self) -> Vec<TensorSpec> {
        match self.stored {
            Stored::F32 | Stored::Bf16 => {
                let f32_ = self.stored == Stored::F32;
                vec![TensorSpec {
                    name: self.name.clone(),
                    dtype: if f32_ { "F32" } else { "BF16" }.into(),
                    shape: self.shape.clone(),
                    bytes: self.shape.iter().product::<usize>() * if f32_ { 4 } else { 2 },
                }]
            }
            Stored::Blocks(format) => {
                let prefix = self.prefix();
                let (rows, cols) = (self.shape[0], self.shape[1]);
                let row_bytes = format.row_bytes(cols);
                vec![
                    TensorSpec {
                        name: format!("{prefix}{BLOCKS_SUFFIX}"),
                        dtype: "U8".into(),
                        shape: vec![rows, row_bytes],
                        bytes: rows * row_bytes,
                    },
                    TensorSpec {
                        name: format!("{prefix}{SHAPE_SUFFIX}"),
                        dtype: "I64".into(),
                        shape: vec![2],
                        bytes: 16,
                    },
                    TensorSpec {
                        name: format!("{prefix}{FORMAT_SUFFIX}"),
                        dtype: "I64".into(),
                        shape: vec![1],
                        bytes: 8,
                    },
                ]
            }
        }
    }

    fn prefix(&self) -> &str {
        self.name.strip_suffix(".weight").unwrap_or(&self.name)
    }
}

/// The backbone's logical tensors, in shards: one per decoder layer, then
/// embeddings, final norm and head. In q8, every matrix named `.weight`
/// except the routers (`.gate.weight`) is stored as blocks, as `waste
/// convert --backbone q8` stores it.
fn backbone_tensors(spec: &SynthSpec) -> Vec<Vec<Logical>> {
    let f = spec.family;
    let h = f.hidden();
    let mk = |(name, shape, f32_): (String, Vec<usize>, bool)| {
        let matrix =
            shape.len() == 2 && name.ends_with(".weight") && !name.ends_with(".gate.weight");
        let stored = match (f32_, spec.backbone) {
            (true, _) => Stored::F32,
            (false, b) if matrix => b.blocks().map_or(Stored::Bf16, Stored::Blocks),
            (false, _) => Stored::Bf16,
        };
        Logical {
            name,
            shape,
            stored,
        }
    };
    let mut shards: Vec<Vec<Logical>> = (0..spec.layers)
        .map(|i| {
            f.layer_tensors(i, spec.experts)
                .into_iter()
                .map(mk)
                .collect()
        })
        .collect();
    let v = tokenizer::VOCAB;
    shards.push(
        [
            ("model.embed_tokens.weight".to_string(), vec![v, h], false),
            ("model.norm.weight".to_string(), vec![h], false),
            ("lm_head.weight".to_string(), vec![v, h], false),
        ]
        .into_iter()
        .map(mk)
        .collect(),
    );
    shards
}

fn write_backbone(dir: &Path, spec: &SynthSpec) -> Result<()> {
    let io = |p: &Path| {
        let path = p.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let shards = backbone_tensors(spec);
    let n = shards.len();
    let mut weight_map = BTreeMap::new();
    let mut total = 0u64;
    let mut rng = Rng::new(spec.seed ^ 0xBAC_CB0E);
    for (i, tensors) in shards.into_iter().enumerate() {
        let name = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        let specs: Vec<TensorSpec> = tensors.iter().flat_map(Logical::specs).collect();
        let mut w = SafetensorsWriter::create(&dir.join(&name), specs.clone(), &BTreeMap::new())?;
        for t in &tensors {
            let count = t.shape.iter().product::<usize>();
            let is_norm = t.name.ends_with("norm.weight");
            // Norm weights near 1, matrices small (std ~ 0.6/sqrt(fan-in)), so
            // activations stay finite through the random layers.
            let scale = 1.0 / (*t.shape.last().unwrap_or(&1) as f32).sqrt();
            let mut value = || match t.stored {
                Stored::F32 => rng.unit() * 0.1,
                _ if is_norm => 1.0 + 0.1 * rng.unit(),
                _ => rng.unit() * scale,
            };
            match t.stored {
                Stored::F32 => {
                    let bytes: Vec<u8> = (0..count).flat_map(|_| value().to_le_bytes()).collect();
                    w.write(&t.name, &bytes)?;
                }
                Stored::Bf16 => {
                    let bytes: Vec<u8> = (0..count)
                        .flat_map(|_| bf16::from_f32(value()).to_le_bytes())
                        .collect();
                    w.write(&t.name, &bytes)?;
                }
                Stored::Blocks(format) => {
                    let (rows, cols) = (t.shape[0], t.shape[1]);
                    let values: Vec<f32> = (0..count).map(|_| value()).collect();
                    let q = quantize(format, rows, cols, &values)
                        .map_err(|e| bad(format!("{}: {e}", t.name)))?;
                    w.write(&format!("{}{BLOCKS_SUFFIX}", t.prefix()), &q.bytes)?;
                    w.write(
                        &format!("{}{SHAPE_SUFFIX}", t.prefix()),
                        &shape_bytes(rows, cols),
                    )?;
                    w.write(
                        &format!("{}{FORMAT_SUFFIX}", t.prefix()),
                        &format_id_bytes(format),
                    )?;
                }
            }
        }
        for s in &specs {
            weight_map.insert(s.name.clone(), name.clone());
            total += s.bytes as u64;
        }
        w.finish()?;
    }
    write_index(dir, &weight_map, total)?;
    let config = spec
        .family
        .config(spec.layers, spec.experts, tokenizer::VOCAB, tokenizer::EOS);
    for (file, json) in [
        ("config.json", config),
        ("tokenizer.json", tokenizer::tokenizer_json()),
        ("tokenizer_config.json", tokenizer::tokenizer_config_json()),
    ] {
        let p = dir.join(file);
        fs_err::write(
            &p,
            serde_json::to_vec_pretty(&json).expect("json values serialize"),
        )
        .map_err(io(&p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use waste_format::Manifest;

    #[test]
    fn a_tiny_synth_store_opens_and_its_records_compute() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("s");
        let spec = SynthSpec {
            family: "qwen3-30b-a3b".parse().unwrap(),
            layers: 1,
            experts: 3,
            recipe: Recipe::Q3,
            seed: 7,
            experts_only: false,
            backbone: BackboneFormat::Bf16,
        };
        let p = write_store(&out, &spec, |_, _| {}).unwrap();
        Manifest::load_verified(&out).unwrap();
        let dir = waste_format::ExpertsDir::open(&out.join("experts")).unwrap();
        let mut buf = Vec::new();
        let mut sums = std::collections::HashSet::new();
        for e in 0..3 {
            let loc = dir.read_record(0, e, &mut buf).unwrap();
            assert_eq!(loc.len as u64, p.record_bytes);
            sums.insert(loc.checksum);
            let x = waste_kernels::PackedExpert::parse(&buf[..]).unwrap();
            let mut out = vec![0f32; 2048];
            waste_kernels::ExpertFfn::forward(
                &x,
                &vec![0.5; 2048],
                1,
                waste_kernels::Activation::Silu,
                &mut out,
            )
            .unwrap();
            assert!(out.iter().all(|v| v.is_finite()));
        }
        assert_eq!(sums.len(), 3, "records differ");
        assert!(out.join("backbone/tokenizer.json").is_file());
        assert!(
            write_store(&out, &spec, |_, _| {}).is_err(),
            "refuses a non-empty folder"
        );
    }

    #[test]
    fn a_block_synth_backbone_stores_its_matrices_as_blocks_and_the_rest_as_is() {
        for (backbone, format) in [
            (BackboneFormat::Q8, Format::Q8),
            (BackboneFormat::Q4, Format::Q4),
            (BackboneFormat::Q3, Format::Q3),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("s");
            let spec = SynthSpec {
                family: "qwen3-30b-a3b".parse().unwrap(),
                layers: 1,
                experts: 2,
                recipe: Recipe::Q3,
                seed: 3,
                experts_only: false,
                backbone,
            };
            let p = write_store(&out, &spec, |_, _| {}).unwrap();
            let manifest = Manifest::load_verified(&out).unwrap();
            assert_eq!(manifest.backbone_format, backbone.name());
            let ckpt = waste_format::Checkpoint::open(out.join("backbone")).unwrap();
            let blocks = match format {
                Format::Q8 => waste_format::Storage::Q8,
                format => waste_format::Storage::Blocks { format },
            };
            let (mut stored, mut matrices) = (0u64, 0u64);
            for name in ckpt.tensor_names() {
                let info = ckpt.info(name).unwrap();
                let matrix = !name.ends_with(".gate.weight") && info.shape.len() == 2;
                let want = if matrix {
                    blocks.clone()
                } else {
                    waste_format::Storage::Bf16
                };
                assert_eq!(info.storage, want, "{name}");
                let t = ckpt.load(name).unwrap();
                stored += t.size_bytes() as u64;
                if matrix {
                    matrices += 1;
                    // Exactly the format's rows: its own size, not bf16's.
                    assert_eq!(
                        t.size_bytes(),
                        info.shape[0] * format.row_bytes(info.shape[1]),
                        "{name}"
                    );
                    let values = t.into_f32();
                    assert!(
                        values.iter().all(|v| v.is_finite() && v.abs() < 1.0),
                        "{name}"
                    );
                }
            }
            // The shape (16 bytes) and format (8) companions are on disk, not in RAM.
            assert_eq!(
                stored + 24 * matrices,
                p.backbone_bytes,
                "{}",
                backbone.name()
            );
        }
    }
}
