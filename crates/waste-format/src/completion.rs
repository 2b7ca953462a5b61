//! Completion markers and the checks the daemons run before opening a
//! folder. `waste convert` writes `waste-complete.json` last in each of
//! `backbone/` and `experts/` (each folder may be copied to its own machine
//! without the root manifest), so a folder without one is an unfinished
//! conversion. Folders written before the markers existed (store format
//! 1.0) have none: they are accepted when their index is complete, and the
//! caller warns. This module does not check the folder's contents beyond
//! that: `ExpertsDir::open` and the backbone readers do.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::backbone::{BACKBONE_INDEX, BACKBONE_META};
use crate::error::{Error, Result, io};
use crate::experts::{ExpertsIndex, INDEX};
use crate::manifest::write_atomic;
use crate::{FORMAT_VERSION, Version};

/// The marker's file name, the same in `backbone/` and `experts/`.
pub const COMPLETE: &str = "waste-complete.json";
/// The converter's journal in the store root while a conversion runs.
pub const JOURNAL: &str = "convert-journal.json";

/// The contents of a completion marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    pub format_version: Version,
    /// The program that finished the folder (`waste 0.1.0`).
    pub created_by: String,
}

/// How a folder was found complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completeness {
    /// It has its marker.
    Marked,
    /// Written before markers existed (or by a tool that writes none), with
    /// a complete index: accepted, with a warning from the caller.
    Unmarked,
}

/// Writes `dir/waste-complete.json` atomically: call it after everything
/// else in `dir` is in place under its final name.
pub fn mark_complete(dir: &Path, created_by: &str) -> Result<()> {
    let marker = Marker {
        format_version: FORMAT_VERSION,
        created_by: created_by.to_string(),
    };
    let path = dir.join(COMPLETE);
    let json = serde_json::to_vec_pretty(&marker).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    write_atomic(&path, &json)
}

/// Removes `dir`'s marker if it has one (a conversion that resumes into
/// `dir` unmarks it until it has finished again).
pub fn unmark(dir: &Path) -> Result<()> {
    let path = dir.join(COMPLETE);
    match fs_err::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&path)(e)),
    }
}

fn read_marker(dir: &Path) -> Result<Option<Marker>> {
    let path = dir.join(COMPLETE);
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = fs_err::read(&path).map_err(io(&path))?;
    let m: Marker = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    m.format_version.check_readable(&path)?;
    Ok(Some(m))
}

fn unfinished(dir: &Path, reason: impl Into<String>) -> Error {
    let root = dir.parent().unwrap_or(dir).to_path_buf();
    Error::Unfinished {
        root,
        reason: reason.into(),
    }
}

/// A conversion journal beside the folder: the conversion is still running
/// or was killed.
fn journal_beside(dir: &Path) -> bool {
    dir.parent().is_some_and(|p| p.join(JOURNAL).is_file())
}

/// Refuses an `experts/` folder whose conversion did not finish.
pub fn check_experts(dir: &Path) -> Result<Completeness> {
    if read_marker(dir)?.is_some() {
        return Ok(Completeness::Marked);
    }
    if journal_beside(dir) {
        return Err(unfinished(
            dir,
            format!("{JOURNAL} is still there and experts/ has no {COMPLETE}"),
        ));
    }
    if !dir.join(INDEX).is_file() {
        return Err(unfinished(dir, format!("experts/ has no {INDEX}")));
    }
    let index = ExpertsIndex::load(dir)?;
    // Writers of 1.1 and later mark the folder after its index.
    if index.format_version.minor >= 1 {
        return Err(unfinished(
            dir,
            format!(
                "experts/ has its {INDEX} (store format {}) but no {COMPLETE}",
                index.format_version
            ),
        ));
    }
    Ok(Completeness::Unmarked)
}

/// Refuses a `backbone/` folder whose conversion did not finish.
pub fn check_backbone(dir: &Path) -> Result<Completeness> {
    if read_marker(dir)?.is_some() {
        return Ok(Completeness::Marked);
    }
    if journal_beside(dir) {
        return Err(unfinished(
            dir,
            format!("{JOURNAL} is still there and backbone/ has no {COMPLETE}"),
        ));
    }
    if !dir.join(BACKBONE_INDEX).is_file() && !dir.join("model.safetensors").is_file() {
        return Err(unfinished(
            dir,
            format!("backbone/ has no {BACKBONE_INDEX}"),
        ));
    }
    // Writers of 1.1 and later write the metadata just before the marker.
    if dir.join(BACKBONE_META).is_file() {
        return Err(unfinished(
            dir,
            format!("backbone/ has its {BACKBONE_META} but no {COMPLETE}"),
        ));
    }
    Ok(Completeness::Unmarked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experts_dir(version: Version) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("experts");
        fs_err::create_dir_all(&dir).unwrap();
        let mut index = ExpertsIndex::new("t", "q3", 1, 2);
        index.format_version = version;
        index.save(&dir).unwrap();
        tmp
    }

    #[test]
    fn an_experts_folder_is_complete_only_with_its_marker_or_an_old_index() {
        let tmp = experts_dir(FORMAT_VERSION);
        let dir = tmp.path().join("experts");
        let e = check_experts(&dir).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Unfinished { .. }), "{e}");
        assert!(msg.contains("did not finish"), "{msg}");
        assert!(
            msg.contains("rerun waste convert with the same arguments"),
            "{msg}"
        );
        mark_complete(&dir, "test").unwrap();
        assert_eq!(check_experts(&dir).unwrap(), Completeness::Marked);
        // A journal beside a marked folder does not matter; beside an unmarked one it does.
        fs_err::write(tmp.path().join(JOURNAL), "{}").unwrap();
        assert_eq!(check_experts(&dir).unwrap(), Completeness::Marked);
        unmark(&dir).unwrap();
        unmark(&dir).unwrap();
        assert!(check_experts(&dir).is_err());

        let old = experts_dir(Version { major: 1, minor: 0 });
        let dir = old.path().join("experts");
        assert_eq!(check_experts(&dir).unwrap(), Completeness::Unmarked);
        fs_err::remove_file(dir.join(INDEX)).unwrap();
        assert!(
            check_experts(&dir)
                .unwrap_err()
                .to_string()
                .contains("no index.json")
        );
    }

    #[test]
    fn a_backbone_folder_without_marker_is_accepted_only_when_old_and_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("backbone");
        fs_err::create_dir_all(&dir).unwrap();
        assert!(check_backbone(&dir).is_err(), "no index");
        crate::backbone::write_index(&dir, &Default::default(), 0).unwrap();
        assert_eq!(check_backbone(&dir).unwrap(), Completeness::Unmarked);
        fs_err::write(tmp.path().join(JOURNAL), "{}").unwrap();
        assert!(check_backbone(&dir).is_err(), "a conversion is running");
        mark_complete(&dir, "test").unwrap();
        assert_eq!(check_backbone(&dir).unwrap(), Completeness::Marked);
    }
}
