//! The store's `backbone/` folder: a Hugging Face folder without the routed
//! experts. Each planned shard is streamed one tensor at a time (the
//! header first, from the plan), then `model.safetensors.index.json`;
//! config.json and the tokenizer files are copied (for a GGUF, the config
//! is the synthesised one and the tokenizer is rebuilt from its metadata).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use waste_format::backbone::{
    SafetensorsWriter, TensorSpec, format_id_bytes, shape_bytes, write_index,
};
use waste_format::manifest::write_atomic;
use waste_kernels::{Format, TensorData, quantize};

use super::plan::{OutTensor, Produce, ShardPlan};
use super::source::{Origin, Source};
use crate::error::{Error, Result};

/// Writes one shard; `done(bytes)` after each tensor.
pub fn write_shard(
    source: &Source,
    shard: &ShardPlan,
    dir: &Path,
    done: &dyn Fn(u64),
) -> Result<()> {
    let specs = shard
        .tensors
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
            bytes: t.bytes as usize,
        })
        .collect();
    let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    let mut w = SafetensorsWriter::create(&dir.join(&shard.file), specs, &metadata)?;
    for t in &shard.tensors {
        // Raw tensors are written straight from the source's memory map:
        // file-backed pages, not anonymous memory.
        let bytes = produce(source, t)?;
        w.write(&t.name, &bytes)?;
        drop(bytes);
        done(t.bytes);
    }
    Ok(w.finish()?)
}

/// The bytes of one output tensor.
fn produce<'a>(source: &'a Source, t: &OutTensor) -> Result<Cow<'a, [u8]>> {
    let bad = |reason: String| Error::BadTensor {
        path: source.path().to_path_buf(),
        tensor: t.name.clone(),
        reason,
    };
    match &t.produce {
        Produce::Raw { stored } => match source.origin() {
            Origin::Hf(c) => Ok(Cow::Borrowed(c.stored_owned(stored)?.data)),
            Origin::Gguf(_) => Err(bad("a GGUF has no raw safetensors tensors".into())),
        },
        Produce::Values { logical, dtype } => {
            let tensor = source.load(logical)?;
            Ok(Cow::Owned(match (&tensor.data, dtype) {
                (TensorData::Bf16(v), Format::Bf16) => {
                    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
                }
                (_, Format::Bf16) => tensor
                    .into_f32()
                    .iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
                    .collect(),
                _ => tensor
                    .into_f32()
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect(),
            }))
        }
        Produce::Quantize { logical, format } => {
            let tensor = source.load(logical)?;
            let [rows, cols] = tensor.shape[..] else {
                return Err(bad(format!(
                    "{format} needs a matrix, got {:?}",
                    tensor.shape
                )));
            };
            let values = tensor.into_f32();
            Ok(Cow::Owned(
                quantize(*format, rows, cols, &values)
                    .map_err(|e| bad(e.to_string()))?
                    .bytes,
            ))
        }
        Produce::Shape { rows, cols } => Ok(Cow::Owned(shape_bytes(*rows, *cols))),
        Produce::Blocks { logical, format } => {
            Ok(Cow::Owned(source.native_matrix(logical, *format)?))
        }
        Produce::FormatId { format } => Ok(Cow::Owned(format_id_bytes(*format))),
    }
}

/// `model.safetensors.index.json` of the planned shards.
pub fn write_backbone_index(shards: &[ShardPlan], dir: &Path) -> Result<()> {
    let mut map = BTreeMap::new();
    let mut total = 0;
    for s in shards {
        for t in &s.tensors {
            map.insert(t.name.clone(), s.file.clone());
            total += t.bytes;
        }
    }
    Ok(write_index(dir, &map, total)?)
}

/// Small files of a Hugging Face folder that belong with the weights:
/// tokenizer, chat template, generation defaults, remote code.
fn is_aux_file(name: &str) -> bool {
    matches!(
        name,
        "generation_config.json" | "special_tokens_map.json" | "added_tokens.json" | "merges.txt"
    ) || [
        "tokenizer",
        "tokenization_",
        "chat_template",
        "vocab",
        "configuration_",
        "modeling_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || name.ends_with(".tiktoken")
        || name.ends_with(".jinja")
}

/// config.json and the tokenizer files into `dir`.
pub fn write_aux_files(source: &Source, upcycled: bool, dir: &Path) -> Result<()> {
    let json = |v: &serde_json::Value, name: &str| -> Result<()> {
        let path = dir.join(name);
        let mut bytes = serde_json::to_vec_pretty(v).map_err(|e| Error::Config {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        Ok(write_atomic(&path, &bytes)?)
    };
    match source.origin() {
        Origin::Hf(c) => {
            if upcycled || !c.config_path().is_file() {
                json(source.config(), "config.json")?;
            } else {
                let bytes =
                    fs_err::read(c.config_path()).map_err(|e| Error::io(c.config_path(), e))?;
                write_atomic(&dir.join("config.json"), &bytes)?;
            }
            let mut names: Vec<_> = fs_err::read_dir(c.dir())
                .map_err(|e| Error::io(c.dir(), e))?
                .filter_map(std::result::Result::ok)
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_aux_file(n))
                .collect();
            names.sort();
            for name in names {
                let from = c.dir().join(&name);
                let bytes = fs_err::read(&from).map_err(|e| Error::io(&from, e))?;
                write_atomic(&dir.join(&name), &bytes)?;
            }
        }
        Origin::Gguf(g) => {
            json(source.config(), "config.json")?;
            // A GGUF without a rebuildable tokenizer still converts; `waste
            // run --prompt` then asks for one.
            if let (Ok(tok), Ok(cfg)) = (g.tokenizer_json(), g.tokenizer_config()) {
                json(&tok, "tokenizer.json")?;
                json(&cfg, "tokenizer_config.json")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_aux_file;

    #[test]
    fn tokenizer_and_templates_are_copied_weights_are_not() {
        for yes in [
            "tokenizer.json",
            "tokenizer_config.json",
            "tokenizer.model",
            "chat_template.jinja",
            "generation_config.json",
            "tiktoken.model.tiktoken",
            "modeling_kimi_k3.py",
        ] {
            assert!(is_aux_file(yes), "{yes}");
        }
        for no in [
            "model.safetensors",
            "goldens.json",
            "config.json",
            "README.md",
        ] {
            assert!(!is_aux_file(no), "{no}");
        }
    }
}
