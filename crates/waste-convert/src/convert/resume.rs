//! Resuming a killed conversion. Every output file is written under a
//! `.tmp` name and renamed when whole and synced, so a file under its final
//! name is complete. `OUT/convert-journal.json` (written atomically after
//! each finished shard or layer) records the plan's fingerprint and what is
//! done, with each layer's index entry (its record checksums); a rerun with
//! the same source and options keeps those and redoes the rest, and the
//! journal is deleted after the manifest is written, so the finished store
//! is byte-identical to one converted in a single run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use waste_format::LayerEntry;
use waste_format::experts::LayerHeader;
use waste_format::manifest::{MANIFEST, write_atomic};

use crate::error::{Error, Result};

pub const JOURNAL: &str = "convert-journal.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    fingerprint: String,
    /// Backbone shard files written.
    shards: BTreeSet<String>,
    /// Layer files written, with their index entries.
    layers: BTreeMap<u32, LayerEntry>,
}

/// What a conversion into `out` has done so far.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    state: State,
}

impl Journal {
    /// Starts or resumes a conversion into `out` with this plan fingerprint.
    /// Refuses a finished store (it has a manifest), a journal of another
    /// source or options, and a non-empty folder that is not a conversion.
    pub fn open(out: &Path, fingerprint: &str) -> Result<Self> {
        let path = out.join(JOURNAL);
        let refuse = |reason: String| Error::Output {
            path: out.to_path_buf(),
            reason,
        };
        if out.join(MANIFEST).exists() {
            return Err(refuse(
                "already holds a finished store (manifest.json); remove it or pick another folder"
                    .into(),
            ));
        }
        if path.is_file() {
            let bytes = fs_err::read(&path).map_err(|e| Error::io(&path, e))?;
            let state: State = serde_json::from_slice(&bytes).map_err(|e| Error::Config {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            if state.fingerprint != fingerprint {
                return Err(refuse(format!(
                    "holds an unfinished conversion of another source or other options ({JOURNAL}); remove the folder or rerun with the same arguments"
                )));
            }
            return Ok(Self { path, state });
        }
        if out.exists() {
            let mut entries = fs_err::read_dir(out).map_err(|e| Error::io(out, e))?;
            if entries.next().is_some() {
                return Err(refuse(
                    "exists and is not empty (no conversion journal in it)".into(),
                ));
            }
        }
        fs_err::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        let journal = Self {
            path,
            state: State {
                fingerprint: fingerprint.to_string(),
                ..State::default()
            },
        };
        journal.save()?;
        Ok(journal)
    }

    fn save(&self) -> Result<()> {
        let bytes = serde_json::to_vec(&self.state).map_err(|e| Error::Config {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(write_atomic(&self.path, &bytes)?)
    }

    /// Whether shard `file` was finished (and is still there).
    pub fn shard_done(&self, dir: &Path, file: &str) -> bool {
        self.state.shards.contains(file) && dir.join(file).is_file()
    }

    pub fn mark_shard(&mut self, file: &str) -> Result<()> {
        self.state.shards.insert(file.to_string());
        self.save()
    }

    /// The index entry of a finished layer whose file is still whole.
    pub fn layer_done(&self, dir: &Path, layer: u32) -> Option<LayerEntry> {
        let entry = self.state.layers.get(&layer)?;
        let path = dir.join(&entry.file);
        let len = fs_err::metadata(&path).ok()?.len();
        let mut page = vec![0u8; waste_format::experts::HEADER_LEN];
        let file = fs_err::File::open(&path).ok()?;
        std::os::unix::fs::FileExt::read_exact_at(file.file(), &mut page, 0).ok()?;
        let h = LayerHeader::decode(&page, &path).ok()?;
        let whole = h.layer == layer
            && h.n_experts == entry.n_experts
            && h.record_len == entry.record_len
            && len == h.file_len();
        whole.then(|| entry.clone())
    }

    pub fn mark_layer(&mut self, entry: LayerEntry) -> Result<()> {
        self.state.layers.insert(entry.layer, entry);
        self.save()
    }

    /// Deletes the journal (the manifest is written: the store is whole).
    pub fn finish(self) -> Result<()> {
        fs_err::remove_file(&self.path).map_err(|e| Error::io(&self.path, e))
    }
}

/// Removes `.tmp` files a killed run left in `dir` (they are never whole).
pub fn remove_partial_files(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in fs_err::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "tmp") {
            fs_err::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}
