//! `waste convert SRC OUT`: a released checkpoint (Hugging Face folder or
//! cache snapshot, or a GGUF file) into a store. Prints the estimate first
//! and refuses when the disk cannot hold the output; reports throughput and
//! peak anonymous memory at the end. A killed run resumes when rerun with
//! the same arguments.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use waste_convert::convert::precision::ClassFormats;
use waste_convert::convert::{
    self, BackboneMode, Estimate, ExpertsMode, Options, Plan, human_bytes, parse_upcycle,
};
use waste_convert::memory::PeakRss;

use super::plan::RamFlags;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The release: a Hugging Face folder (plain, sharded, or a hub cache snapshot) or a .gguf file.
    source: PathBuf,
    /// The store folder to write (created; must be empty or an unfinished conversion of the same arguments).
    out: PathBuf,
    /// Expert format: q3, q3-q4down, q3-tcq-q4down (gate and up trellis-coded, down q4), q4, q8, q3-rtn, q3-tcq (trellis-coded), bf16, f32, or native (as released: the exact path).
    #[arg(long, default_value = "q3", value_parser = |s: &str| s.parse::<ExpertsMode>())]
    experts: ExpertsMode,
    /// Backbone matrices: native (as stored), bf16, q8, q4, q3, q3-tcq (3.25 bits like q3, less
    /// error on the FFN and embeddings, a slower decode), class=format,... (those classes, the rest
    /// native), or auto (a format per class chosen to fit --ram-budget; routers and vectors keep
    /// their precision).
    #[arg(long, default_value = "native", value_parser = |s: &str| s.parse::<BackboneMode>())]
    backbone: BackboneMode,
    /// With --backbone auto: the node's RAM flags (--ram-budget is required then).
    #[command(flatten)]
    ram: RamFlags,
    /// Worker threads (0 = every core).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Turn a dense llama/mistral model into an MoE of E copies of each FFN under a seeded top-K router.
    #[arg(long, value_name = "E:K", value_parser = parse_upcycle)]
    upcycle: Option<(usize, usize)>,
    /// Seed of the upcycled routers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the estimate and the free space, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Read back and check every expert record after converting.
    #[arg(long)]
    verify: bool,
    /// How progress is shown: bars on stderr, or for scripts one JSON object per line on stdout
    /// (`{"step":"estimate",...}`, then each step's `{"step","unit","done","total","per_sec",
    /// "elapsed_s","eta_s","finished"}` at most once a second, then `{"step":"done","store",...}`).
    #[arg(long, value_enum, default_value_t = ProgressFormat::Bar)]
    progress: ProgressFormat,
}

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProgressFormat {
    Bar,
    Json,
}

