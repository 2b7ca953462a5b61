//! The RAM plan, made before anything large is loaded: the backbone (as it
//! will sit in RAM: bf16 stays bf16, block formats stay blocks, other
//! stored formats widen to f32; token embeddings not tied to the head are
//! read by row from the store and count as their row cache), the
//! attention/recurrent state of every session at the full context, the
//! buffers of expert reads in flight, and an expert cache in whatever is
//! left. A plan that does not fit is refused with its numbers, rather than
//! letting the machine swap. `waste plan` prints the same arithmetic for a
//! store or a release shape, by tensor class, without starting a node.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;
use waste_convert::inspect::tensor_class;
use waste_format::Checkpoint;
use waste_format::checkpoint::Storage;
use waste_kernels::Format;
use waste_kernels::ggml::GgmlType;
use waste_model::cache::CacheType;
use waste_model::config::{LayerAttention, ModelConfig};

use crate::{Error, Result};

mod release;

pub use release::{RamSettings, Report, Target, auto_formats, report, resolve_auto};

/// The sessions a node keeps: how many, each a full context of `ctx`
/// positions whose attention cache holds `cache` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sessions {
    pub count: usize,
    pub ctx: usize,
    pub cache: CacheType,
}

/// Where the RAM budget goes, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RamPlan {
    pub budget: u64,
    pub backbone: u64,
    /// Per session, at the full context.
    pub kv_per_session: u64,
    pub sessions: u64,
    /// Expert records being read or received at once.
    pub in_flight: u64,
    /// The process's runtime and step scratch ([`overhead_bytes`]).
    pub overhead: u64,
    pub expert_cache: u64,
}

impl RamPlan {
    /// Plans `budget` for a model whose backbone is `backbone` bytes in RAM,
    /// `sessions` and experts of `record_bytes` (the largest layer's),
    /// `top_k` per token. Errors with the numbers when the fixed parts do
    /// not fit.
    pub fn new(
        budget: u64,
        backbone: u64,
        config: &ModelConfig,
        sessions: Sessions,
        record_bytes: u64,
        top_k: u64,
    ) -> Result<Self> {
        let plan = Self::compute(budget, backbone, config, sessions, record_bytes, top_k);
        if !plan.fits() {
            return Err(Error::RamPlan(format!(
                "the RAM plan does not fit: {plan} needs {} but the budget is {}; raise --ram-budget, lower --ctx-size or the session count",
                gib(plan.fixed()),
                gib(budget)
            )));
        }
        Ok(plan)
    }

    /// The plan whether or not it fits: the expert cache is what the fixed
    /// parts leave of the budget, zero when they do not fit.
    pub fn compute(
        budget: u64,
        backbone: u64,
        config: &ModelConfig,
        sessions: Sessions,
        record_bytes: u64,
        top_k: u64,
    ) -> Self {
        let kv_per_session = kv_bytes(config, sessions.ctx, sessions.cache);
        // Demand reads of one layer plus prefetches of the next. Twice that
        // (so a layer's records could arrive while the previous ones are
        // used) took a third of the memory a cap of half the model leaves
        // for experts, and the pool keeps every buffer it makes: more cache
        // there saves more reads than deeper buffering hides
        // (docs/BENCH.md, "Under a RAM cap").
        let in_flight = 2u64
            .saturating_mul(top_k.max(1))
            .saturating_mul(record_bytes);
        let overhead = overhead_bytes(config, sessions.count);
        let mut plan = Self {
            budget,
            backbone,
            kv_per_session,
            sessions: sessions.count as u64,
            in_flight,
            overhead,
            expert_cache: 0,
        };
        plan.expert_cache = budget.saturating_sub(plan.fixed());
        plan
    }

    /// Everything but the expert cache (saturating: a context or session
    /// count no machine holds must read as not fitting, not wrap around).
    pub fn fixed(&self) -> u64 {
        self.backbone
            .saturating_add(self.kv_per_session.saturating_mul(self.sessions))
            .saturating_add(self.in_flight)
            .saturating_add(self.overhead)
    }

    pub fn fits(&self) -> bool {
        self.fixed() <= self.budget
    }
}

impl fmt::Display for RamPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backbone {} + {} sessions x {} KV/state + in-flight experts {} + overhead {} -> expert cache {} (budget {})",
            gib(self.backbone),
            self.sessions,
            gib(self.kv_per_session),
            gib(self.in_flight),
            gib(self.overhead),
            gib(self.expert_cache),
            gib(self.budget)
        )
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / f64::from(1u32 << 30))
}

/// What a node process holds besides its weights, state, read buffers and
/// cache: the binary's pages, the async runtime, thread stacks, the
/// tokenizer. Measured on a node after loading a small store: 17 MB, 15 MB
/// of it the binary's pages (docs/BENCH.md, "The plan is honest").
pub const RUNTIME_BYTES: u64 = 24 << 20;

