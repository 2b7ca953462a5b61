//! GGUF files written by gguf-py, llama.cpp's own Python writer, for the
//! tests that check waste's reader against the reference layout: a split
//! (`scripts/split-gguf.py`), DeepSeek-V3 in llama.cpp's `deepseek2`
//! layout (`scripts/make-deepseek2-gguf.py`) and a random `qwen3moe` with
//! experts of any ggml type (`scripts/make-qwen3moe-gguf.py`). They need
//! `python3` with the pinned gguf-py and numpy (`scripts/test-env.sh`
//! installs them into `target/pyenv`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const PIP: &str =
    "python3 -m pip install gguf==0.17.1 numpy==2.4.6 (or source scripts/test-env.sh)";

fn script(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts")).join(name)
}

fn python(script_name: &str, args: &[&Path], extra: &[&str]) -> Result<()> {
    let out = Command::new("python3")
        .arg(script(script_name))
        .args(args)
        .args(extra)
        .output()
        .with_context(|| {
            format!("run python3 {script_name}; the test needs Python 3 and `{PIP}`")
        })?;
    if !out.status.success() {
        bail!(
            "{script_name} failed ({}); it needs `{PIP}`:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Splits `src` into `dir/{prefix}-0000i-of-0000n.gguf` with at most
/// `per_part` tensors a part; returns the parts in order.
pub fn split_gguf(src: &Path, dir: &Path, prefix: &str, per_part: usize) -> Result<Vec<PathBuf>> {
    let out = dir.join(format!("{prefix}.gguf"));
    python("split-gguf.py", &[src, &out], &[&per_part.to_string()])?;
    let mut parts: Vec<PathBuf> = fs_err::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{prefix}-")))
        })
        .collect();
    parts.sort();
    Ok(parts)
}

/// The HF folder `hf` written as an f32 `deepseek2` GGUF at `out`, MLA's
/// `kv_b_proj` as one `attn_kv_b` (`split_kv_b` false, older converters) or
/// as `attn_k_b` + `attn_v_b` (newer ones).
pub fn deepseek2_gguf(hf: &Path, out: &Path, split_kv_b: bool) -> Result<()> {
    let form = if split_kv_b { "--split-kv-b" } else { "--kv-b" };
    python("make-deepseek2-gguf.py", &[hf, out], &[form])
}

/// A random `qwen3moe` GGUF at `out` (scripts/make-qwen3moe-gguf.py) whose
/// routed-expert tensors hold `types` (ggml names), three a layer (gate,
/// up, down), with an F32 backbone or every 2-D backbone matrix in
/// `backbone`.
pub fn qwen3moe_gguf(out: &Path, types: &[&str], backbone: Option<&str>) -> Result<()> {
    let types = types.join(",");
    let mut extra = vec![types.as_str()];
    if let Some(b) = backbone {
        extra.extend(["--backbone", b]);
    }
    python("make-qwen3moe-gguf.py", &[out], &extra)
}
