//! Where the test inputs live: `../shared/fixtures` beside the checkout, the
//! `goldens.safetensors` of a fixture (f32 tensors and i64 token ids by
//! name), and the real SmolLM2-135M-Instruct GGUF that
//! `scripts/fetch-smollm2.sh` caches, plus the two measures every golden
//! test takes ([`max_abs_diff`], [`argmax`]). Shared by the golden tests here
//! and the CLI tests of `bin/waste`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use safetensors::{Dtype, SafeTensors};

/// `../shared/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures"
    ))
    .join(name)
}

/// `tests/data/<name>` of this repository: fixtures made here (see its
/// README), beside the shared ones.
pub fn repo_data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data")).join(name)
}

/// The SmolLM2 GGUF: `$WASTE_SMOLLM2_GGUF`, else where
/// `scripts/fetch-smollm2.sh` puts it (`${WASTE_CACHE:-$HOME/.cache/waste}/models`).
/// An error (not a skip) when it is missing, saying how to get it.
pub fn smollm2_gguf() -> Result<PathBuf> {
    let path = match std::env::var_os("WASTE_SMOLLM2_GGUF") {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("WASTE_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/waste")))
            .context("neither WASTE_CACHE nor HOME is set")?
            .join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    ensure!(
        path.is_file(),
        "{} is missing: run scripts/fetch-smollm2.sh (or set WASTE_SMOLLM2_GGUF)",
        path.display()
    );
    Ok(path)
}

/// A fixture's `goldens.safetensors`, read once.
#[derive(Debug)]
pub struct Goldens {
    bytes: Vec<u8>,
}

impl Goldens {
    /// `fixture(dir)/goldens.safetensors`.
    pub fn open(dir: &str) -> Result<Self> {
        Self::open_in(&fixture(dir))
    }

    /// `root/goldens.safetensors`, for a fixture outside `../shared/fixtures`
    /// (`repo_data`).
    pub fn open_in(root: &Path) -> Result<Self> {
        let path = root.join("goldens.safetensors");
        Ok(Self {
            bytes: fs_err::read(&path).with_context(|| format!("read {}", path.display()))?,
        })
    }

    /// Shape and little-endian bytes of a tensor.
    pub fn tensor(&self, name: &str) -> Result<(Vec<usize>, Vec<u8>)> {
        let st = SafeTensors::deserialize(&self.bytes)?;
        let t = st.tensor(name).with_context(|| format!("golden {name}"))?;
        Ok((t.shape().to_vec(), t.data().to_vec()))
    }

    /// An f32 tensor with its shape.
    pub fn f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let (shape, data) = self.tensor(name)?;
        let values = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((shape, values))
    }

    /// Any f32/i32/i64 tensor as f32 values with its shape, or None if absent.
    pub fn values(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let st = SafeTensors::deserialize(&self.bytes)?;
        let Ok(t) = st.tensor(name) else {
            return Ok(None);
        };
        let d = t.data();
        let values = match t.dtype() {
            Dtype::F32 => d
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::I32 => d
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
                .collect(),
            Dtype::I64 => d
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("chunks of 8 bytes")) as f32)
                .collect(),
            other => anyhow::bail!("golden {name}: unexpected dtype {other}"),
        };
        Ok(Some((t.shape().to_vec(), values)))
    }

    /// An i64 tensor of token ids, as u32.
    pub fn ids(&self, name: &str) -> Result<Vec<u32>> {
        let (_, data) = self.tensor(name)?;
        data.chunks_exact(8)
            .map(|b| {
                let id = i64::from_le_bytes(b.try_into().expect("chunks of 8 bytes"));
                u32::try_from(id).with_context(|| format!("golden {name}: id {id}"))
            })
            .collect()
    }
}

/// Largest |a - b| over two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Index of the largest value (the first one on ties), as a token id.
pub fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best }) as u32
}

/// Greedy decoding through `cache` after the prompt `ids`, checked
/// against a golden continuation: the logits of each step (rows of
/// `want_steps`, the prompt's last position first) within `tol`, then the
/// tokens chosen equal to `want_tokens`; `what` names the case in errors.
#[allow(clippy::too_many_arguments)]
pub fn check_greedy(
    model: &waste_model::Model,
    cache: &mut waste_model::KvCache,
    experts: &dyn waste_model::ExpertProvider,
    ids: &[u32],
    want_steps: &[f32],
    want_tokens: &[u32],
    tol: f32,
    what: &str,
) -> Result<()> {
    use waste_model::{LogitsFor, NoTrace};
    let vocab = model.config().vocab_size;
    let mut logits = model.forward(ids, cache, experts, LogitsFor::Last, &mut NoTrace)?;
    let mut tokens = Vec::new();
    for (step, want_row) in want_steps.chunks(vocab).enumerate() {
        let d = max_abs_diff(&logits, want_row);
        ensure!(d <= tol, "{what} decode step {step}: logits differ by {d}");
        let next = argmax(&logits);
        tokens.push(next);
        logits = model.forward(&[next], cache, experts, LogitsFor::Last, &mut NoTrace)?;
    }
    ensure!(
        tokens == want_tokens,
        "{what}: greedy {tokens:?} != {want_tokens:?}"
    );
    Ok(())
}

/// Bytes of a GGUF's tensors that are (`experts`) or are not routed
/// experts, from the extents its header gives.
pub fn gguf_tensor_bytes(gguf: &Path, experts: bool) -> Result<u64> {
    let file = waste_convert::GgufFile::open(gguf)?;
    let mut total = 0;
    for t in file.tensors() {
        if t.name.contains("_exps.") == experts {
            total += t
                .size
                .with_context(|| format!("{}: no extent for {}", gguf.display(), t.name))?;
        }
    }
    Ok(total)
}
