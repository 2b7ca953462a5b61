//! `waste plan`: the node's RAM plan without starting a node, for a store or
//! for a release's shape (`--like`): the backbone by tensor class as the node
//! holds it, one session's attention state at the context size, the expert
//! reads in flight, the expert cache in what is left, and whether it fits.
//! The arithmetic is the node's own (`waste_node::plan`); the flags are the
//! node's RAM flags and mean the same.

use std::path::PathBuf;

use anyhow::{Result, bail};
use waste_convert::convert::BackboneMode;
use waste_convert::synth::Like;
use waste_kernels::record::Recipe;
use waste_model::cache::CacheType;
use waste_node::parse_size;
use waste_node::plan::{RamSettings, Report, Target};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    ram: RamFlags,
    /// Disk read rate for the decode bound, in GB/s (10^9 bytes).
    #[arg(long, default_value_t = 3.0)]
    disk_gbps: f64,
    /// Print the plan as one JSON object.
    #[arg(long)]
    json: bool,
}

/// What to plan, as `waste plan` and `waste doctor` take it: a store, a
/// release to convert, or a release's shape.
#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    /// A store (the folder holding backbone/ and experts/), or a release to
    /// convert: a Hugging Face folder or a GGUF file.
    #[arg(conflicts_with = "like")]
    model: Option<PathBuf>,
    /// Plan a release's full shape instead of a store: deepseek-v3 | kimi-k2 |
    /// kimi-k2-thinking | qwen3-30b-a3b | kimi-k3.
    #[arg(long)]
    like: Option<Like>,
    /// For a release or --like: the expert recipe it would be converted with
    /// (q3 | q3-q4down | q3-tcq-q4down | q4 | q8).
    #[arg(long, default_value = "q3")]
    experts: Recipe,
    /// For a release or --like: the backbone format it would be converted
    /// with: native (a release's own; --like has none), bf16, q8, q4, q3,
    /// q3-tcq (waste's blocks), class=format,... (those classes), or auto (a
    /// format per class, demoted from q8 in the measured order until the
    /// plan fits the budget) [default: native for a release, q8 for --like].
    #[arg(long, value_parser = |s: &str| s.parse::<BackboneMode>())]
    backbone: Option<BackboneMode>,
}

impl TargetArgs {
    /// The plan's target; `None` where neither a model nor --like is given.
    pub fn target(&self) -> Option<Target> {
        match (&self.model, self.like) {
            (Some(path), _) => Some(Target::of_path(path, self.experts, self.backbone)),
            (None, Some(like)) => Some(Target::Like(
                like,
                self.experts,
                self.backbone.unwrap_or(BackboneMode::Q8),
            )),
            (None, None) => None,
        }
    }
}

/// The node's RAM flags, as `waste node` takes them and means them; every
/// command that plans a node's RAM takes these.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct RamFlags {
    /// RAM the node may use, e.g. 24G (G: GiB; plain digits: bytes) (default: as
    /// the node's, 80 % of available memory, at most the cgroup's limit less
    /// 1/16 of it, at least 32 MiB).
    #[arg(long, value_parser = parse_size)]
    pub ram_budget: Option<u64>,
    /// Context size in tokens per session (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx_size: Option<usize>,
    /// Sessions kept at once [default: the node's, 4].
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// The attention cache's value type, f32 or f16 [default: the node's, f32].
    #[arg(long, default_value = "f32")]
    pub cache_type: CacheType,
}

impl From<RamFlags> for RamSettings {
    fn from(f: RamFlags) -> Self {
        RamSettings {
            ram_budget: f.ram_budget,
            ctx_size: f.ctx_size,
            max_sessions: f.max_sessions,
            cache_type: f.cache_type,
        }
    }
}

pub fn run(args: &Args) -> Result<()> {
    let Some(target) = args.target.target() else {
        bail!("give a store, a release or --like");
    };
    let report = waste_node::plan::report(&target, args.ram.into(), args.disk_gbps)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

pub fn text(r: &Report) -> String {
    let gb = |b: u64| format!("{:.2} GB", b as f64 / 1e9);
    let mut s = format!("{}\n\nbackbone in RAM, by tensor class:\n", r.source);
    s += &format!(
        "  {:<20} {:>15} {:>10} {:>7} {:>12}\n",
        "class", "params", "format", "bits/w", "bytes"
    );
    for c in &r.classes {
        s += &format!(
            "  {:<20} {:>15} {:>10} {:>7.2} {:>12}\n",
            c.name,
            c.params,
            c.format,
            c.bits_per_weight,
            gb(c.bytes)
        );
    }
    s += &format!(
        "  {:<20} {:>15} {:>10} {:>7.2} {:>12}\n\n",
        "total",
        r.params,
        "",
        8.0 * r.backbone_bytes as f64 / r.params.max(1) as f64,
        gb(r.backbone_bytes)
    );
    s += &format!(
        "attention state: {} per session at {} tokens ({} cache), {} session(s)\n",
        gb(r.state_bytes_per_session),
        r.ctx_size,
        r.cache_type,
        r.sessions
    );
    s += &format!(
        "expert reads in flight: {}; overhead: {}; expert cache: {}\n",
        gb(r.in_flight_bytes),
        gb(r.overhead_bytes),
        gb(r.expert_cache_bytes)
    );
    let fixed = r.resident_bytes - r.expert_cache_bytes.min(r.experts_bytes);
    s += &if r.fits {
        format!(
            "resident: {} of a {} budget: fits\n",
            gb(r.resident_bytes),
            gb(r.budget_bytes)
        )
    } else {
        format!(
            "does not fit: the fixed parts need {} but the budget is {} (raise --ram-budget, lower --ctx-size or --max-sessions)\n",
            gb(fixed),
            gb(r.budget_bytes)
        )
    };
    if r.expert_layers > 0 {
        s += &format!(
            "experts ({}): {} MoE layers, {} on disk; a token reads {}: at most {:.2} tok/s at {:.2} GB/s when every expert comes from disk\n",
            r.experts_format,
            r.expert_layers,
            gb(r.experts_bytes),
            gb(r.expert_bytes_per_token),
            r.decode_bound_tok_s,
            r.disk_gbps
        );
    }
    s
}
