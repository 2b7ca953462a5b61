//! The RAM plan, made before anything large is loaded: the backbone (as it
//! will sit in RAM: bf16 stays bf16, other stored formats widen to f32), the
//! attention/recurrent state of every session at the full context, the
//! buffers of expert reads in flight, and an expert cache in whatever is
//! left. A plan that does not fit is refused with its numbers, rather than
//! letting the machine swap.

use std::fmt;

use waste_format::Checkpoint;
use waste_format::checkpoint::Storage;
use waste_kernels::Format;
use waste_model::config::{LayerAttention, ModelConfig};

use crate::{Error, Result};

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
    /// Allocator slack, scratch and everything else small.
    pub overhead: u64,
    pub expert_cache: u64,
}

impl RamPlan {
    /// Plans `budget` for a model whose backbone is `backbone` bytes in RAM,
    /// `sessions` contexts of `ctx` positions and experts of `record_bytes`
    /// (the largest layer's), `top_k` per token. Errors with the numbers
    /// when the fixed parts do not fit.
    pub fn new(
        budget: u64,
        backbone: u64,
        config: &ModelConfig,
        ctx: usize,
        sessions: usize,
        record_bytes: u64,
        top_k: u64,
    ) -> Result<Self> {
        let kv_per_session = kv_bytes(config, ctx);
        // Demand reads of one layer plus prefetches of the next, twice over
        // so a layer's records can arrive while the previous ones are used.
        let in_flight = 4 * top_k.max(1) * record_bytes;
        let overhead = (budget / 20).max(64 << 20);
        let fixed = backbone + kv_per_session * sessions as u64 + in_flight + overhead;
        let mut plan = Self {
            budget,
            backbone,
            kv_per_session,
            sessions: sessions as u64,
            in_flight,
            overhead,
            expert_cache: 0,
        };
        if fixed > budget {
            return Err(Error::RamPlan(format!(
                "the RAM plan does not fit: {plan} needs {} but the budget is {}; raise --ram-budget, lower --ctx-size or the session count",
                gib(fixed),
                gib(budget)
            )));
        }
        plan.expert_cache = budget - fixed;
        Ok(plan)
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

/// Bytes one session's attention state takes at `ctx` positions.
pub fn kv_bytes(config: &ModelConfig, ctx: usize) -> u64 {
    let full_row = config.kv_row_width() as u64 * 4;
    let recurrent = config.linear_attention.as_ref().map_or(0, |k| {
        let width = (k.num_heads * k.head_dim) as u64;
        4 * (3 * k.conv_kernel.saturating_sub(1) as u64 * width + width * k.head_dim as u64)
    });
    config
        .layer_attention
        .iter()
        .map(|kind| match kind {
            LayerAttention::Full => full_row * ctx as u64,
            LayerAttention::Linear => recurrent,
        })
        .sum()
}

/// Bytes the backbone will occupy once loaded: every tensor of the folder,
/// bf16 at 2 bytes per value, q8 and ggml as their blocks (34 bytes per 32
/// values of a row for q8), everything else decoded to f32.
pub fn backbone_bytes(ckpt: &Checkpoint) -> Result<u64> {
    let mut total = 0u64;
    for name in ckpt.tensor_names() {
        let info = ckpt.info(name).map_err(|source| Error::Backbone {
            path: ckpt.dir().to_path_buf(),
            source,
        })?;
        let values = info.shape.iter().product::<usize>() as u64;
        total += match (info.storage, &info.shape[..]) {
            (Storage::Bf16, _) => 2 * values,
            (Storage::Q8, &[rows, cols]) => (rows * Format::Q8.row_bytes(cols)) as u64,
            (Storage::Ggml { ggml_type }, &[rows, cols]) => {
                (rows * Format::Ggml(ggml_type).row_bytes(cols)) as u64
            }
            _ => 4 * values,
        };
    }
    Ok(total)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = fs_err::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
