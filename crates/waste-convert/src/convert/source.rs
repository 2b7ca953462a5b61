//! The model being converted, read through one interface whatever holds
//! it: a Hugging Face safetensors folder (`waste_format::Checkpoint`: bf16,
//! f32, f16, fp8 blocks, int4 and MXFP4 packs) or a GGUF file
//! ([`GgufCheckpoint`]), optionally seen through a sparse upcycling
//! ([`Upcycle`]) that turns its dense FFNs into experts. Owns naming
//! (logical HF names), storage kinds, exact loading and the release bytes of
//! weights kept native; knows nothing of the store layout.

use std::path::{Path, PathBuf};

use safetensors::Dtype;
use serde_json::Value;
use waste_format::checkpoint::RawTensor;
use waste_format::manifest::{Source as SourceIdentity, SourceFile, sha256_hex};
use waste_format::{Checkpoint, Storage};
use waste_kernels::native::{FP8_BLOCK, INT4_GROUP, MXFP4_GROUP};
use waste_kernels::{Format, Tensor, TensorData};

use super::upcycle::{Resolved, Upcycle};
use crate::error::{Error, Result};
use crate::gguf::{GgmlType, GgufCheckpoint};

/// What holds the weights.
#[derive(Debug)]
pub enum Origin {
    Hf(Checkpoint),
    Gguf(GgufCheckpoint),
}

/// How a logical tensor is stored in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    F32,
    Bf16,
    F16,
    /// FP8 E4M3FN with a scale per `block` (rows, cols).
    Fp8 {
        block: [usize; 2],
    },
    /// compressed-tensors int4, one scale per `group` inputs.
    Int4 {
        group: usize,
    },
    /// MXFP4, one E8M0 scale per `group` inputs.
    Mxfp4 {
        group: usize,
    },
    /// waste's q8 backbone blocks.
    Q8,
    /// ggml blocks of this type (not F32, F16 or BF16, which are the kinds
    /// above): a run of a GGUF tensor's rows, or a backbone weight a
    /// conversion kept as such.
    Ggml(GgmlType),
    /// waste's 4- or 3-bit backbone blocks.
    Blocks(Format),
    /// Made up by the converter (an upcycled router).
    Synthetic,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::F32 => f.write_str("f32"),
            Kind::Bf16 => f.write_str("bf16"),
            Kind::F16 => f.write_str("f16"),
            Kind::Fp8 { block } => write!(f, "fp8 e4m3 {}x{} blocks", block[0], block[1]),
            Kind::Int4 { group } => write!(f, "int4 g{group}"),
            Kind::Mxfp4 { group } => write!(f, "mxfp4 g{group}"),
            Kind::Q8 => f.write_str("q8"),
            Kind::Ggml(t) => write!(f, "GGUF {t}"),
            Kind::Blocks(format) => write!(f, "{format}"),
            Kind::Synthetic => f.write_str("synthetic f32"),
        }
    }
}

impl Kind {
    /// Bytes per value once loaded in RAM by the model when it is not kept
    /// as blocks (bf16 stays bf16, everything else decodes to f32).
    pub fn ram_bytes_per_value(&self) -> u64 {
        match self {
            Kind::Bf16 => 2,
            _ => 4,
        }
    }
}

/// Shape and storage of a logical tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub shape: Vec<usize>,
    pub kind: Kind,
}

/// A model to convert.
#[derive(Debug)]
pub struct Source {
    origin: Origin,
    /// The path as given (recorded in the manifest).
    path: PathBuf,
    config: Value,
    /// Logical tensor names, sorted.
    names: Vec<String>,
    upcycle: Option<Upcycle>,
}

impl Source {
    /// Opens a `.gguf` file or a Hugging Face folder / cache snapshot.
    pub fn open(path: &Path) -> Result<Self> {
        let is_gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        let origin = if path.is_file() && is_gguf {
            Origin::Gguf(GgufCheckpoint::open(path)?)
        } else {
            Origin::Hf(Checkpoint::open(path)?)
        };
        let (config, names) = match &origin {
            Origin::Hf(c) => (
                c.config_json().clone(),
                c.tensor_names().into_iter().map(str::to_owned).collect(),
            ),
            Origin::Gguf(g) => (
                g.config_json().clone(),
                g.tensor_names().into_iter().map(str::to_owned).collect(),
            ),
        };
        Ok(Self {
            origin,
            path: path.to_path_buf(),
            config,
            names,
            upcycle: None,
        })
    }

