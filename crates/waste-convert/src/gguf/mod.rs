//! GGUF input: our own parser of the container ([`GgufFile`], v2/v3, every
//! metadata type, bounds-checked, unknown ggml type ids tolerated), exact
//! dequantization of every type llama.cpp's quantizer writes (through
//! [`waste_kernels::ggml`]), and [`GgufCheckpoint`]: a GGUF model presented as a
//! Hugging Face checkpoint — tensors under HF state-dict names (experts split
//! out of the 3-D `ffn_*_exps` tensors, llama's q/k rotary permutation
//! undone), a synthesised `config.json` and a rebuilt tokenizer. Tensors are
//! decoded lazily, one HF tensor (one expert) per [`GgufCheckpoint::load`].
//!
//! Architectures: `llama` (dense, or Mixtral when it has experts),
//! `qwen3moe` and `deepseek2` (DeepSeek-V3/R1, Kimi K2: MLA's `kv_b_proj`
//! re-assembled from `attn_k_b` + `attn_v_b` when a file splits it); others
//! are refused by name (see [`config::SUPPORTED`]). A model split by
//! llama.cpp's `gguf-split` is read from all its parts.

pub mod config;
mod deepseek2;
mod file;
mod meta;
pub mod names;
mod reader;
mod split;
pub mod tokenizer;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;
use waste_kernels::{Tensor, TensorData, TensorSource, TensorSourceError};

use crate::error::{Error, Result};
pub use file::{GgufFile, GgufHeader, GgufTensorInfo};
pub use meta::MetaValue;
use names::{Heads, Mapped};
use waste_family::{Family, GgufConfig};
pub use waste_kernels::ggml::GgmlType;

/// A GGUF model read as a Hugging Face checkpoint. Opening parses the
/// header and metadata only; tensor data stays in the memory map until a
/// tensor is loaded.
pub struct GgufCheckpoint {
    file: GgufFile,
    family: &'static Family,
    config: Value,
    /// HF name -> where its values come from.
    tensors: BTreeMap<String, Entry>,
}

/// The GGUF source of one HF tensor.
#[derive(Debug, Clone)]
enum Entry {
    /// Rows of one GGUF tensor (by index in the file's table).
    Rows(usize, Mapped),
    /// MLA's `kv_b_proj`, from a layer's `attn_k_b` and `attn_v_b`.
    KvB(deepseek2::SplitKvB),
}

