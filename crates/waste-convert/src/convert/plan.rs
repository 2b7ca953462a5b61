//! What a conversion will write, decided from the source's names, shapes
//! and storage before any byte is written: the MoE layers with their expert
//! formats and record lengths, the backbone tensors with their output
//! dtypes and shards, the model facts the experts index records (top-k,
//! activation), and the fingerprint that ties a resumed run to its start.
//! Everything here is deterministic, so two runs plan byte-identical stores.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use waste_format::backbone::{BLOCKS_SUFFIX, FORMAT_SUFFIX, SHAPE_SUFFIX};
use waste_format::experts::ExpertActivation;
use waste_format::manifest::sha256_hex;
use waste_kernels::ggml::GgmlType;
use waste_kernels::{Format, record_len};

use super::names::{is_router, parse_expert};
use super::options::{BackboneMode, ExpertsMode, Options};
use super::source::{Kind, Origin, Source};
use crate::error::{Error, Result};

/// Largest backbone shard (a tensor bigger than this gets a shard of its own).
pub const SHARD_BYTES: u64 = 2 << 30;

/// One MoE layer's experts.
#[derive(Debug, Clone)]
pub struct LayerPlan {
    pub layer: u32,
    pub d_model: usize,
    pub d_ff: usize,
    /// Formats of gate, up, down in every record of the layer.
    pub formats: [Format; 3],
    pub record_len: usize,
    /// Tensor names of each expert's gate, up, down, by expert id.
    pub experts: Vec<[String; 3]>,
}

impl LayerPlan {
    /// Parameters of one expert.
    pub fn expert_params(&self) -> u64 {
        3 * (self.d_model * self.d_ff) as u64
    }
}

/// How one output tensor of the backbone is produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Produce {
    /// The stored tensor of this name, bytes as the source holds them.
    Raw { stored: String },
    /// The logical tensor loaded exactly, written as bf16 (kept as is when
    /// it is bf16, rounded to nearest otherwise) or f32.
    Values { logical: String, dtype: Format },
    /// The logical tensor quantized to `format`'s blocks (`q8`, `q4`, `q3`).
    Quantize { logical: String, format: Format },
    /// The `[rows, cols]` shape companion of a block tensor.
    Shape { rows: usize, cols: usize },
    /// The logical GGUF tensor's ggml blocks as stored
    /// ([`Source::native_matrix`] in `format`, a [`Format::Ggml`]).
    Blocks { logical: String, format: Format },
    /// The format id companion of a block tensor.
    FormatId { format: Format },
}

/// One tensor of a backbone shard.
#[derive(Debug, Clone)]
pub struct OutTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: u64,
    pub produce: Produce,
}

/// One backbone shard file.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub file: String,
    pub tensors: Vec<OutTensor>,
}

/// The whole conversion.
#[derive(Debug, Clone)]
pub struct Plan {
    pub model_type: String,
    pub top_k: u32,
    pub activation: ExpertActivation,
    pub layers: Vec<LayerPlan>,
    pub shards: Vec<ShardPlan>,
    /// Expert format name of the store (the option) and the format id its
    /// layer headers carry (the first layer's gate format).
    pub experts_format: String,
    pub experts_format_id: u16,
    pub backbone_format: String,
    /// Parameters of the backbone and of the routed experts.
    pub backbone_params: u64,
    /// Bytes the backbone will take in RAM once loaded.
    pub backbone_ram_bytes: u64,
    /// sha256 of what determines the output: source identity and options.
    pub fingerprint: String,
}

