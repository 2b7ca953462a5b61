//! A released Hugging Face checkpoint opened for reading: `config.json` plus
//! safetensors shards, memory-mapped, with quantized weights presented under
//! their logical names and decoded exactly on [`Checkpoint::load`].
//! Owns the tensor catalogue (which shard holds what, which stored tensors
//! make up one logical tensor). Path resolution is in `locate`, the mapped
//! files in `shards`, the naming rules in `layout`, per-tensor validation and
//! decoding in `plan`, and the bit layouts in `crate::decode`. The
//! `backbone/` folder of a store is such a folder, so the node loads it here.

pub mod error;
mod layout;
mod locate;
mod plan;
mod quant;
pub mod rows;
mod shards;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use waste_kernels::{Tensor, TensorSource, TensorSourceError};

use layout::{Layout, Stored};
use locate::{Files, locate};
use quant::QuantConfig;
use shards::Shard;

pub use error::{Error, Result};
pub use rows::{EMBEDDING_CACHE_ROWS, RowEncoding, RowsOnDemand, StoredRows};
pub use shards::{RawTensor, map_release};

/// How a logical tensor is stored on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    F32,
    Bf16,
    /// Loaded widened to f32 (exact).
    F16,
    /// FP8 E4M3FN with one f32 `weight_scale_inv` per `block` (rows, cols).
    Fp8Block {
        block: [usize; 2],
    },
    /// compressed-tensors `pack-quantized` symmetric int4, one scale per
    /// `group_size` inputs.
    Int4PackQuantized {
        group_size: usize,
    },
    /// compressed-tensors `mxfp4-pack-quantized` (Kimi K3 experts): e2m1
    /// codes with one E8M0 scale per `group_size` inputs.
    Mxfp4PackQuantized {
        group_size: usize,
    },
    /// waste's 8-bit backbone format: `q8` blocks (int8, f16 scale per 32
    /// inputs), loaded as they are ([`waste_kernels::TensorData::Q8`]).
    Q8,
    /// A GGUF's ggml blocks (`--backbone native` on a GGUF), loaded as they
    /// are ([`waste_kernels::TensorData::Ggml`]).
    Ggml {
        ggml_type: waste_kernels::ggml::GgmlType,
    },
    /// waste's 4- and 3-bit blocks (`q4`, `q3`, `q3-rtn`), loaded as they
    /// are ([`waste_kernels::TensorData::Packed`]). Block weights of `q8`
    /// and ggml types report [`Storage::Q8`] and [`Storage::Ggml`].
    Blocks {
        format: waste_kernels::Format,
    },
    /// A stored dtype this reader does not decode (I64, F64, U8, ...);
    /// [`Checkpoint::load`] fails on it.
    Unsupported {
        dtype: String,
    },
}

/// What [`Checkpoint::info`] tells about a logical tensor without decoding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The logical shape (`weight_shape` for packed int4), row-major.
    pub shape: Vec<usize>,
    pub storage: Storage,
    /// The shard holding the (main part of the) tensor.
    pub shard: PathBuf,
}

/// An open checkpoint. Cheap to open (headers only); `load` reads and
/// decodes one tensor. `Sync`: tensors may be loaded from many threads.
pub struct Checkpoint {
    dir: PathBuf,
    config_path: PathBuf,
    config: Value,
    quant: QuantConfig,
    shards: Vec<Shard>,
    /// Stored tensor name -> index into `shards`.
    stored: HashMap<String, usize>,
    /// Logical tensor name -> how it is stored.
    logical: BTreeMap<String, Layout>,
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("shards", &self.shards.len())
            .field("tensors", &self.logical.len())
            .field("quant", &self.quant)
            .finish_non_exhaustive()
    }
}