impl fmt::Debug for GgufCheckpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufCheckpoint")
            .field("path", &self.file.path())
            .field("family", &self.family.name)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl GgufCheckpoint {
    /// Opens a GGUF file of a supported architecture.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let (family, gguf) = config::family(&file)?;
        let config = config::config_json(&file, family, gguf)?;
        let count = |key: &str| config[key].as_u64().unwrap_or(0) as usize;
        let heads = Heads {
            q: count("num_attention_heads"),
            kv: count("num_key_value_heads"),
        };
        let mut tensors = BTreeMap::new();
        let mut provide = |name: String, from: &str, entry: Entry| {
            if tensors.insert(name.clone(), entry).is_some() {
                return Err(Error::BadTensor {
                    path: file.tensor_path(from).unwrap_or(file.path()).to_path_buf(),
                    tensor: from.to_string(),
                    reason: format!(
                        "provides HF tensor `{name}`, which another tensor already provides"
                    ),
                });
            }
            Ok(())
        };
        for (index, info) in file.tensors().iter().enumerate() {
            for mapped in names::map_tensor(family, gguf, heads, info) {
                provide(
                    mapped.hf_name.clone(),
                    &info.name,
                    Entry::Rows(index, mapped),
                )?;
            }
        }
        if gguf.config == GgufConfig::Deepseek2 {
            for (name, pair) in deepseek2::split_kv_b(&file, &config)? {
                let from = file.tensors()[pair.k].name.clone();
                provide(name, &from, Entry::KvB(pair))?;
            }
        }
        Ok(Self {
            file,
            family,
            config,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The underlying file (raw tensors by GGUF name, metadata).
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    pub fn family(&self) -> &'static Family {
        self.family
    }

    /// The synthesised Hugging Face config.json.
    pub fn config_json(&self) -> &Value {
        &self.config
    }

    /// HF tensor names, sorted.
    pub fn tensor_names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The HF shape, the GGUF tensor and its storage type of an HF tensor.
    /// For a `kv_b_proj` assembled from `attn_k_b` + `attn_v_b`, a made-up
    /// info naming both, of their common type (F32 when they differ).
    pub fn info(&self, name: &str) -> Option<(Vec<usize>, &GgufTensorInfo)> {
        Some(match self.tensors.get(name)? {
            Entry::Rows(index, mapped) => (mapped.shape.clone(), &self.file.tensors()[*index]),
            Entry::KvB(pair) => (pair.info.shape(), &pair.info),
        })
    }

    /// Decodes one HF tensor: bf16 stays bf16, everything else becomes f32
    /// exactly as ggml dequantizes it.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let entry = self.tensors.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        let (index, m) = match entry {
            Entry::Rows(index, m) => (*index, m),
            Entry::KvB(pair) => return self.load_kv_b(pair),
        };
        let info = &self.file.tensors()[index];
        let bad = |reason: String| Error::BadTensor {
            path: self
                .file
                .tensor_path(&info.name)
                .unwrap_or(self.path())
                .to_path_buf(),
            tensor: info.name.clone(),
            reason,
        };
        let data = if info.ggml_type == GgmlType::BF16 && m.unpermute_heads.is_none() {
            let rows = self.file.rows_bytes(info, m.first_row, m.rows)?;
            TensorData::Bf16(waste_format::decode::bf16_from_le(rows))
        } else {
            let mut values = self.file.dequantize_rows(info, m.first_row, m.rows)?;
            if let Some(heads) = m.unpermute_heads {
                values = names::unpermute_rows(&values, info.dims[0] as usize, heads).ok_or_else(
                    || {
                        bad(format!(
                            "{} rows do not split into {heads} heads of even size",
                            m.rows
                        ))
                    },
                )?;
            }
            TensorData::F32(values)
        };
        Tensor::new(m.shape.clone(), data).map_err(|e| bad(e.to_string()))
    }

    /// Whether an HF tensor is a run of one GGUF tensor's rows (so its
    /// blocks can be kept as stored, [`Self::row_blocks`]) rather than
    /// assembled from several.
    pub fn is_stored_rows(&self, name: &str) -> bool {
        matches!(self.tensors.get(name), Some(Entry::Rows(..)))
    }

    /// The ggml blocks of one HF tensor as the file stores them (rows
    /// un-permuted like [`Self::load`]'s values), with their type; `None`
    /// for a tensor that is assembled rather than a run of stored rows
    /// (MLA's `kv_b_proj` from `attn_k_b` + `attn_v_b`).
    pub fn row_blocks(&self, name: &str) -> Result<Option<(GgmlType, Vec<u8>)>> {
        let entry = self.tensors.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        let Entry::Rows(index, m) = entry else {
            return Ok(None);
        };
        let info = &self.file.tensors()[*index];
        let mut blocks = self.file.rows_bytes(info, m.first_row, m.rows)?.to_vec();
        if let Some(heads) = m.unpermute_heads {
            let row = blocks.len() / m.rows.max(1) as usize;
            blocks = names::unpermute_rows(&blocks, row, heads).ok_or_else(|| {
                self.file.bad_tensor(
                    info,
                    format!(
                        "{} rows do not split into {heads} heads of even size",
                        m.rows
                    ),
                )
            })?;
        }
        Ok(Some((info.ggml_type, blocks)))
    }

    /// MLA's `kv_b_proj` from `attn_k_b` + `attn_v_b`, exact: bf16 when
    /// both are bf16 (as [`Self::info`] says), else f32.
    fn load_kv_b(&self, pair: &deepseek2::SplitKvB) -> Result<Tensor> {
        let tensors = self.file.tensors();
        let (k, v) = (&tensors[pair.k], &tensors[pair.v]);
        let bad = |reason: String| Error::BadTensor {
            path: self
                .file
                .tensor_path(&k.name)
                .unwrap_or(self.path())
                .to_path_buf(),
            tensor: pair.info.name.clone(),
            reason,
        };
        let (k_b, v_b) = (
            self.file.dequantize(&k.name)?,
            self.file.dequantize(&v.name)?,
        );
        let values = deepseek2::assemble_kv_b(pair, &k_b, &v_b)
            .ok_or_else(|| bad("sizes do not match the heads".into()))?;
        let data = if pair.info.ggml_type == GgmlType::BF16 {
            // Exact: every value came from a bf16.
            TensorData::Bf16(values.into_iter().map(half::bf16::from_f32).collect())
        } else {
            TensorData::F32(values)
        };
        Tensor::new(pair.info.shape(), data).map_err(|e| bad(e.to_string()))
    }

    /// The rebuilt `tokenizer.json`.
    pub fn tokenizer_json(&self) -> Result<Value> {
        tokenizer::tokenizer_json(&self.file)
    }

    /// The rebuilt `tokenizer_config.json` (special tokens, `add_bos_token`,
    /// `chat_template`).
    pub fn tokenizer_config(&self) -> Result<Value> {
        tokenizer::tokenizer_config(&self.file)
    }
}

impl TensorSource for GgufCheckpoint {
    fn contains(&self, name: &str) -> bool {
        GgufCheckpoint::contains(self, name)
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, TensorSourceError> {
        Ok(GgufCheckpoint::load(self, name)?)
    }
}
