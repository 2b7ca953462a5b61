//! The plan of what a node would hold for a store, or for a release (a
//! Hugging Face folder, a GGUF file or a named shape) as `waste convert`
//! would write it: the shapes come from the store's index or the release's
//! tensors, the arithmetic is [`RamPlan`]'s, which the node itself runs at
//! start. `waste plan`, `waste doctor` and `waste convert --backbone auto`
//! all ask it here.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use waste_convert::convert::names::{is_router, parse_expert};
use waste_convert::convert::precision::{self, ClassFormats};
use waste_convert::convert::source::Origin;
use waste_convert::convert::{BackboneMode, Source};
use waste_convert::synth::{self, Like};
use waste_format::backbone::BACKBONE_META;
use waste_format::io::AlignedBuf;
use waste_format::{Checkpoint, ExpertsDir};
use waste_kernels::Format;
use waste_kernels::ggml::GgmlType;
use waste_kernels::record::{Recipe, record_len};
use waste_model::cache::CacheType;
use waste_model::config::ModelConfig;

use super::{
    RamPlan, Resident, Sessions, TensorClass, backbone_classes, cached_rows_shape, classes,
    default_budget, embeddings_by_row,
};
use crate::{Error, Result};

/// The node's RAM settings as `waste node` takes them; `None` means the
/// node's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct RamSettings {
    /// RAM the node may use, in bytes.
    pub ram_budget: Option<u64>,
    /// Context size in tokens per session.
    pub ctx_size: Option<usize>,
    /// Sessions kept at once.
    pub max_sessions: Option<usize>,
    /// The attention cache's value type.
    pub cache_type: CacheType,
}

/// What the plan is of: its config, backbone classes and expert layers.
struct Shape {
    what: String,
    config: ModelConfig,
    classes: Vec<TensorClass>,
    /// (experts, record length) of each MoE layer.
    layers: Vec<(u64, u64)>,
    experts_format: String,
}

/// Everything `waste plan` reports; bytes are bytes, GB are 10^9 bytes.
#[derive(Debug, Serialize)]
pub struct Report {
    pub source: String,
    pub fits: bool,
    /// What the node holds once its expert cache is full (or holds every
    /// expert, when they are fewer).
    pub resident_bytes: u64,
    /// Resident backbone parameters.
    pub params: u64,
    pub budget_bytes: u64,
    pub classes: Vec<TensorClass>,
    pub backbone_bytes: u64,
    pub ctx_size: usize,
    /// The attention cache's value type (`f32`, `f16`).
    pub cache_type: &'static str,
    pub sessions: u64,
    pub state_bytes_per_session: u64,
    pub in_flight_bytes: u64,
    pub overhead_bytes: u64,
    pub expert_cache_bytes: u64,
    pub experts_format: String,
    pub expert_layers: usize,
    /// One expert record of the largest layer: the size of a disk read.
    pub largest_record_bytes: u64,
    pub experts_bytes: u64,
    pub expert_bytes_per_token: u64,
    pub disk_gbps: f64,
    /// Tokens per second if every expert of a token is read from disk.
    pub decode_bound_tok_s: f64,
}

/// What to plan: a store, or a release (a file or a shape) converted with
/// these formats.
#[derive(Debug, Clone)]
pub enum Target {
    Store(PathBuf),
    Release(PathBuf, Recipe, BackboneMode),
    Like(Like, Recipe, BackboneMode),
}

impl Target {
    /// A store when `path` is one (or its backbone/), else a release to
    /// convert with `recipe` and `backbone` (default native).
    pub fn of_path(path: &Path, recipe: Recipe, backbone: Option<BackboneMode>) -> Self {
        // A store, or a store's backbone/ (which records its metadata).
        let store = waste_format::manifest::is_store(path) || path.join(BACKBONE_META).is_file();
        if store {
            Target::Store(path.to_path_buf())
        } else {
            Target::Release(
                path.to_path_buf(),
                recipe,
                backbone.unwrap_or(BackboneMode::Native),
            )
        }
    }

    /// Whether the store is yet to be written.
    pub fn to_convert(&self) -> bool {
        !matches!(self, Target::Store(_))
    }
}