impl Plan {
    pub fn new(source: &Source, options: &Options) -> Result<Self> {
        let config = source.config();
        let model_type = config_str(config, "model_type").unwrap_or_default();
        let mut experts: BTreeMap<u32, BTreeMap<u32, [Option<String>; 3]>> = BTreeMap::new();
        let mut backbone = Vec::new();
        for name in source.names() {
            match parse_expert(name) {
                Some((e, "weight")) => {
                    experts
                        .entry(e.layer)
                        .or_default()
                        .entry(e.expert)
                        .or_default()[e.proj] = Some(name.clone());
                }
                Some((_, suffix)) => {
                    return Err(Error::BadTensor {
                        path: source.path().to_path_buf(),
                        tensor: name.clone(),
                        reason: format!(
                            "routed experts with a `{suffix}` tensor are not supported (records hold gate, up and down weights only)"
                        ),
                    });
                }
                None => backbone.push(name.clone()),
            }
        }
        let layers = experts
            .into_iter()
            .map(|(layer, by_id)| plan_layer(source, options, layer, &by_id))
            .collect::<Result<Vec<_>>>()?;
        let top_k = if layers.is_empty() {
            0
        } else {
            config_top_k(config).ok_or_else(|| {
                source.config_error("MoE model without num_experts_per_tok (top-k)")
            })?
        };
        let activation = activation(config).map_err(|r| source.config_error(r))?;
        let (shards, backbone_params, backbone_ram_bytes) =
            plan_backbone(source, options.backbone, &backbone)?;
        let experts_format_id = layers.first().map_or(0, |l| l.formats[0].id());
        let identity = source.identity()?;
        let fingerprint = sha256_hex(
            json!({
                "store_format": waste_format::FORMAT_VERSION.to_string(),
                "created_by": created_by(),
                "source": {"path": identity.path, "files": identity.files.iter()
                    .map(|f| json!([f.name, f.bytes])).collect::<Vec<_>>(),
                    "config_sha256": identity.config_sha256},
                "experts": options.experts.name(),
                "backbone": options.backbone.name(),
                "upcycle": options.upcycle.map(|(e, k)| json!([e, k, options.seed])),
            })
            .to_string()
            .as_bytes(),
        );
        Ok(Self {
            model_type,
            top_k,
            activation,
            layers,
            shards,
            experts_format: options.experts.name(),
            experts_format_id,
            backbone_format: options.backbone.name().to_string(),
            backbone_params,
            backbone_ram_bytes,
            fingerprint,
        })
    }

    pub fn expert_params(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.expert_params() * l.experts.len() as u64)
            .sum()
    }

    /// Bytes of every layer file (header page + records at their stride).
    pub fn experts_bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| {
                waste_format::experts::HEADER_LEN as u64
                    + waste_format::align_up(l.record_len as u64) * l.experts.len() as u64
            })
            .sum()
    }

    pub fn backbone_bytes(&self) -> u64 {
        self.shards
            .iter()
            .flat_map(|s| &s.tensors)
            .map(|t| t.bytes)
            .sum()
    }

    /// Record bytes one token reads at the model's top-k.
    pub fn expert_bytes_per_token(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.record_len as u64 * u64::from(self.top_k))
            .sum()
    }
}

/// `waste <version>`: the manifest's `created_by`.
pub fn created_by() -> String {
    format!("waste {}", env!("CARGO_PKG_VERSION"))
}

/// A key of config.json, at the top level or under `text_config` (Kimi K3).
fn config_value<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config
        .get(key)
        .filter(|v| !v.is_null())
        .or_else(|| config.get("text_config")?.get(key).filter(|v| !v.is_null()))
}

/// The experts each token uses (`num_experts_per_tok`, or the
/// `num_experts_per_token` some configs spell), if the config says.
pub(crate) fn config_top_k(config: &Value) -> Option<u32> {
    ["num_experts_per_tok", "num_experts_per_token"]
        .iter()
        .find_map(|k| config_u64(config, k))
        .and_then(|k| u32::try_from(k).ok())
}

fn config_u64(config: &Value, key: &str) -> Option<u64> {
    config_value(config, key)?.as_u64()
}

fn config_str(config: &Value, key: &str) -> Option<String> {
    config_value(config, key)?.as_str().map(str::to_owned)
}

/// The experts' activation from `hidden_act` (SiTU betas from their keys).
fn activation(config: &Value) -> std::result::Result<ExpertActivation, String> {
    let beta = |k: &str| {
        config_value(config, k)
            .and_then(Value::as_f64)
            .map(|v| v as f32)
    };
    match config_str(config, "hidden_act").as_deref() {
        None | Some("silu" | "swish") => Ok(ExpertActivation::Silu),
        Some("situ") => Ok(ExpertActivation::Situ {
            beta: beta("activation_situ_beta").unwrap_or(1.0),
            linear_beta: beta("activation_situ_linear_beta"),
        }),
        Some(other) => Err(format!(
            "hidden_act {other:?}: expert records support silu and situ"
        )),
    }
}