impl Checkpoint {
    /// Opens a checkpoint: a Hugging Face folder (`model.safetensors`, shards
    /// listed by `model.safetensors.index.json`, or any `*.safetensors`), a
    /// single `.safetensors` file, a cache snapshot folder, or a cache entry
    /// `models--org--name` (resolved through `refs/main`). `config.json` is
    /// optional ([`Self::config_json`] is then `Null`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let located = locate(path.as_ref())?;
        let config_path = located.dir.join("config.json");
        let config = read_config(&config_path)?;
        let quant = QuantConfig::from_config(&config, &config_path)?;
        let (shards, stored) = match located.files {
            Files::Listed(paths) => open_listed(&paths)?,
            Files::Index { weight_map, .. } => open_indexed(&weight_map)?,
        };
        let catalogue: BTreeMap<String, Stored<'_>> = stored
            .iter()
            .filter_map(|(name, &i)| {
                let shard = &shards[i];
                let dtype = shard.dtype(name)?;
                Some((
                    name.clone(),
                    Stored {
                        dtype,
                        path: shard.path(),
                    },
                ))
            })
            .collect();
        let logical = layout::classify(&catalogue)?;
        Ok(Self {
            dir: located.dir,
            config_path,
            config,
            quant,
            shards,
            stored,
            logical,
        })
    }

    /// The folder holding `config.json` and the weights (for a cache entry,
    /// the snapshot folder).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed `config.json`, or `Null` if the folder has none.
    pub fn config_json(&self) -> &Value {
        &self.config
    }

    /// Path of `config.json` (which may not exist), for error messages.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Logical tensor names, sorted. Quantization parts (`weight_scale_inv`,
    /// `weight_packed`, ...) are not listed: their weight is.
    pub fn tensor_names(&self) -> Vec<&str> {
        self.logical.keys().map(String::as_str).collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.logical.contains_key(name)
    }

    /// Shape and storage of a logical tensor, with every stored part checked
    /// (shapes, dtypes, companions); reads only `weight_shape` of packed
    /// weights. Errors where [`Self::load`] would, except for a plain tensor
    /// of an unsupported dtype, which reports [`Storage::Unsupported`].
    pub fn info(&self, name: &str) -> Result<TensorInfo> {
        let plan = self.plan(name)?;
        Ok(TensorInfo {
            shape: plan.shape(),
            storage: plan.storage(),
            shard: plan.path().to_path_buf(),
        })
    }

    /// Reads and decodes a logical tensor: bf16 stays bf16, everything else
    /// becomes f32 (exactly: fp8 x scale and int4 x scale are single f32
    /// products).
    /// The mapped pages of the values are released once copied out (see
    /// `Shard::release`), so a backbone loaded from here is resident once.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let plan = self.plan(name)?;
        let values = plan.values();
        let shard = self
            .stored
            .get(values.name)
            .and_then(|&i| self.shards.get(i));
        plan.decode(&|start, len| {
            if let Some(shard) = shard {
                shard.release(&values, start, len);
            }
        })
    }

    /// Drops the page cache of every shard: a loader that has copied what
    /// it holds (and reads the rest by row, [`rows`]) would otherwise leave
    /// a second copy charged to its memory cgroup. Pages a verification
    /// pass or a tensor loaded without release brought in go too.
    pub fn drop_page_cache(&self) {
        for shard in &self.shards {
            shard.drop_cached(0, 0);
        }
    }

    /// The shard files, in the order they were opened.
    pub fn shard_paths(&self) -> Vec<&Path> {
        self.shards.iter().map(Shard::path).collect()
    }

    /// Stored tensor names (quantization parts included), sorted.
    pub fn stored_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.stored.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// A stored tensor's raw bytes as the file holds them (for converters
    /// that keep a released format as is).
    pub fn stored<'a>(&'a self, name: &'a str) -> Result<RawTensor<'a>> {
        self.find_stored(name).unwrap_or_else(|| {
            Err(Error::MissingTensor {
                name: name.to_string(),
            })
        })
    }

    /// [`Self::stored`] for a name the caller computed (`format!`): the
    /// tensor borrows the catalogue's copy of the name.
    pub fn stored_owned(&self, name: &str) -> Result<RawTensor<'_>> {
        match self.stored.get_key_value(name) {
            Some((key, _)) => self.stored(key),
            None => Err(Error::MissingTensor {
                name: name.to_string(),
            }),
        }
    }

    fn find_stored<'a>(&'a self, name: &'a str) -> Option<Result<RawTensor<'a>>> {
        let &shard = self.stored.get(name)?;
        self.shards.get(shard)?.raw(name)
    }
}

impl TensorSource for Checkpoint {
    fn contains(&self, name: &str) -> bool {
        Checkpoint::contains(self, name)
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, TensorSourceError> {
        Ok(Checkpoint::load(self, name)?)
    }
}

/// `config.json` as JSON, `Null` when absent; it must be an object.
fn read_config(path: &Path) -> Result<Value> {
    let text = match fs_err::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Value::Null),
        Err(e) => return Err(Error::io(path, e)),
    };
    let bad = |reason: String| Error::BadConfig {
        path: path.to_path_buf(),
        reason,
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if !value.is_object() {
        return Err(bad("not a JSON object".into()));
    }
    Ok(value)
}

type Catalogue = (Vec<Shard>, HashMap<String, usize>);

/// Every header lists its own tensors; a name in two files is an error.
fn open_listed(paths: &[PathBuf]) -> Result<Catalogue> {
    let mut shards = Vec::with_capacity(paths.len());
    let mut stored: HashMap<String, usize> = HashMap::new();
    for path in paths {
        let shard = Shard::open(path)?;
        for name in shard.names() {
            if let Some(&first) = stored.get(&name) {
                return Err(Error::DuplicateTensor {
                    name,
                    first: paths[first].clone(),
                    second: path.clone(),
                });
            }
            stored.insert(name, shards.len());
        }
        shards.push(shard);
    }
    Ok((shards, stored))
}

/// The index is authoritative: every entry must exist in its shard;
/// tensors a shard holds but the index omits are ignored (as transformers does).
fn open_indexed(weight_map: &BTreeMap<String, PathBuf>) -> Result<Catalogue> {
    let mut shards: Vec<Shard> = Vec::new();
    let mut by_path: HashMap<&Path, usize> = HashMap::new();
    let mut stored = HashMap::with_capacity(weight_map.len());
    for (tensor, path) in weight_map {
        let index = match by_path.get(path.as_path()) {
            Some(&i) => i,
            None => {
                if !path.is_file() {
                    return Err(Error::MissingShard {
                        path: path.clone(),
                        tensor: tensor.clone(),
                    });
                }
                shards.push(Shard::open(path)?);
                by_path.insert(path, shards.len() - 1);
                shards.len() - 1
            }
        };
        if !shards[index].contains(tensor) {
            return Err(Error::IndexMismatch {
                path: path.clone(),
                tensor: tensor.clone(),
            });
        }
        stored.insert(tensor.clone(), index);
    }
    Ok((shards, stored))
}