/// The plan of `target` under the node's RAM flags, with the decode bound at
/// `disk_gbps`. `--backbone auto` is resolved first ([`resolve_auto`]).
pub fn report(target: &Target, flags: RamSettings, disk_gbps: f64) -> Result<Report> {
    let target = resolve_auto(target, flags)?;
    let shape = match &target {
        Target::Store(path) => store_shape(path)?,
        Target::Release(path, recipe, backbone) => {
            release_tensors(&Source::open(path)?, path)?.shape(*recipe, *backbone)?
        }
        Target::Like(_, _, BackboneMode::Native) => {
            return Err(Error::Config(
                "--like has no stored dtypes to keep: give --backbone bf16, q8, q4, q3 or auto"
                    .into(),
            ));
        }
        Target::Like(like, recipe, backbone) => like_tensors(*like).shape(*recipe, *backbone)?,
    };
    report_of(shape, flags, disk_gbps)
}

/// `--backbone auto` of a release or shape, resolved to the format per
/// class that `auto` chooses for these RAM flags (every class at `q8`, then
/// demoted in the measured order until the plan fits: see
/// `waste_convert::convert::precision`); any other target as it is. When
/// even the last demotion does not fit, the plan of that last step (which
/// reports not fitting).
pub fn resolve_auto(target: &Target, flags: RamSettings) -> Result<Target> {
    Ok(match target {
        Target::Release(path, recipe, BackboneMode::Auto) => {
            let formats = choose_auto(
                &release_tensors(&Source::open(path)?, path)?,
                *recipe,
                flags,
            )?;
            Target::Release(path.clone(), *recipe, BackboneMode::Blocks(formats))
        }
        Target::Like(like, recipe, BackboneMode::Auto) => {
            let formats = choose_auto(&like_tensors(*like), *recipe, flags)?;
            Target::Like(*like, *recipe, BackboneMode::Blocks(formats))
        }
        other => other.clone(),
    })
}

/// What `--backbone auto` chooses for `source` (as opened for conversion,
/// upcycled or not) converted with `recipe` experts under these RAM flags,
/// and the plan of that choice.
pub fn auto_formats(
    source: &Source,
    recipe: Recipe,
    flags: RamSettings,
) -> Result<(ClassFormats, Report)> {
    let tensors = release_tensors(source, source.path())?;
    let formats = choose_auto(&tensors, recipe, flags)?;
    let shape = tensors.shape(recipe, BackboneMode::Blocks(formats))?;
    Ok((formats, report_of(shape, flags, 0.0)?))
}

