//! `waste synth-store`: writes a complete benchmark store of a family's
//! real expert sizes with random contents (waste_store::synth), after
//! checking free space; prints its sizes.

use std::path::PathBuf;

use anyhow::Result;
use waste_kernels::record::Recipe;
use waste_store::synth::{self, Family, SynthSpec};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// deepseek-v3 | qwen3-30b-a3b | kimi-k3 (kimi-k3: experts only, no backbone yet).
    #[arg(long)]
    like: Family,
    /// MoE layers to write.
    #[arg(long)]
    layers: u32,
    /// Routed experts per layer.
    #[arg(long)]
    experts: u32,
    /// Expert recipe: q3 | q3-q4down | q4 | q8.
    #[arg(long, default_value = "q3")]
    recipe: Recipe,
    /// Seed of the random contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the sizes and stop.
    #[arg(long)]
    dry_run: bool,
    /// The store folder to create (absent or empty).
    out: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let spec = SynthSpec {
        family: args.like,
        layers: args.layers,
        experts: args.experts,
        recipe: args.recipe,
        seed: args.seed,
    };
    let plan = synth::plan(&spec)?;
    let gb = |b: u64| b as f64 / 1e9;
    eprintln!(
        "{}: {} layers x {} experts of {:.2} MB ({}) = {:.2} GB of experts, {:.2} GB of backbone",
        args.like.name(),
        args.layers,
        args.experts,
        plan.record_bytes as f64 / 1e6,
        args.recipe.name(),
        gb(plan.expert_bytes),
        gb(plan.backbone_bytes)
    );
    if !args.like.has_backbone() {
        eprintln!(
            "{0}: experts only, for `waste bench store`; a store a node can run: \
             `waste synth --like {0} --layers N --experts E SRC` then \
             `waste convert SRC OUT --experts native|q3` (docs/BENCH.md)",
            args.like.name()
        );
    }
    if args.dry_run {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut last = 0;
    synth::write_store(&args.out, &spec, |done, total| {
        let pct = done * 100 / total.max(1);
        if pct >= last + 10 || done == total {
            eprintln!("  {done}/{total} records");
            last = pct;
        }
    })?;
    println!(
        "wrote {} ({:.2} GB) in {:.1} s",
        args.out.display(),
        gb(plan.total()),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
