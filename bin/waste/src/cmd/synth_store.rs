//! `waste synth-store`: writes a complete benchmark store of a family's
//! real expert sizes with random contents (waste_store::synth), after
//! checking free space; prints its sizes. Kimi K3, whose hybrid backbone
//! waste_store::synth does not generate, is made as a user would make it:
//! a synthetic checkpoint (`waste synth`: K3's one dense layer, `--layers`
//! MoE layers and K3's 163840-token vocabulary, with the byte-level
//! tokenizer of the other synthetic stores) converted by `waste convert`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use waste_convert::convert::precision::ClassFormats;
use waste_convert::convert::{self, BackboneMode, ExpertsMode};
use waste_kernels::Format;
use waste_kernels::record::Recipe;
use waste_store::synth::{self, BackboneFormat, Family, SynthSpec};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// deepseek-v3 | qwen3-30b-a3b | kimi-k3.
    #[arg(long)]
    like: Family,
    /// MoE layers to write.
    #[arg(long)]
    layers: u32,
    /// Routed experts per layer.
    #[arg(long)]
    experts: u32,
    /// Expert recipe: q3 | q3-q4down | q3-tcq-q4down | q4 | q8.
    #[arg(long, default_value = "q3")]
    recipe: Recipe,
    /// Backbone matrices: bf16, or waste's blocks held packed by the node:
    /// q8 (about half the RAM and memory traffic of bf16), q4 or q3; or, for
    /// kimi-k3, auto: the formats per class `waste plan --like kimi-k3
    /// --backbone auto` chooses for the whole release under the RAM flags.
    #[arg(long, default_value = "bf16")]
    backbone: Backbone,
    /// With --backbone auto: the node's RAM flags for the whole release.
    #[command(flatten)]
    ram: super::plan::RamFlags,
    /// Seed of the random contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write experts/ only (all `waste bench store` reads): no backbone, so
    /// no node can run the store; for kimi-k3 much faster than the whole store.
    #[arg(long)]
    experts_only: bool,
    /// Print the sizes and stop.
    #[arg(long)]
    dry_run: bool,
    /// The store folder to create (absent or empty).
    out: PathBuf,
}

/// `--backbone`: one format, or `auto` (a format per class).
#[derive(Debug, Clone, Copy)]
enum Backbone {
    Format(BackboneFormat),
    Auto,
}

impl std::str::FromStr for Backbone {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            s => s.parse().map(Self::Format),
        }
    }
}