    /// Sees the dense checkpoint as a Mixtral-style MoE of `experts` copies
    /// of each FFN under a seeded top-`top_k` router (sparse upcycling).
    pub fn upcycled(mut self, experts: usize, top_k: usize, seed: u64) -> Result<Self> {
        let up = Upcycle::new(&self.config, &self.names, experts, top_k, seed)
            .map_err(|reason| self.config_error(reason))?;
        self.names = up.names(&self.names);
        self.config = up.config(&self.config);
        self.upcycle = Some(up);
        Ok(self)
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `huggingface` or `gguf` (the manifest's source kind).
    pub fn kind_name(&self) -> &'static str {
        match self.origin {
            Origin::Hf(_) => "huggingface",
            Origin::Gguf(_) => "gguf",
        }
    }

    /// The config.json (synthesised for GGUF, rewritten when upcycled).
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// Where the config comes from, for error messages.
    pub fn config_path(&self) -> PathBuf {
        match &self.origin {
            Origin::Hf(c) => c.config_path().to_path_buf(),
            Origin::Gguf(g) => g.path().to_path_buf(),
        }
    }

    pub fn config_error(&self, reason: impl Into<String>) -> Error {
        Error::Config {
            path: self.config_path(),
            reason: reason.into(),
        }
    }

    /// Logical tensor names, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn resolve<'a>(&'a self, name: &'a str) -> Resolved<'a> {
        match &self.upcycle {
            Some(up) => up.resolve(name),
            None => Resolved::Source(name),
        }
    }

    pub fn info(&self, name: &str) -> Result<Info> {
        let name = match self.resolve(name) {
            Resolved::Source(n) => n,
            Resolved::Router { .. } => {
                let up = self.upcycle.as_ref().expect("a router implies an upcycle");
                return Ok(Info {
                    shape: up.router_shape(),
                    kind: Kind::Synthetic,
                });
            }
        };
        match &self.origin {
            Origin::Hf(c) => {
                let info = c.info(name)?;
                let kind = match info.storage {
                    Storage::F32 => Kind::F32,
                    Storage::Bf16 => Kind::Bf16,
                    Storage::F16 => Kind::F16,
                    Storage::Fp8Block { block } => Kind::Fp8 { block },
                    Storage::Int4PackQuantized { group_size } => Kind::Int4 { group: group_size },
                    Storage::Mxfp4PackQuantized { group_size } => Kind::Mxfp4 { group: group_size },
                    Storage::Q8 => Kind::Q8,
                    Storage::Ggml { ggml_type } => Kind::Ggml(ggml_type),
                    Storage::Blocks { format } => Kind::Blocks(format),
                    Storage::Unsupported { dtype } => {
                        return Err(Error::Unsupported {
                            path: info.shard,
                            tensor: name.to_string(),
                            dtype,
                        });
                    }
                };
                Ok(Info {
                    shape: info.shape,
                    kind,
                })
            }
            Origin::Gguf(g) => {
                let (shape, t) = g.info(name).ok_or_else(|| Error::MissingTensor {
                    name: name.to_string(),
                })?;
                let kind = match t.ggml_type {
                    GgmlType::F32 => Kind::F32,
                    GgmlType::BF16 => Kind::Bf16,
                    GgmlType::F16 if g.is_stored_rows(name) => Kind::F16,
                    other if g.is_stored_rows(name) => Kind::Ggml(other),
                    // Assembled from several tensors: decoded to f32.
                    _ => Kind::F32,
                };
                Ok(Info { shape, kind })
            }
        }
    }

