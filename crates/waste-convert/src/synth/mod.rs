//! `waste synth`: a Hugging Face checkpoint folder shaped like a real
//! release (DeepSeek-V3, Kimi K2, Kimi-K2-Thinking, Qwen3-30B-A3B, Kimi K3)
//! with seeded random weights: real tensor names, dtypes and per-expert
//! shapes (experts in the release's dtype: fp8 blocks, int4 packs, MXFP4, or
//! bf16 with `--dtype bf16`), fewer layers and experts on request, shards of
//! at most 1 GB and `model.safetensors.index.json`. For tests and converter
//! benchmarks at real expert sizes without downloading a model.
//!
//! Owns the generator; the releases' configs and tensor lists are their
//! families' (`waste-family`, [`waste_family::release`]). Weights are uniform with the std the family's init uses,
//! in pieces generated in parallel from per-piece seeds, so the files are
//! the same whatever the thread count.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use rayon::prelude::*;
use serde_json::Value;
use waste_format::backbone::{SafetensorsWriter, TensorSpec, write_index};
use waste_format::manifest::write_atomic;

use crate::error::{Error, Result};
pub use waste_family::release::{Fill, Like, Options, Tensor, build};

/// Largest shard (bytes); a bigger tensor gets a shard of its own.
pub const SHARD_BYTES: u64 = 1_000_000_000;
/// Bytes generated per piece (one rayon task).
const PIECE_BYTES: usize = 8 << 20;