/// Everything small: [`RUNTIME_BYTES`] plus, per session, one decode step's
/// f32 activations (the residual stream and its norms, the widest layer's
/// intermediates, the logits). The same arithmetic for every shape, with
/// no share of the budget: a budget's size does not change what the
/// process holds. A prompt's prefill holds activations for all its tokens
/// at once, which this does not count.
pub fn overhead_bytes(config: &ModelConfig, sessions: usize) -> u64 {
    let widest_ffn = config
        .ffn
        .iter()
        .map(|f| match f {
            waste_model::config::FfnKind::Dense { intermediate_size } => *intermediate_size,
            waste_model::config::FfnKind::Moe => config.moe.as_ref().map_or(0, |m| {
                m.moe_intermediate_size
                    .max(m.shared.map_or(0, |s| s.intermediate_size))
            }),
        })
        .max()
        .unwrap_or(0);
    let step = 4 * (config.vocab_size + 8 * config.hidden_size + 2 * widest_ffn) as u64;
    RUNTIME_BYTES.saturating_add(step.saturating_mul(sessions as u64))
}

/// Bytes one session's attention state takes at `ctx` positions, its
/// cache rows in `cache` (recurrent state is f32 whatever the type).
pub fn kv_bytes(config: &ModelConfig, ctx: usize, cache: CacheType) -> u64 {
    let full_row = (config.kv_row_width(cache) * cache.bytes()) as u64;
    let recurrent = config.linear_attention.as_ref().map_or(0, |k| {
        let width = (k.num_heads * k.head_dim) as u64;
        4 * (3 * k.conv_kernel.saturating_sub(1) as u64 * width + width * k.head_dim as u64)
    });
    config
        .layer_attention
        .iter()
        .map(|kind| match kind {
            LayerAttention::Full => full_row.saturating_mul(ctx as u64),
            LayerAttention::Linear => recurrent,
        })
        .fold(0u64, u64::saturating_add)
}

/// The tensors of one class of the backbone (attention, routers, norms, ...)
/// as they sit in RAM.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorClass {
    pub name: &'static str,
    pub params: u64,
    /// The formats held, `+`-joined when the class mixes them.
    pub format: String,
    pub bits_per_weight: f64,
    pub bytes: u64,
}

/// How a backbone tensor is held once loaded: bf16 stays bf16, waste's
/// q8, q4 and q3 and a GGUF's ggml blocks stay as their blocks, everything
/// else is decoded to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resident {
    Bf16,
    Q8,
    Ggml(GgmlType),
    /// waste's 4- and 3-bit blocks (`Matrix::Packed`).
    Blocks(Format),
    F32,
}

impl Resident {
    /// How the node holds a tensor stored in block `format`.
    pub fn of_format(format: Format) -> Self {
        match format {
            Format::Q8 => Resident::Q8,
            Format::Ggml(t) => Resident::Ggml(t),
            f => Resident::Blocks(f),
        }
    }

    /// How the node holds a tensor stored as `storage`.
    pub fn of(storage: &Storage) -> Self {
        match storage {
            Storage::Bf16 => Resident::Bf16,
            Storage::Q8 => Resident::Q8,
            Storage::Ggml { ggml_type } => Resident::Ggml(*ggml_type),
            Storage::Blocks { format } => Resident::Blocks(*format),
            _ => Resident::F32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Resident::Bf16 => "bf16",
            Resident::Q8 => "q8",
            Resident::Ggml(t) => Format::Ggml(t).name(),
            Resident::Blocks(f) => f.name(),
            Resident::F32 => "f32",
        }
    }

    /// Bytes of a tensor of `shape` held this way (blocks are by rows of a
    /// matrix; a block tensor of another rank is held as f32).
    pub fn bytes(self, shape: &[usize]) -> u64 {
        let values = shape.iter().product::<usize>() as u64;
        match (self, shape) {
            (Resident::Bf16, _) => 2 * values,
            (Resident::Q8, &[rows, cols]) => (rows * Format::Q8.row_bytes(cols)) as u64,
            (Resident::Ggml(t), &[rows, cols]) => (rows * Format::Ggml(t).row_bytes(cols)) as u64,
            (Resident::Blocks(f), &[rows, cols]) => (rows * f.row_bytes(cols)) as u64,
            _ => 4 * values,
        }
    }
}

/// Sums `(name, shape, held as)` by class (`waste inspect`'s classes),
/// classes by name.
pub fn classes<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a [usize], Resident)>,
) -> Vec<TensorClass> {
    let mut by: BTreeMap<&'static str, (u64, u64, Vec<&'static str>)> = BTreeMap::new();
    for (name, shape, held) in tensors {
        let e = by.entry(tensor_class(name)).or_default();
        e.0 += shape.iter().product::<usize>() as u64;
        e.1 += held.bytes(shape);
        if !e.2.contains(&held.name()) {
            e.2.push(held.name());
        }
    }
    by.into_iter()
        .map(|(name, (params, bytes, mut formats))| {
            formats.sort_unstable();
            TensorClass {
                name,
                params,
                format: formats.join("+"),
                bits_per_weight: if params == 0 {
                    0.0
                } else {
                    bytes as f64 * 8.0 / params as f64
                },
                bytes,
            }
        })
        .collect()
}