    /// The values of a logical tensor, decoded exactly (bf16 stays bf16).
    pub fn load(&self, name: &str) -> Result<Tensor> {
        match self.resolve(name) {
            Resolved::Source(n) => match &self.origin {
                Origin::Hf(c) => Ok(c.load(n)?),
                Origin::Gguf(g) => g.load(n),
            },
            Resolved::Router { layer } => Ok(self
                .upcycle
                .as_ref()
                .expect("a router implies an upcycle")
                .router(layer)),
        }
    }

    /// The source tensor a logical name reads (itself unless upcycled):
    /// experts that alias one dense FFN share it, so their records match.
    pub fn source_name<'a>(&'a self, name: &'a str) -> &'a str {
        match self.resolve(name) {
            Resolved::Source(n) => n,
            Resolved::Router { .. } => name,
        }
    }

    /// The native format of a 2-D weight: the release's own encoding when a
    /// kernel format matches it exactly, else `f32` (exact decode). A GGUF
    /// tensor keeps its ggml blocks (F16 included) when its rows are whole
    /// blocks, as ggml requires of every tensor it writes.
    pub fn native_format(&self, info: &Info) -> Format {
        let [_, cols] = info.shape[..] else {
            return Format::F32;
        };
        let gguf = matches!(self.origin, Origin::Gguf(_));
        match &info.kind {
            Kind::Bf16 => Format::Bf16,
            Kind::F16 if gguf => Format::ggml(GgmlType::F16).unwrap_or(Format::F32),
            Kind::Ggml(t) if gguf => match (Format::ggml(*t), t.block()) {
                (Some(f), Some((qk, _))) if cols % qk == 0 => f,
                _ => Format::F32,
            },
            Kind::Fp8 { block } if *block == [FP8_BLOCK; 2] => Format::Fp8Block128,
            Kind::Int4 { group } if *group == INT4_GROUP => Format::Int4G32,
            // An odd width would need a half byte per row: keep f32.
            Kind::Mxfp4 { group } if *group == MXFP4_GROUP && cols % 2 == 0 => Format::Mxfp4,
            _ => Format::F32,
        }
    }

    /// The packed bytes of 2-D weight `name` in `format`, which must be its
    /// [`Self::native_format`], `f32` (exact decode) or `bf16` for a bf16
    /// source. The release's bytes are copied, planes concatenated.
    pub fn native_matrix(&self, name: &str, format: Format) -> Result<Vec<u8>> {
        let info = self.info(name)?;
        let bad = |reason: String| Error::BadTensor {
            path: self.path.clone(),
            tensor: name.to_string(),
            reason,
        };
        let [rows, cols] = info.shape[..] else {
            return Err(bad(format!("a matrix must be 2-D, got {:?}", info.shape)));
        };
        let natural = self.native_format(&info);
        if format == Format::F32 || (format == Format::Bf16 && natural != Format::Bf16) {
            let t = self.load(name)?;
            let values = t.into_f32();
            return Ok(waste_kernels::quantize(format, rows, cols, &values)
                .map_err(|e| bad(e.to_string()))?
                .bytes);
        }
        if format != natural {
            return Err(bad(format!(
                "stored as {}, which cannot be kept as {format}",
                info.kind
            )));
        }
        let src = self.source_name(name);
        if let (Origin::Gguf(g), Format::Ggml(_)) = (&self.origin, format) {
            let Some((_, blocks)) = g.row_blocks(src)? else {
                return Err(bad(
                    "assembled from several tensors: no stored blocks".into()
                ));
            };
            waste_kernels::PackedMatrix::new(format, rows, cols, &blocks)
                .map_err(|e| bad(e.to_string()))?;
            return Ok(blocks);
        }
        let planes = |codes: &[u8], scales: &[u8]| {
            waste_kernels::native::matrix_bytes(format, rows, cols, codes, scales)
                .map_err(|e| bad(e.to_string()))
        };
        match (&self.origin, format) {
            (_, Format::Bf16) => match self.load(name)?.data {
                TensorData::Bf16(v) => {
                    Ok(v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect())
                }
                TensorData::F32(_)
                | TensorData::Q8(_)
                | TensorData::Ggml(..)
                | TensorData::Packed(..) => {
                    Err(bad("bf16 storage loaded in another precision".into()))
                }
            },
            (Origin::Hf(c), Format::Fp8Block128) => {
                let weight = c.stored_owned(src)?;
                let scale = c.stored_owned(&format!("{src}_scale_inv"))?;
                planes(weight.data, &f32_plane(&scale, &bad)?)
            }
            (Origin::Hf(c), Format::Int4G32 | Format::Mxfp4) => {
                let prefix = src.strip_suffix(".weight").unwrap_or(src);
                let packed = c.stored_owned(&format!("{prefix}.weight_packed"))?;
                let scale = c.stored_owned(&format!("{prefix}.weight_scale"))?;
                if format == Format::Int4G32 && scale.dtype != Dtype::BF16 {
                    // Exact bf16 scales are what the format stores; others take f32.
                    return self.native_matrix(name, Format::F32);
                }
                planes(packed.data, scale.data)
            }
            _ => Err(bad(format!("no native path for {format}"))),
        }
    }

