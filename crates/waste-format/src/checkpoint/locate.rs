//! Finding a checkpoint's files from the path a user gives: a Hugging Face
//! folder (one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`, or any `*.safetensors` without an index), a
//! single `.safetensors` file, or a Hugging Face cache entry
//! (`models--org--name`, resolved through `refs/main`, or one of its
//! `snapshots/<hash>` folders, whose files are symlinks into `blobs/`; the
//! symlinks are simply followed). Owns path resolution and `index.json`
//! parsing; opening the files is `shards`' job.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::checkpoint::error::{Error, Result};

const SINGLE_FILE: &str = "model.safetensors";
const INDEX_FILE: &str = "model.safetensors.index.json";
const INDEX_SUFFIX: &str = ".safetensors.index.json";
const SHARD_SUFFIX: &str = ".safetensors";

/// Where a checkpoint's tensors are.
#[derive(Debug)]
pub(crate) struct Located {
    /// The folder holding `config.json` and the weights (a snapshot folder
    /// for a cache entry; the parent folder for a single file).
    pub dir: PathBuf,
    pub files: Files,
}

#[derive(Debug)]
pub(crate) enum Files {
    /// An `index.json`: tensor name -> shard path (already joined to `dir`).
    Index {
        weight_map: BTreeMap<String, PathBuf>,
    },
    /// Files whose headers together list the tensors (one file, or every
    /// `*.safetensors` of an index-less folder), sorted by path.
    Listed(Vec<PathBuf>),
}

/// Resolves `path` to a checkpoint folder and its weight files.
pub(crate) fn locate(path: &Path) -> Result<Located> {
    let meta = fs_err::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return locate_file(path);
    }
    let dir = resolve_cache_entry(path)?;
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        return Ok(Located {
            files: read_index(&index, &dir)?,
            dir,
        });
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(Located {
            files: Files::Listed(vec![single]),
            dir,
        });
    }
    let (mut indexes, mut shards) = (Vec::new(), Vec::new());
    for entry in fs_err::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let file = entry.path();
        // is_file follows symlinks (cache snapshots are all symlinks).
        if !file.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(INDEX_SUFFIX) {
            indexes.push(file);
        } else if name.ends_with(SHARD_SUFFIX) {
            shards.push(file);
        }
    }
    match (indexes.len(), shards.is_empty()) {
        (1, _) => Ok(Located {
            files: read_index(&indexes[0], &dir)?,
            dir,
        }),
        (0, false) => {
            shards.sort();
            Ok(Located {
                files: Files::Listed(shards),
                dir,
            })
        }
        (0, true) => Err(Error::NotACheckpoint {
            path: dir,
            reason: "no model.safetensors, *.safetensors.index.json or *.safetensors".into(),
        }),
        (n, _) => Err(Error::NotACheckpoint {
            path: dir,
            reason: format!("{n} *.safetensors.index.json files and no {INDEX_FILE}"),
        }),
    }
}

fn locate_file(path: &Path) -> Result<Located> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if name.ends_with(INDEX_SUFFIX) {
        Ok(Located {
            files: read_index(path, &dir)?,
            dir,
        })
    } else if name.ends_with(SHARD_SUFFIX) {
        Ok(Located {
            files: Files::Listed(vec![path.to_path_buf()]),
            dir,
        })
    } else {
        Err(Error::NotACheckpoint {
            path: path.to_path_buf(),
            reason: "a file that is neither *.safetensors nor *.safetensors.index.json".into(),
        })
    }
}

/// `models--org--name` (a folder with `snapshots/`) -> the snapshot that
/// `refs/main` names, or the only snapshot if there is no `refs/main`.
/// Any other folder is returned unchanged.
fn resolve_cache_entry(dir: &Path) -> Result<PathBuf> {
    let snapshots = dir.join("snapshots");
    if !snapshots.is_dir() {
        return Ok(dir.to_path_buf());
    }
    let refs_main = dir.join("refs").join("main");
    if refs_main.is_file() {
        let hash = fs_err::read_to_string(&refs_main).map_err(|e| Error::io(&refs_main, e))?;
        let hash = hash.trim();
        if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::NotACheckpoint {
                path: refs_main,
                reason: format!("`{hash}` is not a commit hash"),
            });
        }
        let snapshot = snapshots.join(hash);
        if !snapshot.is_dir() {
            return Err(Error::NotACheckpoint {
                path: snapshot,
                reason: "refs/main names a snapshot that is not downloaded".into(),
            });
        }
        return Ok(snapshot);
    }
    let mut found = Vec::new();
    for entry in fs_err::read_dir(&snapshots).map_err(|e| Error::io(&snapshots, e))? {
        let entry = entry.map_err(|e| Error::io(&snapshots, e))?;
        if entry.path().is_dir() {
            found.push(entry.path());
        }
    }
    match <[PathBuf; 1]>::try_from(found) {
        Ok([only]) => Ok(only),
        Err(found) => Err(Error::NotACheckpoint {
            path: dir.to_path_buf(),
            reason: format!(
                "a cache entry without refs/main and {} snapshots; pass the snapshot folder",
                found.len()
            ),
        }),
    }
}

/// Parses `{"weight_map": {tensor: shard file}}` (other keys ignored).
fn read_index(path: &Path, dir: &Path) -> Result<Files> {
    let bad = |reason: String| Error::Index {
        path: path.to_path_buf(),
        reason,
    };
    let text = fs_err::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let mut weight_map = BTreeMap::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("`{tensor}` maps to {file}, not a file name")))?;
        let rel = Path::new(file);
        if file.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad(format!(
                "`{tensor}` maps to `{file}`, not a file inside the folder"
            )));
        }
        weight_map.insert(tensor.clone(), dir.join(rel));
    }
    Ok(Files::Index { weight_map })
}