/// Rows of the token embeddings a node caches when it reads them by row.
pub use waste_format::checkpoint::EMBEDDING_CACHE_ROWS;

/// The token-embedding tensor a node reads by row from its store instead
/// of holding (`waste_model::Model::embeddings_on_disk`): the embeddings,
/// unless the output head is tied to them (then the head needs the whole
/// table in RAM). `has` tells whether the backbone holds a tensor.
pub fn embeddings_by_row(config: &ModelConfig, has: impl Fn(&str) -> bool) -> Option<String> {
    let names = &config.names;
    let tied = config.tie_word_embeddings && !has(&names.lm_head);
    (!tied).then(|| names.model("embed_tokens.weight"))
}

/// The shape a table read by row is counted at: the rows its cache holds.
pub fn cached_rows_shape(shape: &[usize]) -> Vec<usize> {
    match *shape {
        [rows, cols] => vec![rows.min(EMBEDDING_CACHE_ROWS), cols],
        _ => shape.to_vec(),
    }
}

/// The classes of a store's backbone folder as the node will hold them:
/// embeddings read by row count as their cache.
pub fn backbone_classes(ckpt: &Checkpoint) -> Result<Vec<TensorClass>> {
    let config = ModelConfig::from_json_file(ckpt.config_json(), ckpt.config_path())?;
    let by_row = embeddings_by_row(&config, |n| ckpt.contains(n));
    let mut held = Vec::new();
    for name in ckpt.tensor_names() {
        let info = ckpt.info(name).map_err(|source| Error::Backbone {
            path: ckpt.dir().to_path_buf(),
            source,
        })?;
        let read_by_row = by_row.as_deref() == Some(name) && by_row_storage(&info.storage);
        let shape = if read_by_row {
            cached_rows_shape(&info.shape)
        } else {
            info.shape
        };
        held.push((name, shape, Resident::of(&info.storage)));
    }
    Ok(classes(held.iter().map(|(n, s, r)| (*n, s.as_slice(), *r))))
}

/// Whether rows of this storage stand alone, so a node reads them one at a
/// time (`waste_format::Checkpoint::rows`); block-scaled packs load whole.
fn by_row_storage(storage: &Storage) -> bool {
    matches!(
        storage,
        Storage::F32
            | Storage::Bf16
            | Storage::F16
            | Storage::Q8
            | Storage::Ggml { .. }
            | Storage::Blocks { .. }
    )
}

/// Bytes the backbone will occupy once loaded (see [`Resident`]).
pub fn backbone_bytes(ckpt: &Checkpoint) -> Result<u64> {
    Ok(backbone_classes(ckpt)?.iter().map(|c| c.bytes).sum())
}

/// The default RAM budget of a node and of `waste plan`: 80 % of what is
/// available (the host is shared), and within this process's cgroup its
/// limit less [`cgroup_headroom`] (inside a container /proc/meminfo shows
/// the host's memory). The cgroup is the node's own: a flat 80 % of it left
/// a fifth of a small cap to the page cache, which kept the backbone file's
/// pages there instead of experts.
pub fn default_budget() -> Option<u64> {
    let available = mem_available()? / 10 * 8;
    Some(match cgroup_limit() {
        Some(limit) => available.min(limit.saturating_sub(cgroup_headroom(limit))),
        None => available,
    })
}

/// What a cgroup charges beyond the plan: page tables, socket buffers, and
/// the page cache of files read without O_DIRECT (the tokenizer, the
/// embedding rows; the backbone's pages while it loads, dropped after). A
/// sixteenth of the limit, at least 32 MiB: under a 412 MB limit the
/// cgroup's usage, page cache included, peaked at 393 MB while the node
/// decoded (docs/BENCH.md, "Under a RAM cap").
pub fn cgroup_headroom(limit: u64) -> u64 {
    (limit / 16).max(32 << 20)
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), `None` when unlimited or unknown.
pub fn cgroup_limit() -> Option<u64> {
    let own = fs_err::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in own.lines() {
        // `0::/path` (v2) or `N:memory:/path` (v1).
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (root, file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            continue;
        };
        // A limit on any ancestor (a systemd slice, a pod) binds too.
        let own = Path::new(path);
        for dir in own.ancestors() {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            candidates.push(Path::new(root).join(rel).join(file));
        }
    }
    candidates
        .iter()
        .filter_map(|p| {
            let text = fs_err::read_to_string(p).ok()?;
            let v: u64 = text.trim().parse().ok()?;
            // v1 writes "no limit" as a page-rounded i64::MAX; v2 writes "max".
            (v < 1 << 60).then_some(v)
        })
        .min()
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = fs_err::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