pub fn run(args: &Args) -> Result<()> {
    let backbone = match args.backbone {
        Backbone::Format(f) => f,
        Backbone::Auto if !args.like.has_backbone() && !args.experts_only => BackboneFormat::Bf16,
        Backbone::Auto => bail!("--backbone auto is for --like kimi-k3 with a backbone"),
    };
    let spec = SynthSpec {
        family: args.like,
        layers: args.layers,
        experts: args.experts,
        recipe: args.recipe,
        seed: args.seed,
        experts_only: args.experts_only,
        backbone,
    };
    let plan = synth::plan(&spec)?;
    let gb = |b: u64| b as f64 / 1e9;
    let via_checkpoint = !args.experts_only && !args.like.has_backbone();
    eprintln!(
        "{}: {} layers x {} experts of {:.2} MB ({}) = {:.2} GB of experts, {}",
        args.like.name(),
        args.layers,
        args.experts,
        plan.record_bytes as f64 / 1e6,
        args.recipe.name(),
        gb(plan.expert_bytes),
        if via_checkpoint {
            "backbone from a synthetic checkpoint (waste synth + waste convert)".to_string()
        } else {
            format!(
                "{:.2} GB of backbone ({})",
                gb(plan.backbone_bytes),
                backbone.name()
            )
        }
    );
    if args.dry_run {
        return Ok(());
    }
    let started = std::time::Instant::now();
    if via_checkpoint {
        through_checkpoint(args, &plan)?;
    } else {
        let mut last = 0;
        synth::write_store(&args.out, &spec, |done, total| {
            let pct = done * 100 / total.max(1);
            if pct >= last + 10 || done == total {
                eprintln!("  {done}/{total} records");
                last = pct;
            }
        })?;
    }
    println!(
        "wrote {} ({:.2} GB) in {:.1} s",
        args.out.display(),
        gb(convert::estimate::bytes_in(&args.out)),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What `--backbone auto` chooses for the whole K3 release under the RAM
/// flags: the partial store then holds each class as the full one would.
fn release_auto(args: &Args) -> Result<BackboneMode> {
    use waste_node::plan::{Target, resolve_auto};
    let like = Target::Like(args.like.like(), args.recipe, BackboneMode::Auto);
    match resolve_auto(&like, args.ram.into())? {
        Target::Like(_, _, mode) => Ok(mode),
        _ => unreachable!("resolve_auto keeps the target's kind"),
    }
}

/// `waste synth --like kimi-k3` (one dense layer in front of `layers` MoE
/// layers, as the release has) into a sibling folder, converted into `out`
/// with the recipe, then removed.
fn through_checkpoint(args: &Args, plan: &synth::SynthPlan) -> Result<()> {
    if args.out.exists() && fs_err::read_dir(&args.out)?.next().is_some() {
        bail!("{} exists and is not empty", args.out.display());
    }
    if args.like.has_backbone() {
        bail!("{} writes its own backbone", args.like.name());
    }
    let like = args.like.like();
    let src = args.out.with_extension("checkpoint");
    if src.exists() {
        bail!(
            "{} exists: remove it (a synthetic checkpoint left by an interrupted run)",
            src.display()
        );
    }
    let options = waste_convert::synth::Options {
        like,
        layers: Some(args.layers as usize + 1),
        experts: Some(args.experts as usize),
        // K3's own 163840 rows: the embeddings and head are as large as
        // the release's, so a node on the store holds what K3's would.
        vocab: None,
        bf16: false,
        seed: args.seed,
    };
    // Both the checkpoint and the store it converts into must fit at once:
    // the checkpoint is removed only after the conversion. The store holds
    // the experts at the recipe's size and the rest as the checkpoint has it.
    let (ckpt_bytes, ckpt_expert_bytes) = waste_convert::synth::sizes(&options);
    let store_bytes = plan.expert_bytes + (ckpt_bytes - ckpt_expert_bytes);
    convert::check_disk(&src, ckpt_bytes + store_bytes).with_context(|| {
        format!(
            "the synthetic checkpoint ({:.2} GB) and the store ({:.2} GB) must fit at once",
            ckpt_bytes as f64 / 1e9,
            store_bytes as f64 / 1e9
        )
    })?;
    eprintln!(
        "  synthesising the checkpoint ({:.2} GB) into {}",
        ckpt_bytes as f64 / 1e9,
        src.display()
    );
    waste_convert::synth::synth(&options, &src)
        .with_context(|| format!("synthesise a checkpoint into {}", src.display()))?;
    // The byte-level tokenizer of the other synthetic stores (its ids are
    // the first 259 of K3's vocabulary), copied into the store by convert,
    // so the node takes prompts and chats.
    for (file, json) in [
        ("tokenizer.json", synth::tokenizer::tokenizer_json()),
        (
            "tokenizer_config.json",
            synth::tokenizer::tokenizer_config_json(),
        ),
    ] {
        fs_err::write(src.join(file), serde_json::to_vec_pretty(&json)?)?;
    }
    let copts = convert::Options {
        experts: ExpertsMode::Recipe(args.recipe),
        backbone: match args.backbone {
            Backbone::Format(BackboneFormat::Bf16) => BackboneMode::Native,
            Backbone::Format(BackboneFormat::Q8) => BackboneMode::Q8,
            Backbone::Format(BackboneFormat::Q4) => {
                BackboneMode::Blocks(ClassFormats::uniform(Format::Q4))
            }
            Backbone::Format(BackboneFormat::Q3) => {
                BackboneMode::Blocks(ClassFormats::uniform(Format::Q3))
            }
            Backbone::Auto => release_auto(args)?,
        },
        ..convert::Options::default()
    };
    eprintln!(
        "  converting it (experts {}, backbone {}) into a store of at most {:.2} GB",
        args.recipe.name(),
        copts.backbone.name(),
        store_bytes as f64 / 1e9
    );
    let source = convert::open_source(&src, &copts)?;
    let plan = convert::Plan::new(&source, &copts)?;
    convert::convert(&source, &plan, &copts, &args.out)
        .with_context(|| format!("convert {} into {}", src.display(), args.out.display()))?;
    drop(source);
    fs_err::remove_dir_all(&src)?;
    Ok(())
}
