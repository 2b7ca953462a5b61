//! `waste inspect FILE.gguf` (or a Hugging Face folder): what a release
//! holds as it stands, before any conversion. Tensors are grouped by the
//! same classes as a store's ([`super::tensor_class`]) with the types the
//! file stores them in, their parameters and stored bytes; the routed
//! experts by type, with the bytes a token reads at the model's top-k; and
//! the kernel each stored matrix type runs through here when kept as
//! stored (`--experts native`, `--backbone native`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::Serialize;
use waste_kernels::native::scale_plane_bytes;
use waste_kernels::{Format, kernels};

use super::{Class, tensor_class};
use crate::convert::human_bytes;
use crate::convert::names::parse_expert;
use crate::convert::plan::config_top_k;
use crate::convert::source::{Info, Kind, Origin, Source};
use crate::error::Result;

/// A class of tensors and the types they are stored in.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoredClass {
    #[serde(flatten)]
    pub class: Class,
    /// Stored type -> number of tensors of this class in it.
    pub stored_as: BTreeMap<String, usize>,
}

impl StoredClass {
    fn add(&mut self, ty: String, params: u64, bytes: u64) {
        self.class.tensors += 1;
        self.class.add(params, bytes);
        *self.stored_as.entry(ty).or_default() += 1;
    }
}

/// Everything `waste inspect` reports of a release.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseReport {
    pub path: String,
    /// `gguf` or `huggingface`.
    pub kind: String,
    pub model_type: String,
    pub backbone: BTreeMap<String, StoredClass>,
    pub backbone_total: Class,
    /// Routed experts (one tensor per expert and projection).
    pub experts: StoredClass,
    pub moe_layers: usize,
    pub top_k: u32,
    /// Stored expert bytes one token reads: per MoE layer, top-k experts
    /// of the layer's mean size.
    pub expert_bytes_per_token: u64,
    /// Every stored matrix type -> the kernel its products use here when
    /// kept as stored ([`Format::kernel`]).
    pub kernels: BTreeMap<String, String>,
}

/// Describes the release at `path` (a `.gguf` file, split or not, or a
/// Hugging Face folder) without converting anything.
pub fn inspect_release(path: &Path) -> Result<ReleaseReport> {
    let source = Source::open(path)?;
    let mut backbone: BTreeMap<String, StoredClass> = BTreeMap::new();
    let mut total = Class::default();
    let mut experts = StoredClass::default();
    let mut kernel_of = BTreeMap::new();
    // layer -> (experts seen, their bytes)
    let mut layers: BTreeMap<u32, (BTreeSet<u32>, u64)> = BTreeMap::new();
    for name in source.names() {
        let info = source.info(name)?;
        let params: u64 = info.shape.iter().map(|&d| d as u64).product();
        let (ty, bytes) = stored(&source, name, &info, params);
        if info.shape.len() == 2 {
            let f = source.native_format(&info);
            kernel_of.insert(f.name().to_string(), f.kernel(kernels()));
        }
        match parse_expert(name) {
            Some((e, _)) => {
                experts.add(ty, params, bytes);
                let layer = layers.entry(e.layer).or_default();
                layer.0.insert(e.expert);
                layer.1 += bytes;
            }
            None => {
                let class = backbone.entry(tensor_class(name).to_string()).or_default();
                class.add(ty, params, bytes);
                total.tensors += 1;
                total.add(params, bytes);
            }
        }
    }
    backbone.values_mut().for_each(|c| c.class.finish());
    total.finish();
    experts.class.finish();
    let top_k = if layers.is_empty() {
        0
    } else {
        config_top_k(source.config()).unwrap_or(0)
    };
    let expert_bytes_per_token = layers
        .values()
        .map(|(ids, bytes)| bytes / ids.len().max(1) as u64 * u64::from(top_k))
        .sum();
    Ok(ReleaseReport {
        path: path.display().to_string(),
        kind: source.kind_name().to_string(),
        model_type: source
            .config()
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        backbone,
        backbone_total: total,
        experts,
        moe_layers: layers.len(),
        top_k,
        expert_bytes_per_token,
        kernels: kernel_of,
    })
}

/// The stored type's name and the bytes a logical tensor takes in the
/// release. A GGUF tensor counts its own type's blocks, also where it is
/// assembled from several stored tensors (MLA's `kv_b_proj`).
fn stored(source: &Source, name: &str, info: &Info, params: u64) -> (String, u64) {
    if let Origin::Gguf(g) = source.origin()
        && let Some((_, t)) = g.info(name)
    {
        let bytes = t
            .ggml_type
            .block()
            .map_or(params * 4, |(qk, size)| params / qk as u64 * size as u64);
        return (t.ggml_type.to_string(), bytes);
    }
    let (rows, cols) = match info.shape[..] {
        [rows, cols] => (rows, cols),
        _ => (1, params as usize),
    };
    let matrix = |f: Format| {
        (rows as u64 * f.row_bytes(cols) as u64)
            + scale_plane_bytes(f, rows, cols).unwrap_or(0) as u64
    };
    let bytes = match &info.kind {
        Kind::F32 => params * 4,
        Kind::Bf16 | Kind::F16 => params * 2,
        Kind::Fp8 { block } => {
            let blocks = rows.div_ceil(block[0].max(1)) * cols.div_ceil(block[1].max(1));
            params + 4 * blocks as u64
        }
        Kind::Int4 { group } => {
            (rows * cols.div_ceil(8) * 4 + 2 * rows * cols.div_ceil((*group).max(1))) as u64
        }
        Kind::Mxfp4 { group } => {
            (rows * cols.div_ceil(2) + rows * cols.div_ceil((*group).max(1))) as u64
        }
        Kind::Q8 => matrix(Format::Q8),
        Kind::Ggml(t) => matrix(Format::Ggml(*t)),
        Kind::Blocks(f) => matrix(*f),
        Kind::Synthetic => 0,
    };
    (info.kind.to_string(), bytes)
}

impl fmt::Display for ReleaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} release: {} ({})",
            self.kind, self.model_type, self.path
        )?;
        writeln!(
            f,
            "  {:<22} {:>7} {:>16} {:>12} {:>8}  stored as",
            "class", "tensors", "params", "bytes", "bits/w"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, c: &Class, types: &str| {
            writeln!(
                f,
                "  {name:<22} {:>7} {:>16} {:>12} {:>8.3}  {types}",
                c.tensors,
                c.params,
                human_bytes(c.bytes),
                c.bits_per_weight
            )
        };
        let types = |c: &StoredClass| {
            c.stored_as
                .iter()
                .map(|(t, n)| format!("{t} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (name, c) in &self.backbone {
            row(f, name, &c.class, &types(c))?;
        }
        row(f, "backbone total", &self.backbone_total, "")?;
        row(
            f,
            "routed experts",
            &self.experts.class,
            &types(&self.experts),
        )?;
        if self.moe_layers > 0 {
            writeln!(
                f,
                "{} MoE layers, top-{}: a token reads {} of stored experts",
                self.moe_layers,
                self.top_k,
                human_bytes(self.expert_bytes_per_token)
            )?;
        }
        let mut first = true;
        for (format, kernel) in &self.kernels {
            if !first {
                writeln!(f)?;
            }
            first = false;
            write!(f, "kernel for {format}: {kernel}")?;
        }
        Ok(())
    }
}