fn plan_layer(
    source: &Source,
    options: &Options,
    layer: u32,
    by_id: &BTreeMap<u32, [Option<String>; 3]>,
) -> Result<LayerPlan> {
    let n = by_id.keys().next_back().map_or(0, |&e| e + 1);
    let proj = ["gate", "up", "down"];
    let mut experts = Vec::with_capacity(n as usize);
    for e in 0..n {
        let names = by_id.get(&e).cloned().unwrap_or_default();
        let names: Vec<String> = names
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                n.ok_or_else(|| Error::MissingTensor {
                    name: format!("layer {layer} expert {e} {} projection", proj[i]),
                })
            })
            .collect::<Result<_>>()?;
        experts.push([names[0].clone(), names[1].clone(), names[2].clone()]);
    }
    let first = experts.first().ok_or_else(|| Error::MissingTensor {
        name: format!("layer {layer} experts"),
    })?;
    let infos = first
        .iter()
        .map(|n| source.info(n))
        .collect::<Result<Vec<_>>>()?;
    let (d_ff, d_model) = match infos[0].shape[..] {
        [r, c] => (r, c),
        _ => (0, 0),
    };
    let want = [
        vec![d_ff, d_model],
        vec![d_ff, d_model],
        vec![d_model, d_ff],
    ];
    let mut natural = [0, 1, 2].map(|i| source.native_format(&infos[i]));
    for names in &experts {
        for i in 0..3 {
            let info = source.info(&names[i])?;
            if info.shape != want[i] || d_ff == 0 {
                return Err(Error::BadTensor {
                    path: source.path().to_path_buf(),
                    tensor: names[i].clone(),
                    reason: format!(
                        "shape {:?}, but layer {layer}'s experts are {:?} (from {})",
                        info.shape, want[i], first[i]
                    ),
                });
            }
            // A layer's records share one layout: a component stored
            // differently by some expert is kept as exact f32 for all.
            if source.native_format(&info) != natural[i] {
                natural[i] = Format::F32;
            }
        }
    }
    let formats = match options.experts {
        ExpertsMode::Recipe(r) => r.formats(),
        ExpertsMode::Uniform(f) => [f; 3],
        ExpertsMode::Bf16 => [Format::Bf16; 3],
        ExpertsMode::F32 => [Format::F32; 3],
        ExpertsMode::Native => natural,
    };
    let record_len = record_len(formats, d_model, d_ff).ok_or_else(|| Error::BadTensor {
        path: source.path().to_path_buf(),
        tensor: first[0].clone(),
        reason: format!("an expert of {d_model}x{d_ff} overflows a record"),
    })?;
    Ok(LayerPlan {
        layer,
        d_model,
        d_ff,
        formats,
        record_len,
        experts,
    })
}

