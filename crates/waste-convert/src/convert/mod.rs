//! The store converter: a released checkpoint (Hugging Face folder or cache
//! snapshot, or GGUF file) into a waste store, streaming and resumable.
//!
//! [`Plan::new`] decides everything from names, shapes and storage;
//! [`Estimate`] prices it; [`convert`] writes `backbone/` (shards streamed a
//! tensor at a time), then `experts/` (one layer file at a time, experts
//! built in parallel within a bounded window), then the two indexes, then
//! each folder's completion marker (after `backbone/waste-backbone.json`:
//! the experts index's sha256 and the shard checksums), then
//! `manifest.json`, last and atomically. A killed run resumes from its
//! journal ([`resume`]) and produces byte-identical files.

pub mod backbone;
pub mod estimate;
pub mod experts;
pub mod interrupt;
pub mod names;
pub mod native_backbone;
pub mod options;
pub mod plan;
pub mod precision;
pub mod progress;
pub mod resume;
pub mod source;
pub mod upcycle;

use std::path::Path;
use std::time::Instant;

use waste_format::ExpertsIndex;
use waste_format::completion;
use waste_format::manifest::Finish;

pub use estimate::{Estimate, check_disk, human_bytes};
pub use native_backbone::NativeBackbone;
pub use options::{BackboneMode, ExpertsMode, Options, parse_upcycle};
pub use plan::{LayerPlan, Plan, created_by};
pub use source::Source;

use crate::error::{Error, Result};
use progress::{Progress, Unit};
use resume::Journal;

/// The source named by `path`, upcycled when the options ask for it.
pub fn open_source(path: &Path, options: &Options) -> Result<Source> {
    let source = Source::open(path)?;
    match options.upcycle {
        Some((e, k)) => source.upcycled(e, k, options.seed),
        None => Ok(source),
    }
}

/// Worker threads for `jobs` (0 = every core).
pub fn jobs(jobs: usize) -> usize {
    if jobs > 0 {
        jobs
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    }
}

/// What a finished conversion did.
#[derive(Debug, Clone)]
pub struct Summary {
    pub seconds: f64,
    /// Expert parameters converted by this run (resumed layers excluded).
    pub expert_params: u64,
    /// Seconds spent on those experts.
    pub expert_seconds: f64,
    pub jobs: usize,
    pub layers_resumed: usize,
    pub shards_resumed: usize,
    /// Re-quantization error of the experts converted by this run (zero
    /// for experts kept native: they are the source's bytes).
    pub expert_error: experts::WeightError,
}

impl Summary {
    /// Expert parameters per second per worker thread.
    pub fn params_per_sec_per_core(&self) -> f64 {
        self.expert_params as f64 / self.expert_seconds.max(1e-9) / self.jobs.max(1) as f64
    }
}

/// The error of a layer's (or a run's) experts, for the log and the summary.
pub fn describe_error(e: experts::WeightError) -> String {
    match e.relative() {
        Some(r) => format!("relative weight error {r:.4} against the source's exact values"),
        None => "experts kept exactly as released".to_string(),
    }
}

/// [`Error::Interrupted`] when a stop was asked for ([`interrupt`]), with
/// `layers_done` of `layers` expert layers finished.
fn stop_if_asked(out: &Path, layers_done: usize, layers: usize) -> Result<()> {
    if interrupt::requested() {
        return Err(Error::Interrupted {
            path: out.to_path_buf(),
            layers_done,
            layers,
        });
    }
    Ok(())
}

/// Converts `source` into the store folder `out` as `plan` says.
pub fn convert(source: &Source, plan: &Plan, options: &Options, out: &Path) -> Result<Summary> {
    let jobs = jobs(options.jobs);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("convert-{i}"))
        .build()
        .map_err(|e| Error::Output {
            path: out.to_path_buf(),
            reason: format!("cannot start {jobs} worker threads: {e}"),
        })?;
    pool.install(|| run(source, plan, options, out, jobs))
}

fn run(
    source: &Source,
    plan: &Plan,
    options: &Options,
    out: &Path,
    jobs: usize,
) -> Result<Summary> {
    let start = Instant::now();
    let mut journal = Journal::open(out, &plan.fingerprint)?;
    let (bdir, edir) = (out.join("backbone"), out.join("experts"));
    for dir in [&bdir, &edir] {
        fs_err::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // A rerun after the markers were written unmarks until it finishes again.
        completion::unmark(dir)?;
        resume::remove_partial_files(dir)?;
    }
    let mut summary = Summary {
        seconds: 0.0,
        expert_params: 0,
        expert_seconds: 0.0,
        jobs,
        layers_resumed: 0,
        shards_resumed: 0,
        expert_error: experts::WeightError::default(),
    };

    let bar = Progress::new(plan.backbone_bytes(), Unit::Bytes, "backbone");
    for shard in &plan.shards {
        let bytes: u64 = shard.tensors.iter().map(|t| t.bytes).sum();
        if journal.shard_done(&bdir, &shard.file) {
            summary.shards_resumed += 1;
            bar.inc(bytes);
            continue;
        }
        stop_if_asked(out, 0, plan.layers.len())?;
        backbone::write_shard(source, shard, &bdir, &|n| bar.inc(n))?;
        journal.mark_shard(&shard.file)?;
    }
    backbone::write_backbone_index(&plan.shards, &bdir)?;
    backbone::write_aux_files(source, options.upcycle.is_some(), &bdir)?;
    bar.finish();

    let bar = Progress::new(plan.expert_params(), Unit::Params, "experts");
    let mut index = ExpertsIndex::new(
        &plan.model_type,
        &plan.experts_format,
        plan.experts_format_id,
        plan.top_k,
    );
    index.activation = plan.activation;
    let experts_start = Instant::now();
    for (i, layer) in plan.layers.iter().enumerate() {
        let params = layer.expert_params() * layer.experts.len() as u64;
        if let Some(entry) = journal.layer_done(&edir, layer.layer) {
            summary.layers_resumed += 1;
            bar.inc(params);
            index.layers.push(entry);
            continue;
        }
        stop_if_asked(out, i, plan.layers.len())?;
        bar.set_message(format!("layer {}", layer.layer));
        let t = Instant::now();
        let (entry, error) = experts::convert_layer(
            source,
            options.experts,
            layer,
            plan.experts_format_id,
            &edir,
            jobs,
            &|n| {
                bar.inc(n);
                stop_if_asked(out, i, plan.layers.len())
            },
        )?;
        let secs = t.elapsed().as_secs_f64();
        summary.expert_params += params;
        summary.expert_error += error;
        tracing::info!(
            "layer {} ({}/{}): {} experts of {}x{} in {secs:.1} s, {:.1} M params/s, {}",
            layer.layer,
            i + 1,
            plan.layers.len(),
            layer.experts.len(),
            layer.d_model,
            layer.d_ff,
            params as f64 / secs.max(1e-9) / 1e6,
            describe_error(error),
        );
        journal.mark_layer(entry.clone())?;
        index.layers.push(entry);
    }
    summary.expert_seconds = experts_start.elapsed().as_secs_f64();
    bar.finish();
    index.save(&edir)?;
    waste_format::manifest::finish_store(
        out,
        plan.shards.iter().map(|s| s.file.as_str()),
        Finish {
            created_by: &created_by(),
            source: source.identity()?,
            experts_format: &plan.experts_format,
            backbone_format: &plan.backbone_format,
        },
    )?;
    journal.finish()?;
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}
