//! `waste inspect STORE [--verify] [--json]`: parameters, bytes and bits per
//! weight of a store by tensor class, expert bytes per token, and with
//! `--verify` every record checked against its checksum and the store's
//! config and tensors against the rules the loader applies.

use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_convert::convert::progress::{Progress, Unit};
use waste_convert::inspect::inspect;
use waste_format::{Checkpoint, ExpertsDir};

use crate::model_check;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store folder (manifest.json, backbone/, experts/).
    store: PathBuf,
    /// Read every expert record and check its checksum; decode every backbone tensor.
    #[arg(long)]
    verify: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let bar = Progress::new(0, Unit::Items, "verify");
    let report = inspect(&args.store, args.verify, |done, total| bar.set(done, total))
        .with_context(|| format!("inspect {}", args.store.display()));
    bar.clear();
    let report = report?;
    if args.verify {
        // The store must describe a model the loader accepts, as convert checked.
        let dir = args.store.join("backbone");
        waste_format::backbone::check(&dir, true)
            .with_context(|| format!("check backbone {}", dir.display()))?;
        waste_format::completion::check_experts(&args.store.join("experts"))?;
        let backbone = Checkpoint::open(&dir)?;
        let config = model_check::folder(&backbone, false)?;
        let experts = ExpertsDir::open(&args.store.join("experts"))?;
        model_check::store_experts(&config, experts.index(), backbone.config_path())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}
