//! `waste inspect`: what a store holds. Parameters, bytes and bits per
//! weight of the backbone by tensor class (embeddings, attention, routers,
//! shared experts, ...) and of the routed experts, the expert bytes a
//! token reads at the model's top-k, and with `verify` every expert record
//! checked against its checksum and every backbone tensor decoded. Each
//! layer's component formats come from its first record's header; each
//! expert format and each ggml type the backbone keeps is reported with
//! the kernel its products run through on this machine. The
//! manifest is checked first (its version and both index hashes): a store
//! without one is refused. A release (a GGUF file or a Hugging Face folder)
//! is described as it stands, before any conversion, by [`release`].

pub mod release;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;
use waste_format::{Checkpoint, ExpertsDir, Manifest, Storage};
use waste_kernels::{Format, PackedExpert};

use crate::convert::human_bytes;
use crate::convert::names::is_router;
use crate::error::{Error, Result};

/// Parameters and bytes of a group of tensors.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Class {
    pub tensors: usize,
    pub params: u64,
    pub bytes: u64,
    pub bits_per_weight: f64,
}

impl Class {
    fn add(&mut self, params: u64, bytes: u64) {
        self.params += params;
        self.bytes += bytes;
    }

    fn finish(&mut self) {
        self.bits_per_weight = 8.0 * self.bytes as f64 / self.params.max(1) as f64;
    }
}

/// One MoE layer's file.
#[derive(Debug, Clone, Serialize)]
pub struct ExpertLayer {
    pub layer: u32,
    pub n_experts: u32,
    pub d_model: u32,
    pub d_ff: u32,
    pub record_len: u64,
    pub stride: u64,
    /// Format names of gate, up and down (from the first record's header).
    pub formats: [String; 3],
}

/// Everything `waste inspect` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub manifest: Manifest,
    pub model_type: String,
    pub backbone: BTreeMap<String, Class>,
    pub backbone_total: Class,
    /// Routed experts: params, record bytes (headers included), bits per weight.
    pub experts: Class,
    pub experts_file_bytes: u64,
    pub expert_format: String,
    pub top_k: u32,
    pub expert_bytes_per_token: u64,
    pub layers: Vec<ExpertLayer>,
    /// Every expert format of the store and the ggml types of its backbone
    /// -> the kernel their products use here ([`Format::kernel`]).
    pub kernels: BTreeMap<String, String>,
    /// `Some(true)` once every record and backbone tensor was checked.
    pub verified: Option<bool>,
}

/// The class of a backbone tensor, from its (stored) name. Attention's
/// value projections are a class of their own: they take rounding
/// differently from the other attention matrices (docs/QUANT.md).
pub fn tensor_class(name: &str) -> &'static str {
    let has = |s: &str| name.contains(s);
    if has("embed_tokens") {
        "embeddings"
    } else if has("lm_head") {
        "lm_head"
    } else if is_router(name) {
        "routers"
    } else if has("shared_expert") {
        "shared experts"
    } else if has("routed_expert_") {
        "latent projections"
    } else if has("_res_") {
        "attention residuals"
    } else if has("norm") {
        "norms"
    } else if has("self_attn.v_proj") {
        "attention values"
    } else if has("self_attn") || has("attention") {
        "attention"
    } else if has("mlp.") || has("block_sparse_moe.") {
        "dense ffn"
    } else {
        "other"
    }
}