pub fn run(args: &Args) -> Result<()> {
    let mut options = Options {
        experts: args.experts,
        backbone: args.backbone,
        jobs: args.jobs,
        upcycle: args.upcycle,
        seed: args.seed,
    };
    let source = convert::open_source(&args.source, &options)
        .with_context(|| format!("open {}", args.source.display()))?;
    if options.backbone == BackboneMode::Auto {
        options.backbone = BackboneMode::Blocks(auto(args, &source)?);
    }
    // Refuse, before anything is written, a model the loader would refuse.
    crate::model_check::source(&source)?;
    let plan = Plan::new(&source, &options).context("plan the conversion")?;
    let source_bytes = source.identity()?.files.iter().map(|f| f.bytes).sum();
    let estimate = Estimate::new(
        &plan,
        options.experts,
        source_bytes,
        convert::jobs(args.jobs),
    );
    if plan.layers.is_empty() {
        eprintln!(
            "{}: a dense model (no routed experts): everything goes to backbone/ ({}) and the store serves no experts. \
             To run it as a Mixture of Experts, convert with --upcycle E:K (E copies of each FFN under a top-K router, e.g. --upcycle 8:2).",
            args.source.display(),
            plan.backbone_format
        );
    } else {
        eprintln!(
            "{}: {} MoE layers, experts {} (top-{}), backbone {}",
            args.source.display(),
            plan.layers.len(),
            plan.experts_format,
            plan.top_k,
            plan.backbone_format
        );
    }
    eprintln!("{estimate}");
    if !args.dry_run {
        stop_on_signal()?;
    }
    let json = args.progress == ProgressFormat::Json;
    if json {
        convert::progress::report_as_json();
        println!(
            "{}",
            serde_json::json!({
                "step": "estimate",
                "seconds": estimate.seconds.round(),
                "jobs": estimate.jobs,
                "output_bytes": estimate.total_bytes(),
                "backbone_bytes": estimate.backbone_bytes,
                "experts_bytes": estimate.experts_bytes,
                "expert_params": estimate.expert_params,
                "source_bytes": estimate.source_bytes,
            })
        );
    }
    let backbone_bits =
        8.0 * estimate.backbone_bytes as f64 / estimate.backbone_params.max(1) as f64;
    if source.kind_name() == "gguf" && args.backbone == BackboneMode::Native && backbone_bits > 16.5
    {
        eprintln!(
            "note:     the GGUF's backbone is mostly F32 in the file and stays so in backbone/ (quantized tensors keep their blocks) \
             ({} at {backbone_bits:.1} bits/weight); --backbone bf16 halves that, --backbone q8 keeps 8.5 bits/weight",
            human_bytes(estimate.backbone_bytes)
        );
    }
    let free = convert::check_disk(&args.out, estimate.total_bytes())
        .with_context(|| format!("check free space for {}", args.out.display()))?;
    eprintln!("disk:     {} free", human_bytes(free));
    if args.dry_run {
        return Ok(());
    }
    let rss = PeakRss::start();
    let summary = convert::convert(&source, &plan, &options, &args.out)
        .with_context(|| format!("convert into {}", args.out.display()))?;
    let peak = rss.stop();
    eprintln!(
        "converted in {:.1} s: {:.2} M expert params/s per core ({} jobs), peak RssAnon {}{}",
        summary.seconds,
        summary.params_per_sec_per_core() / 1e6,
        summary.jobs,
        human_bytes(peak),
        if summary.layers_resumed + summary.shards_resumed > 0 {
            format!(
                ", resumed {} layers and {} shards",
                summary.layers_resumed, summary.shards_resumed
            )
        } else {
            String::new()
        }
    );
    if summary.expert_params > 0 {
        eprintln!(
            "expert weights: {}",
            waste_convert::convert::describe_error(summary.expert_error)
        );
    }
    if args.verify {
        let dir = waste_format::ExpertsDir::open(&args.out.join("experts"))?;
        dir.verify_all(|_, _| {})?;
        eprintln!("verified every expert record");
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "step": "done",
                "store": args.out,
                "seconds": (summary.seconds * 10.0).round() / 10.0,
                "expert_params": summary.expert_params,
                "params_per_sec_per_core": summary.params_per_sec_per_core().round(),
                "jobs": summary.jobs,
                "layers_resumed": summary.layers_resumed,
                "shards_resumed": summary.shards_resumed,
                "peak_rss_anon_bytes": peak,
            })
        );
    } else {
        println!("{}", args.out.display());
    }
    Ok(())
}

/// The first SIGINT or SIGTERM asks the conversion to stop at its next
/// check (between shards and after each expert) so that it exits with
/// EX_TEMPFAIL and resumes when rerun; a second one ends the process at once.
fn stop_on_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Registered here, before the caller goes on, so that no signal from
    // this point on takes the default action.
    let (mut term, mut int) = {
        let _context = runtime.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    std::thread::spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            convert::interrupt::request();
            eprintln!(
                "stopping after the expert in progress (what is written is kept; \
                 the same command resumes); a second signal stops at once"
            );
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            std::process::exit(130);
        });
    });
    Ok(())
}

/// `--backbone auto`: the formats `waste plan` chooses for this source
/// under the node's RAM flags given here, printed class by class.
fn auto(args: &Args, source: &convert::Source) -> Result<ClassFormats> {
    if args.ram.ram_budget.is_none() {
        bail!("--backbone auto chooses formats to fit a RAM budget: give --ram-budget");
    }
    let ExpertsMode::Recipe(recipe) = args.experts else {
        bail!(
            "--backbone auto plans expert reads of a recipe: give --experts q3, q3-q4down, q3-tcq-q4down, q4 or q8"
        );
    };
    let (formats, report) = waste_node::plan::auto_formats(source, recipe, args.ram.into())?;
    for c in &report.classes {
        eprintln!(
            "backbone auto: {:<20} {:>10} {:>6.2} bits/w {:>12} bytes",
            c.name, c.format, c.bits_per_weight, c.bytes
        );
    }
    if !report.fits {
        bail!(
            "--backbone auto: the plan needs {} bytes of a {} budget even with every class at q3: \
             raise --ram-budget, lower --ctx-size or --max-sessions",
            report.resident_bytes,
            report.budget_bytes
        );
    }
    eprintln!(
        "backbone auto: {} bytes resident of a {} budget: fits",
        report.resident_bytes, report.budget_bytes
    );
    Ok(formats)
}