/// `auto`'s formats for a backbone: the first step of the measured
/// demotion order whose plan fits (the last step when none does).
fn choose_auto(tensors: &Tensors, recipe: Recipe, flags: RamSettings) -> Result<ClassFormats> {
    let mut failed = None;
    let order = precision::demotion_order(precision::SENSITIVITY);
    let (formats, _) = precision::choose(&order, |f| {
        let plan = tensors
            .shape(recipe, BackboneMode::Blocks(*f))
            .and_then(|shape| report_of(shape, flags, 0.0));
        match plan {
            Ok(r) => r.fits,
            Err(e) => {
                failed.get_or_insert(e);
                true
            }
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(formats),
    }
}

/// The plan of a shape under the node's RAM flags.
fn report_of(shape: Shape, flags: RamSettings, disk_gbps: f64) -> Result<Report> {
    let defaults = crate::Config::default();
    let ctx_size = flags
        .ctx_size
        .unwrap_or(shape.config.max_position_embeddings.min(4096));
    let sessions = flags.max_sessions.unwrap_or(defaults.max_sessions);
    let budget = match flags.ram_budget {
        Some(b) => b,
        None => default_budget().ok_or_else(|| {
            Error::Config("cannot read MemAvailable from /proc/meminfo: give --ram-budget".into())
        })?,
    };
    let top_k = shape.config.moe.as_ref().map_or(0, |m| m.top_k as u64);
    let record_bytes = shape
        .layers
        .iter()
        .map(|&(_, len)| AlignedBuf::capacity_for(len as usize) as u64)
        .max()
        .unwrap_or(0);
    let backbone: u64 = shape.classes.iter().map(|c| c.bytes).sum();
    let sessions = Sessions {
        count: sessions,
        ctx: ctx_size,
        cache: flags.cache_type,
    };
    let ram = RamPlan::compute(
        budget,
        backbone,
        &shape.config,
        sessions,
        record_bytes,
        top_k,
    );
    let per_token: u64 = shape.layers.iter().map(|&(_, len)| top_k * len).sum();
    let experts_bytes: u64 = shape.layers.iter().map(|&(n, len)| n * len).sum();
    Ok(Report {
        source: shape.what,
        fits: ram.fits(),
        // A cache larger than every expert never fills.
        resident_bytes: ram.fixed() + ram.expert_cache.min(experts_bytes),
        params: shape.classes.iter().map(|c| c.params).sum(),
        budget_bytes: budget,
        backbone_bytes: backbone,
        classes: shape.classes,
        ctx_size,
        cache_type: flags.cache_type.name(),
        sessions: ram.sessions,
        state_bytes_per_session: ram.kv_per_session,
        in_flight_bytes: ram.in_flight,
        overhead_bytes: ram.overhead,
        expert_cache_bytes: ram.expert_cache,
        experts_format: shape.experts_format,
        expert_layers: shape.layers.len(),
        largest_record_bytes: shape.layers.iter().map(|&(_, len)| len).max().unwrap_or(0),
        experts_bytes,
        expert_bytes_per_token: per_token,
        disk_gbps,
        decode_bound_tok_s: 0.0,
    }
    .with_disk_rate(disk_gbps))
}

impl Report {
    /// The decode bound at `gbps` GB/s when every expert comes from disk.
    pub fn set_disk_rate(&mut self, gbps: f64) {
        self.disk_gbps = gbps;
        self.decode_bound_tok_s = if self.expert_bytes_per_token == 0 {
            0.0
        } else {
            gbps * 1e9 / self.expert_bytes_per_token as f64
        };
    }

    fn with_disk_rate(mut self, gbps: f64) -> Self {
        self.set_disk_rate(gbps);
        self
    }
}

/// A store's backbone as the node loads it and its experts index.
fn store_shape(path: &Path) -> Result<Shape> {
    let (backbone_dir, experts_dir) = if path.join("backbone").is_dir() {
        (path.join("backbone"), path.join("experts"))
    } else {
        let parent = path.parent().unwrap_or(Path::new("."));
        (path.to_path_buf(), parent.join("experts"))
    };
    let ckpt = Checkpoint::open(&backbone_dir).map_err(|source| Error::Backbone {
        path: backbone_dir.clone(),
        source,
    })?;
    let config = ModelConfig::from_json_file(ckpt.config_json(), ckpt.config_path())?;
    let classes = backbone_classes(&ckpt)?;
    let (layers, experts_format) = if experts_dir.join("index.json").is_file() {
        let dir = ExpertsDir::open(&experts_dir)?;
        let index = dir.index();
        let layers = index
            .layers
            .iter()
            .map(|l| (u64::from(l.n_experts), l.record_len))
            .collect();
        (layers, index.expert_format.clone())
    } else {
        return Err(Error::Config(format!(
            "{} has no experts index: give the store's folder (backbone/ and experts/ beside each other)",
            experts_dir.display()
        )));
    };
    Ok(Shape {
        what: path.display().to_string(),
        config,
        classes,
        layers,
        experts_format,
    })
}

/// A release's backbone tensors before conversion: `(name, shape, bytes per
/// value held, a GGUF's ggml type kept as blocks)`, and its config.
struct Tensors {
    what: String,
    config_json: Value,
    tensors: Vec<(String, Vec<usize>, u64, Option<GgmlType>)>,
}

impl Tensors {
    /// The shape of the store `waste convert --experts RECIPE --backbone
    /// MODE` writes, held as the node would hold it.
    fn shape(&self, recipe: Recipe, backbone: BackboneMode) -> Result<Shape> {
        if backbone == BackboneMode::Auto {
            return Err(Error::Config(
                "--backbone auto is resolved before planning a shape".into(),
            ));
        }
        let config = ModelConfig::from_json(&self.config_json)?;
        let by_row =
            embeddings_by_row(&config, |n| self.tensors.iter().any(|(name, ..)| name == n));
        let held: Vec<_> = self
            .tensors
            .iter()
            .map(|(name, shape, bytes, blocks)| {
                let h = held_as(backbone, name, shape, *bytes, *blocks);
                (
                    name.as_str(),
                    counted_shape(by_row.as_deref(), name, shape),
                    h,
                )
            })
            .collect();
        let classes = classes(held.iter().map(|(n, s, h)| (*n, s.as_slice(), *h)));
        converted(
            format!(
                "{} (experts {}, backbone {})",
                self.what,
                recipe.name(),
                backbone.name()
            ),
            &self.config_json,
            classes,
            recipe,
        )
    }
}

/// A release's full shape (`--like`): no stored dtypes, so `native` holds
/// its bf16 tensors as bf16.
fn like_tensors(like: Like) -> Tensors {
    let (config_json, tensors) = synth::build(&synth::Options {
        like,
        layers: None,
        experts: None,
        vocab: None,
        bf16: true,
        seed: 0,
    });
    let tensors = tensors
        .iter()
        .filter(|t| parse_expert(&t.name).is_none())
        .map(|t| {
            let bytes = t.fill.element_bytes() as u64;
            (t.name.clone(), t.shape.clone(), bytes, None)
        })
        .collect();
    Tensors {
        what: format!("{} (--like)", like.name()),
        config_json,
        tensors,
    }
}

/// A Hugging Face folder or GGUF file's backbone tensors.
fn release_tensors(source: &Source, path: &Path) -> Result<Tensors> {
    let mut tensors = Vec::new();
    for name in source.names() {
        if parse_expert(name).is_some() {
            continue;
        }
        let info = source.info(name)?;
        let blocks = match (source.origin(), source.native_format(&info)) {
            (Origin::Gguf(_), Format::Ggml(t)) => Some(t),
            _ => None,
        };
        let bytes = info.kind.ram_bytes_per_value();
        tensors.push((name.clone(), info.shape, bytes, blocks));
    }
    Ok(Tensors {
        what: path.display().to_string(),
        config_json: source.config().clone(),
        tensors,
    })
}

/// The shape a tensor counts at: the token embeddings a node reads by row
/// (`by_row`) count as the rows of their cache.
fn counted_shape(by_row: Option<&str>, name: &str, shape: &[usize]) -> Vec<usize> {
    if by_row == Some(name) {
        cached_rows_shape(shape)
    } else {
        shape.to_vec()
    }
}

/// How the node holds a backbone tensor that `waste convert --backbone
/// MODE` wrote (its `plan_backbone`): weight matrices in the mode's format,
/// or under `native` a GGUF's `blocks` as they are (Q8_0 as waste's
/// identical q8); routers and vectors as the source stores them (bf16, else
/// f32).
fn held_as(
    mode: BackboneMode,
    name: &str,
    shape: &[usize],
    bytes_per_value: u64,
    blocks: Option<GgmlType>,
) -> Resident {
    let matrix = shape.len() == 2 && !is_router(name);
    let weight = matrix && name.ends_with(".weight");
    let mode = match mode {
        BackboneMode::Blocks(classes) => match classes.of_tensor(name, shape) {
            Some(format) => return Resident::of_format(format),
            // A class given no format stays as under `native`.
            None => BackboneMode::Native,
        },
        other => other,
    };
    match (mode, blocks) {
        (BackboneMode::Bf16, _) if matrix => Resident::Bf16,
        (BackboneMode::Native, Some(GgmlType::Q8_0)) if weight => Resident::Q8,
        (BackboneMode::Native, Some(t)) if weight => Resident::Ggml(t),
        _ if bytes_per_value == 2 => Resident::Bf16,
        _ => Resident::F32,
    }
}

/// The shape of a store converted from `config_json` with `recipe` experts.
fn converted(
    what: String,
    config_json: &Value,
    classes: Vec<TensorClass>,
    recipe: Recipe,
) -> Result<Shape> {
    let config = ModelConfig::from_json(config_json)?;
    let layers = config
        .expert_layers()
        .iter()
        .map(|l| {
            let len = record_len(recipe.formats(), l.d_model, l.d_ff).ok_or_else(|| {
                Error::Config(format!("layer {}: expert record size overflows", l.layer))
            })?;
            Ok((l.n_experts as u64, len as u64))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Shape {
        what,
        config,
        classes,
        layers,
        experts_format: recipe.name().to_string(),
    })
}
