//! `waste inspect STORE [--verify] [--json]`: parameters, bytes and bits per
//! weight of a store by tensor class, expert bytes per token, and with
//! `--verify` every record checked against its checksum.

use std::path::PathBuf;

use anyhow::{Context, Result};
use waste_convert::convert::progress::{Progress, Unit};
use waste_convert::inspect::inspect;

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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}