    /// The stored tensors (quantization parts included) of logical `name`,
    /// as the file holds them: what a native backbone copies. Hugging Face
    /// sources only.
    pub fn stored_parts(&self, name: &str) -> Result<Vec<RawTensor<'_>>> {
        let Origin::Hf(c) = &self.origin else {
            return Err(Error::MissingTensor {
                name: name.to_string(),
            });
        };
        let prefix = name.strip_suffix(".weight").unwrap_or(name);
        let mut parts = Vec::new();
        let candidates = [
            name.to_string(),
            format!("{name}_scale_inv"),
            format!("{prefix}.weight_packed"),
            format!("{prefix}.weight_scale"),
            format!("{prefix}.weight_shape"),
            format!("{prefix}.weight_q8"),
            format!("{prefix}.weight_blocks"),
            format!("{prefix}.weight_format"),
        ];
        for stored in candidates {
            if let Ok(raw) = c.stored_owned(&stored) {
                parts.push(raw);
            }
        }
        Ok(parts)
    }

    /// Provenance for the manifest: the path as given, the kind, the sha256
    /// of the config (the GGUF's synthesised one) and every input file.
    pub fn identity(&self) -> Result<SourceIdentity> {
        let (config_sha256, files) = match &self.origin {
            Origin::Hf(c) => {
                let config = match fs_err::read(c.config_path()) {
                    Ok(bytes) => sha256_hex(&bytes),
                    Err(_) => sha256_hex(b"null"),
                };
                let mut files = Vec::new();
                for p in c.shard_paths() {
                    let bytes = fs_err::metadata(p).map_err(|e| Error::io(p, e))?.len();
                    let name = p
                        .strip_prefix(c.dir())
                        .unwrap_or(p)
                        .to_string_lossy()
                        .into_owned();
                    files.push(SourceFile { name, bytes });
                }
                files.sort_by(|a, b| a.name.cmp(&b.name));
                (config, files)
            }
            Origin::Gguf(g) => {
                // Every part of a split model, in part order (their names
                // sort the same way).
                let mut files = Vec::new();
                for p in g.file().part_paths() {
                    let bytes = fs_err::metadata(p).map_err(|e| Error::io(p, e))?.len();
                    let name = p
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    files.push(SourceFile { name, bytes });
                }
                (sha256_hex(g.config_json().to_string().as_bytes()), files)
            }
        };
        Ok(SourceIdentity {
            path: self.path.to_string_lossy().into_owned(),
            kind: self.kind_name().to_string(),
            config_sha256,
            files,
        })
    }
}

/// A float scale tensor widened to f32 little-endian bytes (exact).
fn f32_plane(raw: &RawTensor<'_>, bad: &impl Fn(String) -> Error) -> Result<Vec<u8>> {
    let values = waste_format::decode::float_to_f32(raw.dtype, raw.data)
        .ok_or_else(|| bad(format!("{} scales of {}", raw.dtype, raw.name)))?;
    Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

impl waste_kernels::TensorSource for Source {
    fn contains(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, waste_kernels::TensorSourceError> {
        Ok(Source::load(self, name)?)
    }
}