/// A weight `<prefix>.weight` stored as the blocks of `format` made by
/// `produce`: `<prefix>.weight_blocks`, its `<prefix>.weight_shape` and
/// `<prefix>.weight_format` (store format 1.3).
fn block_tensors(
    prefix: &str,
    format: Format,
    rows: usize,
    cols: usize,
    bytes: usize,
    produce: Produce,
) -> [OutTensor; 3] {
    [
        OutTensor {
            name: format!("{prefix}{BLOCKS_SUFFIX}"),
            dtype: "U8".into(),
            shape: vec![rows, format.row_bytes(cols)],
            bytes: bytes as u64,
            produce,
        },
        OutTensor {
            name: format!("{prefix}{SHAPE_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![2],
            bytes: 16,
            produce: Produce::Shape { rows, cols },
        },
        OutTensor {
            name: format!("{prefix}{FORMAT_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![1],
            bytes: 8,
            produce: Produce::FormatId { format },
        },
    ]
}

/// The backbone's output tensors in name order, cut into shards of at most
/// [`SHARD_BYTES`]; also its parameter count and RAM once loaded.
fn plan_backbone(
    source: &Source,
    mode: BackboneMode,
    names: &[String],
) -> Result<(Vec<ShardPlan>, u64, u64)> {
    let mut out: Vec<OutTensor> = Vec::new();
    let (mut params, mut ram) = (0u64, 0u64);
    for name in names {
        let info = source.info(name)?;
        let numel = info.shape.iter().product::<usize>();
        params += numel as u64;
        let matrix = info.shape.len() == 2 && !is_router(name);
        let values = |dtype: Format| OutTensor {
            name: name.clone(),
            dtype: if dtype == Format::Bf16 { "BF16" } else { "F32" }.into(),
            shape: info.shape.clone(),
            bytes: (numel * if dtype == Format::Bf16 { 2 } else { 4 }) as u64,
            produce: Produce::Values {
                logical: name.clone(),
                dtype,
            },
        };
        if mode == BackboneMode::Auto {
            return Err(source.config_error(
                "--backbone auto is chosen from a RAM plan before converting: \
                 resolve it to a format per class first",
            ));
        }
        if mode == BackboneMode::Bf16 && matrix {
            out.push(values(Format::Bf16));
            ram += numel as u64 * 2;
            continue;
        }
        // Quantized to the class's block format, or under `native` a GGUF's
        // quantized (and F16) matrices kept as their blocks (ggml's Q8_0
        // block is byte for byte waste's `q8`: it runs on the q8 kernels).
        let chosen = match mode {
            BackboneMode::Blocks(classes) => classes.of_tensor(name, &info.shape),
            _ => None,
        };
        // A class given no format stays as under `native`.
        let native = matches!(mode, BackboneMode::Native | BackboneMode::Blocks(_));
        let blocks = match (chosen, source.origin(), source.native_format(&info)) {
            (Some(format), _, _) => Some((
                format,
                Produce::Quantize {
                    logical: name.clone(),
                    format,
                },
            )),
            (None, _, _) if native => source.native_blocks(name, &info).map(|(f, t)| {
                let format = if t == GgmlType::Q8_0 { Format::Q8 } else { f };
                (
                    format,
                    Produce::Blocks {
                        logical: name.clone(),
                        format: f,
                    },
                )
            }),
            _ => None,
        };
        if let Some((format, produce)) = blocks {
            let prefix = name.strip_suffix(".weight").expect("checked");
            let (rows, cols) = (info.shape[0], info.shape[1]);
            let bytes = format
                .packed_size(rows, cols)
                .ok_or_else(|| Error::BadTensor {
                    path: source.path().to_path_buf(),
                    tensor: name.clone(),
                    reason: format!("{rows}x{cols} is not whole {format} blocks per row"),
                })?;
            out.extend(block_tensors(prefix, format, rows, cols, bytes, produce));
            // Held as its blocks in RAM too.
            ram += bytes as u64;
            continue;
        }
        ram += numel as u64 * info.kind.ram_bytes_per_value();
        match (source.origin(), &info.kind) {
            (Origin::Hf(_), kind) if *kind != Kind::Synthetic => {
                for raw in source.stored_parts(source.source_name(name))? {
                    out.push(OutTensor {
                        name: raw.name.to_string(),
                        dtype: raw.dtype.to_string(),
                        shape: raw.shape.to_vec(),
                        bytes: raw.data.len() as u64,
                        produce: Produce::Raw {
                            stored: raw.name.to_string(),
                        },
                    });
                }
            }
            (_, Kind::Bf16) => out.push(values(Format::Bf16)),
            _ => out.push(values(Format::F32)),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    let mut groups: Vec<Vec<OutTensor>> = Vec::new();
    let mut size = 0u64;
    for t in out {
        match groups.last_mut() {
            Some(g) if size + t.bytes <= SHARD_BYTES => {
                size += t.bytes;
                g.push(t);
            }
            _ => {
                size = t.bytes;
                groups.push(vec![t]);
            }
        }
    }
    let n = groups.len();
    let shards = groups
        .into_iter()
        .enumerate()
        .map(|(i, tensors)| ShardPlan {
            file: format!("model-{:05}-of-{n:05}.safetensors", i + 1),
            tensors,
        })
        .collect();
    Ok((shards, params, ram))
}
