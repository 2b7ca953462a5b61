//! Split GGUF models, in llama.cpp's `gguf-split` layout (also what gguf-py's
//! `GGUFWriter(split_max_tensors=…)` and the big Hugging Face uploads use):
//! parts named `{prefix}-{i:05}-of-{n:05}.gguf`, i from 1, side by side; each
//! a complete GGUF container (own header, alignment and data section) whose
//! metadata holds `split.no` (u16, 0-based), `split.count` (u16) and
//! `split.tensors.count` (i32, the total over all parts). The first part
//! carries the model metadata; later parts only the `split.*` keys and their
//! tensors. This module finds and checks the parts; [`super::GgufFile`]
//! merges their tensors. It does not read tensor data.

use std::path::{Path, PathBuf};

use super::file::Part;
use crate::error::{Error, Result};

const NO: &str = "split.no";
const COUNT: &str = "split.count";
const TENSORS: &str = "split.tensors.count";

/// Where one part sits in its split, as its own metadata says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// 0-based.
    no: u64,
    count: u64,
    tensors: u64,
}

fn meta_err(path: &Path, key: &str, reason: impl Into<String>) -> Error {
    Error::GgufMetadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// A non-negative integer key of `part`, `None` when absent.
fn key(part: &Part, key: &str) -> Result<Option<u64>> {
    part.header
        .metadata
        .get(key)
        .map(|v| {
            v.as_u64().ok_or_else(|| {
                meta_err(
                    &part.path,
                    key,
                    format!("{v} is not a non-negative integer"),
                )
            })
        })
        .transpose()
}

/// The split position of `part`, or `None` for a whole model (no
/// `split.count`, or a count of 1).
pub(crate) fn position(part: &Part) -> Result<Option<Position>> {
    let Some(count) = key(part, COUNT)? else {
        return Ok(None);
    };
    // gguf-split stores u16s; a larger count is a damaged header, and
    // capping it bounds how many files are looked for.
    if count == 0 || count > u64::from(u16::MAX) {
        return Err(meta_err(
            &part.path,
            COUNT,
            format!("{count} is not 1 to 65535"),
        ));
    }
    let no =
        key(part, NO)?.ok_or_else(|| meta_err(&part.path, NO, "missing (split.count is set)"))?;
    if no >= count {
        return Err(meta_err(
            &part.path,
            NO,
            format!("part {no} (0-based) of a split into {count}"),
        ));
    }
    if count == 1 {
        return Ok(None);
    }
    let tensors = key(part, TENSORS)?
        .ok_or_else(|| meta_err(&part.path, TENSORS, "missing (split.count is set)"))?;
    Ok(Some(Position { no, count, tensors }))
}

/// The file name of part `no` (0-based) of `count` with this prefix.
fn part_name(prefix: &str, no: u64, count: u64) -> String {
    format!("{prefix}-{:05}-of-{:05}.gguf", no + 1, count)
}

/// Every part of the split `given` belongs to, in order, each checked
/// against `given`'s position: same count and total, its own number.
pub(crate) fn open_parts(given: Part, pos: Position) -> Result<Vec<Part>> {
    let name = given
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let suffix = &part_name("", pos.no, pos.count)[..];
    let prefix = name.strip_suffix(suffix).ok_or_else(|| {
        meta_err(
            &given.path,
            NO,
            format!(
                "part {} of {}, but the file is not named `PREFIX{suffix}` (llama.cpp's split naming), so the other parts cannot be found",
                pos.no + 1,
                pos.count
            ),
        )
    })?;
    let dir = given
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let prefix = prefix.to_string();
    let mut given = Some(given);
    let mut parts = Vec::with_capacity(pos.count as usize);
    for no in 0..pos.count {
        if no == pos.no {
            parts.push(given.take().expect("the given part is used once"));
            continue;
        }
        let path = dir.join(part_name(&prefix, no, pos.count));
        if !path.is_file() {
            return Err(Error::MissingGgufPart {
                path,
                part: no + 1,
                count: pos.count,
            });
        }
        let part = Part::open(&path)?;
        let got = position(&part)?;
        let want = Position { no, ..pos };
        if got != Some(want) {
            let got = got.map_or("no split keys".to_string(), |g| {
                format!(
                    "split.no {}, split.count {}, split.tensors.count {}",
                    g.no, g.count, g.tensors
                )
            });
            return Err(meta_err(
                &path,
                COUNT,
                format!(
                    "{got}; the set needs split.no {no}, split.count {}, split.tensors.count {}",
                    pos.count, pos.tensors
                ),
            ));
        }
        parts.push(part);
    }
    Ok(parts)
}

/// The tensors found in all parts must be the `split.tensors.count` the
/// parts announce (a part replaced by one of another upload shows here).
pub(crate) fn check_total(parts: &[Part], found: usize) -> Result<()> {
    let Some(pos) = position(&parts[0])? else {
        return Ok(());
    };
    if pos.tensors != found as u64 {
        let first: PathBuf = parts[0].path.clone();
        return Err(meta_err(
            &first,
            TENSORS,
            format!(
                "{} tensors announced, {found} found in the {} parts",
                pos.tensors, pos.count
            ),
        ));
    }
    Ok(())
}