/// Reads (and with `verify`, checks) the store at `root`; `progress(done,
/// total)` during verification.
pub fn inspect(root: &Path, verify: bool, mut progress: impl FnMut(u64, u64)) -> Result<Report> {
    let manifest = Manifest::load_verified(root)?;
    let backbone = Checkpoint::open(root.join("backbone"))?;
    let mut classes: BTreeMap<String, Class> = BTreeMap::new();
    let mut total = Class::default();
    let mut kernels = BTreeMap::new();
    let mut kernel = |f: Format| {
        kernels.insert(f.name().to_string(), f.kernel(waste_kernels::kernels()));
    };
    for name in backbone.tensor_names() {
        let info = backbone.info(name)?;
        if let Storage::Ggml { ggml_type } = info.storage {
            kernel(Format::Ggml(ggml_type));
        }
        let params = info.shape.iter().product::<usize>() as u64;
        let c = classes.entry(tensor_class(name).to_string()).or_default();
        c.tensors += 1;
        c.add(params, 0);
        total.tensors += 1;
        total.add(params, 0);
    }
    for stored in backbone.stored_names() {
        let bytes = backbone.stored(stored)?.data.len() as u64;
        classes
            .entry(tensor_class(stored).to_string())
            .or_default()
            .add(0, bytes);
        total.add(0, bytes);
    }
    classes.values_mut().for_each(Class::finish);
    total.finish();

    let dir = ExpertsDir::open(&root.join("experts"))?;
    let index = dir.index();
    let mut experts = Class::default();
    let mut file_bytes = 0;
    for l in &index.layers {
        experts.tensors += 3 * l.n_experts as usize;
        experts.add(
            3 * u64::from(l.d_model) * u64::from(l.d_ff) * u64::from(l.n_experts),
            l.record_len * u64::from(l.n_experts),
        );
        file_bytes += l.data_offset + l.stride * u64::from(l.n_experts);
    }
    experts.finish();
    let verified = if verify {
        let tensors = backbone.tensor_names();
        let records: u64 = index.layers.iter().map(|l| u64::from(l.n_experts)).sum();
        let all = records + tensors.len() as u64;
        for (i, name) in tensors.iter().enumerate() {
            backbone.load(name)?;
            progress(i as u64 + 1, all);
        }
        let done = tensors.len() as u64;
        dir.verify_all(|d, _| progress(done + d, all))?;
        Some(true)
    } else {
        None
    };
    let mut layers = Vec::with_capacity(index.layers.len());
    let mut record = Vec::new();
    for l in &index.layers {
        let formats = if l.n_experts == 0 {
            [String::new(), String::new(), String::new()]
        } else {
            dir.read_record(l.layer, 0, &mut record)?;
            let e = PackedExpert::parse(&record[..]).map_err(|source| Error::Record {
                path: root.join("experts").join(&l.file),
                layer: l.layer,
                expert: 0,
                source,
            })?;
            let formats = [e.gate().format(), e.up().format(), e.down().format()];
            formats.into_iter().for_each(&mut kernel);
            formats.map(|f: Format| f.name().to_string())
        };
        layers.push(ExpertLayer {
            layer: l.layer,
            n_experts: l.n_experts,
            d_model: l.d_model,
            d_ff: l.d_ff,
            record_len: l.record_len,
            stride: l.stride,
            formats,
        });
    }
    Ok(Report {
        model_type: index.model_type.clone(),
        expert_format: index.expert_format.clone(),
        top_k: index.top_k,
        expert_bytes_per_token: index.bytes_per_token(),
        layers,
        kernels,
        experts_file_bytes: file_bytes,
        manifest,
        backbone: classes,
        backbone_total: total,
        experts,
        verified,
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.manifest;
        writeln!(
            f,
            "store format {} by {}; {} from {} ({})",
            m.format_version, m.created_by, self.model_type, m.source.path, m.source.kind
        )?;
        writeln!(
            f,
            "experts {} (top-{}), backbone {}",
            m.experts_format, self.top_k, m.backbone_format
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, c: &Class| {
            writeln!(
                f,
                "  {name:<22} {:>6} {:>16} {:>12} {:>8.3}",
                c.tensors,
                c.params,
                human_bytes(c.bytes),
                c.bits_per_weight
            )
        };
        writeln!(
            f,
            "  {:<22} {:>6} {:>16} {:>12} {:>8}",
            "class", "tensors", "params", "bytes", "bits/w"
        )?;
        for (name, c) in &self.backbone {
            row(f, name, c)?;
        }
        row(f, "backbone total", &self.backbone_total)?;
        row(f, "routed experts", &self.experts)?;
        if let Some(l) = self.layers.first() {
            writeln!(
                f,
                "{} MoE layers of {} experts ({}x{}): records of {} at a stride of {}; files {}",
                self.layers.len(),
                l.n_experts,
                l.d_model,
                l.d_ff,
                human_bytes(l.record_len),
                human_bytes(l.stride),
                human_bytes(self.experts_file_bytes)
            )?;
        }
        for (format, kernel) in &self.kernels {
            writeln!(f, "kernel for {format}: {kernel}")?;
        }
        write!(
            f,
            "expert reads per token at top-{}: {}",
            self.top_k,
            human_bytes(self.expert_bytes_per_token)
        )?;
        if self.verified == Some(true) {
            write!(
                f,
                "\nverified: every expert record's checksum and every backbone tensor"
            )?;
        }
        Ok(())
    }
}
