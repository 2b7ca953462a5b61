//! `waste inspect PATH [--verify] [--json]`: parameters, bytes and bits per
//! weight of a store by tensor class, expert bytes per token, and with
//! `--verify` every record checked against its checksum and the store's
//! config and tensors against the rules the loader applies. A GGUF file or
//! a Hugging Face folder is described as it stands (types by class, the
//! kernels its stored types would use).

use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_convert::convert::progress::{Progress, Unit};
use waste_convert::inspect::inspect;
use waste_convert::inspect::release::inspect_release;
use waste_format::{Checkpoint, ExpertsDir};

use crate::model_check;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A store folder (manifest.json, backbone/, experts/), a .gguf file (split
    /// or not) or a Hugging Face folder.
    path: PathBuf,
    /// Read every expert record and check its checksum; decode every backbone
    /// tensor (stores only).
    #[arg(long)]
    verify: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    if !waste_format::manifest::is_store(&args.path) {
        anyhow::ensure!(
            !args.verify,
            "--verify checks a converted store; {} is a release (convert it first)",
            args.path.display()
        );
        let report = inspect_release(&args.path)
            .with_context(|| format!("inspect {}", args.path.display()))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!("{report}");
        }
        return Ok(());
    }
    let bar = Progress::new(0, Unit::Items, "verify");
    let report = inspect(&args.path, args.verify, |done, total| bar.set(done, total))
        .with_context(|| format!("inspect {}", args.path.display()));
    bar.clear();
    let report = report?;
    if args.verify {
        // The store must describe a model the loader accepts, as convert checked.
        let dir = args.path.join("backbone");
        waste_format::backbone::check(&dir, true)
            .with_context(|| format!("check backbone {}", dir.display()))?;
        waste_format::completion::check_experts(&args.path.join("experts"))?;
        let backbone = Checkpoint::open(&dir)?;
        let config = model_check::folder(&backbone, false)?;
        let experts = ExpertsDir::open(&args.path.join("experts"))?;
        model_check::store_experts(&config, experts.index(), backbone.config_path())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}