/// What was written.
#[derive(Debug, Clone)]
pub struct Summary {
    pub shards: usize,
    pub tensors: usize,
    pub bytes: u64,
    /// Bytes of routed-expert tensors (their quantization parts included).
    pub expert_bytes: u64,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn signed(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// FNV-1a of a name, to seed each tensor on its own.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Piece `index` (of `len` bytes) of a tensor's bytes.
fn piece(fill: Fill, seed: u64, index: usize, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut out = Vec::with_capacity(len);
    // std of U(-1, 1) is 1/sqrt(3).
    let uniform = |rng: &mut Rng, std: f32| rng.signed() * std * 3f32.sqrt();
    while out.len() < len {
        match fill {
            Fill::Bf16(std) => out.extend_from_slice(
                &half::bf16::from_f32(uniform(&mut rng, std))
                    .to_bits()
                    .to_le_bytes(),
            ),
            Fill::Bf16Norm => out.extend_from_slice(
                &half::bf16::from_f32(1.0 + uniform(&mut rng, 0.1))
                    .to_bits()
                    .to_le_bytes(),
            ),
            Fill::F32(std) => out.extend_from_slice(&uniform(&mut rng, std).to_le_bytes()),
            Fill::Fp8 => {
                let r = rng.next();
                // exponent field 3..=10 (2^-4 .. 2^3), any mantissa, any sign.
                out.push(
                    (((r & 7) as u8 + 3) << 3) | ((r >> 3) & 7) as u8 | ((r >> 6) & 0x80) as u8,
                );
            }
            Fill::Fp8Scale => {
                out.extend_from_slice(&(1e-3 * (1.0 + 0.5 * rng.signed())).to_le_bytes());
            }
            Fill::Int4Words => out.extend_from_slice(&(rng.next() as u32).to_le_bytes()),
            Fill::Int4Scale => out.extend_from_slice(
                &half::bf16::from_f32(3e-3 * (1.0 + 0.5 * rng.signed()))
                    .to_bits()
                    .to_le_bytes(),
            ),
            Fill::Shape(r, c) => {
                out.extend_from_slice(&(r as i64).to_le_bytes());
                out.extend_from_slice(&(c as i64).to_le_bytes());
            }
            Fill::Mxfp4 => out.extend_from_slice(&rng.next().to_le_bytes()),
            Fill::E8m0 => out.push(118 + (rng.next() % 4) as u8),
        }
    }
    out.truncate(len);
    out
}

/// Bytes the checkpoint will take (all of them, and the routed experts'),
/// before anything is written: what a caller checks free space against.
pub fn sizes(options: &Options) -> (u64, u64) {
    let (_, tensors) = build(options);
    let total = tensors.iter().map(Tensor::bytes).sum();
    let experts = tensors
        .iter()
        .filter(|t| crate::convert::names::parse_expert(&t.name).is_some())
        .map(Tensor::bytes)
        .sum();
    (total, experts)
}

/// Writes the synthetic checkpoint into `out` (created; must not hold a
/// checkpoint already).
pub fn synth(options: &Options, out: &Path) -> Result<Summary> {
    let (config, tensors) = build(options);
    if out.join("config.json").exists() {
        return Err(Error::Output {
            path: out.to_path_buf(),
            reason: "already holds a checkpoint (config.json)".into(),
        });
    }
    fs_err::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let mut groups: Vec<Vec<&Tensor>> = Vec::new();
    let mut size = 0u64;
    for t in &tensors {
        match groups.last_mut() {
            Some(g) if size + t.bytes() <= SHARD_BYTES => {
                size += t.bytes();
                g.push(t);
            }
            _ => {
                size = t.bytes();
                groups.push(vec![t]);
            }
        }
    }
    let n = groups.len();
    let mut weight_map = BTreeMap::new();
    let mut summary = Summary {
        shards: n,
        tensors: tensors.len(),
        bytes: 0,
        expert_bytes: 0,
    };
    for (i, group) in groups.iter().enumerate() {
        let file = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        let specs = group
            .iter()
            .map(|t| TensorSpec {
                name: t.name.clone(),
                dtype: t.fill.dtype().into(),
                shape: t.shape.clone(),
                bytes: t.bytes() as usize,
            })
            .collect();
        let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
        let mut w = SafetensorsWriter::create(&out.join(&file), specs, &metadata)?;
        for t in group {
            write_tensor(&mut w, t, options.seed)?;
            weight_map.insert(t.name.clone(), file.clone());
            summary.bytes += t.bytes();
            if crate::convert::names::parse_expert(&t.name).is_some() {
                summary.expert_bytes += t.bytes();
            }
        }
        w.finish()?;
    }
    write_index(out, &weight_map, summary.bytes)?;
    let path = out.join("config.json");
    let bytes = serde_json::to_vec_pretty(&config).map_err(|e| Error::Config {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    write_atomic(&path, &bytes)?;
    Ok(summary)
}

/// One tensor, generated in pieces on the rayon pool and written in order.
fn write_tensor(w: &mut SafetensorsWriter, t: &Tensor, seed: u64) -> Result<()> {
    let total = t.bytes() as usize;
    // Whole elements per piece, so no value straddles two pieces.
    let per = PIECE_BYTES - PIECE_BYTES % t.fill.element_bytes().max(1);
    let pieces = Pieces {
        fill: t.fill,
        seed: seed ^ name_hash(&t.name),
        total,
        per,
        next: 0,
        ready: VecDeque::new(),
    };
    Ok(w.write_pieces(&t.name, pieces)?)
}

/// A tensor's bytes, a batch of pieces generated in parallel at a time:
/// memory is a batch, whatever the tensor's size.
struct Pieces {
    fill: Fill,
    seed: u64,
    total: usize,
    per: usize,
    /// Index of the next piece to generate.
    next: usize,
    ready: VecDeque<Vec<u8>>,
}

impl Iterator for Pieces {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let count = self.total.div_ceil(self.per.max(1));
        if self.ready.is_empty() && self.next < count {
            let end = (self.next + 2 * rayon::current_num_threads().max(1)).min(count);
            let (fill, seed, total, per) = (self.fill, self.seed, self.total, self.per);
            self.ready = (self.next..end)
                .into_par_iter()
                .map(|i| piece(fill, seed, i, per.min(total - i * per)))
                .collect::<Vec<_>>()
                .into();
            self.next = end;
        }
        self.ready.pop_front()
    }
}

/// The config.json a synthetic checkpoint carries, for callers that only
/// want the shapes.
pub fn config(options: &Options) -> Value {
    build(options).0
}
