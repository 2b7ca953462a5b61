//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) and every crash file found
//! and fixed (`fuzz/artifacts/<target>/`) through the same entry functions the libFuzzer
//! targets call, on the stable toolchain: no input may panic. One test per target.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use waste_e2e::fuzz;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out: Vec<PathBuf> = fs_err::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    out.sort();
    Ok(out)
}

fn replay(target: &str) -> Result<()> {
    let (_, entry) = fuzz::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .with_context(|| format!("no entry function for {target}"))?;
    let seeds = files(&fuzz_dir().join("corpus").join(target))?;
    ensure!(!seeds.is_empty(), "fuzz/corpus/{target} has no seeds");
    let crashes = files(&fuzz_dir().join("artifacts").join(target))?;
    for path in seeds.iter().chain(&crashes) {
        let bytes = fs_err::read(path)?;
        let run = std::panic::catch_unwind(|| entry(&bytes));
        ensure!(run.is_ok(), "{} panicked", path.display());
    }
    Ok(())
}

#[test]
fn every_fuzz_target_has_an_entry_function() -> Result<()> {
    let mut targets: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))?
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .collect();
    targets.sort();
    let mut entries: Vec<String> = fuzz::TARGETS.iter().map(|(n, _)| (*n).to_owned()).collect();
    entries.sort();
    ensure!(
        targets == entries,
        "fuzz_targets/ {targets:?} vs entries {entries:?}"
    );
    Ok(())
}

#[test]
fn safetensors() -> Result<()> {
    replay("safetensors")
}

#[test]
fn gguf() -> Result<()> {
    replay("gguf")
}

#[test]
fn store_index() -> Result<()> {
    replay("store_index")
}

#[test]
fn expert_record() -> Result<()> {
    replay("expert_record")
}

#[test]
fn store_request() -> Result<()> {
    replay("store_request")
}

#[test]
fn node_request() -> Result<()> {
    replay("node_request")
}

#[test]
fn http_request() -> Result<()> {
    replay("http_request")
}

#[test]
fn fetch_chunks() -> Result<()> {
    replay("fetch_chunks")
}
