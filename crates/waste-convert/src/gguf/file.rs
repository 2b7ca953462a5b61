//! The GGUF container (v2 and v3, little endian): header, metadata
//! key/values of every value type (arrays included, nested up to a depth
//! cap), tensor infos, `general.alignment` and the data section, parsed from
//! untrusted bytes without panicking. [`GgufFile`] memory-maps a file (or
//! every part of a split model, see `split`) and hands out each tensor's raw
//! bytes or its f32 values by GGUF name.
//! Knows nothing of Hugging Face names or architectures (see `checkpoint`).
//!
//! Layout (ggml `docs/gguf.md`): magic `GGUF`, u32 version, u64 tensor count,
//! u64 KV count, the KVs (string key, u32 value type, value), the tensor
//! infos (string name, u32 n_dims, u64 dims fastest first, u32 ggml type,
//! u64 offset into the data section), padding to the alignment, the data.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use waste_kernels::ggml::{GgmlType, dequantize};

use super::meta::MetaValue;
use super::reader::Cursor;
use super::split;
use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
/// ggml's default when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Smallest encodings, used to cap counts by the bytes left: a KV is at least
/// an empty key, a type and one byte; a tensor info an empty name, n_dims,
/// a type and an offset.
const MIN_KV_BYTES: usize = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: usize = 8 + 4 + 4 + 8;

/// One tensor as the file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml `ne`: fastest-varying dimension first (the reverse of numpy).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Byte size; `None` when the type id is unknown (then never read).
    pub size: Option<u64>,
}

impl GgufTensorInfo {
    /// Row-major (numpy / PyTorch) shape: `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Everything before the tensor data, parsed and validated.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_start: u64,
}

impl GgufHeader {
    /// Parses and validates a whole file's bytes: every tensor of a known
    /// type must lie inside `bytes`. `path` only names the file in errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let mut c = Cursor::new(bytes, path);
        if c.take(4, "magic")? != MAGIC {
            return Err(Error::Gguf {
                path: path.to_path_buf(),
                offset: 0,
                reason: "not a GGUF file (magic is not \"GGUF\")".into(),
            });
        }
        let version = c.u32("version")?;
        if version != 2 && version != 3 {
            // A byte-swapped 2 or 3 is a big-endian file.
            let hint = if version.swap_bytes() <= 3 {
                " (a big-endian GGUF; only little endian is read)"
            } else {
                ""
            };
            return Err(c.err(format!("GGUF version {version} is not 2 or 3{hint}")));
        }
        let n_tensors = c.count("tensor count", MIN_TENSOR_INFO_BYTES)?;
        let n_kv = c.count("metadata count", MIN_KV_BYTES)?;

        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key_at = c.pos();
            let key = c.string("metadata key")?;
            let value = MetaValue::read(&mut c, &key)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(Error::Gguf {
                    path: path.to_path_buf(),
                    offset: key_at as u64,
                    reason: format!("metadata key `{key}` appears twice"),
                });
            }
        }
        let alignment = alignment(path, &metadata)?;

        let mut tensors = Vec::with_capacity(n_tensors.min(1 << 16));
        let mut seen = HashMap::with_capacity(n_tensors.min(1 << 16));
        for _ in 0..n_tensors {
            let info = read_tensor_info(&mut c, alignment)?;
            if seen.insert(info.name.clone(), ()).is_some() {
                return Err(c.err(format!("tensor `{}` is listed twice", info.name)));
            }
            tensors.push(info);
        }
        let data_start = (c.pos() as u64).next_multiple_of(alignment);
        let header = Self {
            version,
            metadata,
            tensors,
            alignment,
            data_start,
        };
        header.check_extents(path, bytes.len() as u64)?;
        Ok(header)
    }

    /// Every tensor of a known size must end inside the file.
    fn check_extents(&self, path: &Path, file_len: u64) -> Result<()> {
        for t in &self.tensors {
            let Some(size) = t.size else { continue };
            let end = self
                .data_start
                .checked_add(t.offset)
                .and_then(|start| start.checked_add(size));
            if end.is_none_or(|end| end > file_len) {
                return Err(Error::BadTensor {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    reason: format!(
                        "data at {} + {} ({size} bytes) runs past the end of the file ({file_len} bytes; truncated?)",
                        self.data_start, t.offset
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `general.alignment`: an unsigned power of two (ggml requires u32; any
/// unsigned integer type is accepted), 32 when absent.
fn alignment(path: &Path, metadata: &BTreeMap<String, MetaValue>) -> Result<u64> {
    let Some(value) = metadata.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match value.as_u64() {
        Some(a) if a.is_power_of_two() && a <= 1 << 30 => Ok(a),
        _ => Err(Error::GgufMetadata {
            path: path.to_path_buf(),
            key: "general.alignment".into(),
            reason: format!("{value} is not a power of two up to 2^30"),
        }),
    }
}

fn read_tensor_info(c: &mut Cursor<'_>, alignment: u64) -> Result<GgufTensorInfo> {
    let name = c.string("tensor name")?;
    let n_dims = c.u32("n_dims")?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(c.err(format!(
            "tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS})"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64("tensor dimension")?);
    }
    let ggml_type = GgmlType(c.u32("tensor type")?);
    let offset = c.u64("tensor offset")?;
    if offset % alignment != 0 {
        return Err(c.err(format!(
            "tensor `{name}` offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    let size = match ggml_type.block() {
        None => None,
        Some(_) => Some(tensor_size(&dims, ggml_type).ok_or_else(|| {
            c.err(format!(
                "tensor `{name}`: dims {dims:?} do not fit {ggml_type} blocks or overflow"
            ))
        })?),
    };
    Ok(GgufTensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        size,
    })
}

/// Bytes of a tensor: rows of `dims[0]` elements (whole blocks) times the
/// product of the other dims, with overflow checked.
fn tensor_size(dims: &[u64], ty: GgmlType) -> Option<u64> {
    let (&row, rest) = dims.split_first()?;
    rest.iter()
        .try_fold(ty.row_bytes(row)?, |acc, &d| acc.checked_mul(d))
}

/// One memory-mapped GGUF container: a whole model, or one part of a split.
pub(crate) struct Part {
    pub(crate) path: PathBuf,
    map: Mmap,
    pub(crate) header: GgufHeader,
}

impl Part {
    /// Maps `path` and parses its header; no tensor data is read.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let (_, map) = waste_format::checkpoint::map_release(path)?;
        let header = GgufHeader::parse(path, &map)?;
        Ok(Self {
            path: path.to_path_buf(),
            map,
            header,
        })
    }
}

/// A GGUF model: one file, or every part of a llama.cpp `gguf-split` set
/// (`{prefix}-{i:05}-of-{n:05}.gguf`), memory-mapped, with the tensors of
/// all parts merged into one table. The model metadata is the first part's
/// (later parts hold only the `split.*` keys).
pub struct GgufFile {
    parts: Vec<Part>,
    /// Every part's tensors, in part order.
    tensors: Vec<GgufTensorInfo>,
    /// The part each entry of `tensors` lives in.
    part_of: Vec<usize>,
    by_name: HashMap<String, usize>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path())
            .field("parts", &self.parts.len())
            .field("version", &self.header().version)
            .field("tensors", &self.tensors.len())
            .field("metadata", &self.header().metadata.len())
            .finish_non_exhaustive()
    }
}

impl GgufFile {
    /// Maps `path` and parses its header; no tensor data is read. When the
    /// file is one part of a split (it has `split.count` > 1), every part is
    /// opened from the same folder, whichever part `path` names.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let given = Part::open(path.as_ref())?;
        let parts = match split::position(&given)? {
            None => vec![given],
            Some(pos) => split::open_parts(given, pos)?,
        };
        let mut tensors = Vec::new();
        let mut part_of: Vec<usize> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (p, part) in parts.iter().enumerate() {
            for info in &part.header.tensors {
                if let Some(&first) = by_name.get(&info.name) {
                    return Err(Error::BadTensor {
                        path: part.path.clone(),
                        tensor: info.name.clone(),
                        reason: format!(
                            "also in split part {}",
                            parts[part_of[first]].path.display()
                        ),
                    });
                }
                by_name.insert(info.name.clone(), tensors.len());
                tensors.push(info.clone());
                part_of.push(p);
            }
        }
        split::check_total(&parts, tensors.len())?;
        Ok(Self {
            parts,
            tensors,
            part_of,
            by_name,
        })
    }

    /// The file given, or the first part of a split.
    pub fn path(&self) -> &Path {
        &self.parts[0].path
    }

    /// Every file read, in part order (one for an unsplit model).
    pub fn part_paths(&self) -> impl Iterator<Item = &Path> {
        self.parts.iter().map(|p| p.path.as_path())
    }

    /// The first part's header: the model metadata. Its `tensors` are that
    /// part's only; [`Self::tensors`] has them all.
    pub fn header(&self) -> &GgufHeader {
        &self.parts[0].header
    }

    pub fn metadata(&self) -> &BTreeMap<String, MetaValue> {
        &self.header().metadata
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.header().metadata.get(key)
    }

    /// Every tensor of every part.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The position of tensor `name` in [`Self::tensors`].
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The file that holds tensor `name`.
    pub fn tensor_path(&self, name: &str) -> Option<&Path> {
        let &i = self.by_name.get(name)?;
        Some(&self.parts[self.part_of[i]].path)
    }

    /// The stored bytes of a tensor (its quantized blocks, as is).
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let &i = self.by_name.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        let (info, part) = (&self.tensors[i], &self.parts[self.part_of[i]]);
        let size = info.size.ok_or_else(|| self.unsupported(info))?;
        // Checked against the part's length when its header was parsed.
        let start = (part.header.data_start + info.offset) as usize;
        Ok(&part.map[start..start + size as usize])
    }

    /// A tensor's values in f32, row-major in numpy order.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        // Rows = product of every dim but the first (no division: dims may be 0).
        self.dequantize_rows(info, 0, info.dims[1..].iter().product())
    }

    /// Rows `first..first + count` (a row is `dims[0]` elements) of a tensor,
    /// in f32: a slice of a 3-D expert tensor decodes only that expert.
    pub fn dequantize_rows(
        &self,
        info: &GgufTensorInfo,
        first: u64,
        count: u64,
    ) -> Result<Vec<f32>> {
        if !info.ggml_type.is_decodable() {
            return Err(self.unsupported(info));
        }
        let bytes = self.rows_bytes(info, first, count)?;
        dequantize(info.ggml_type, bytes).ok_or_else(|| self.unsupported(info))
    }

    /// The stored bytes (whole blocks) of rows `first..first + count` of a
    /// tensor; an error naming the tensor when they are not all inside it.
    pub fn rows_bytes(&self, info: &GgufTensorInfo, first: u64, count: u64) -> Result<&[u8]> {
        let row_bytes = info
            .ggml_type
            .row_bytes(info.dims[0])
            .ok_or_else(|| self.unsupported(info))?;
        let bytes = self.tensor_bytes(&info.name)?;
        let range = first
            .checked_add(count)
            .and_then(|end| end.checked_mul(row_bytes))
            .filter(|&end| end <= bytes.len() as u64)
            .map(|end| (first * row_bytes) as usize..end as usize)
            .ok_or_else(|| {
                self.bad_tensor(
                    info,
                    format!("rows {first}..{first}+{count} are outside the tensor"),
                )
            })?;
        Ok(&bytes[range])
    }

    /// An error about `info`'s data, naming the part that holds it.
    pub(crate) fn bad_tensor(&self, info: &GgufTensorInfo, reason: String) -> Error {
        Error::BadTensor {
            path: self.path_of(info),
            tensor: info.name.clone(),
            reason,
        }
    }

    /// The part holding `info` (the first part for a tensor not in the file).
    fn path_of(&self, info: &GgufTensorInfo) -> PathBuf {
        self.tensor_path(&info.name)
            .unwrap_or_else(|| self.path())
            .to_path_buf()
    }

    fn unsupported(&self, info: &GgufTensorInfo) -> Error {
        Error::Unsupported {
            path: self.path_of(info),
            tensor: info.name.clone(),
            dtype: format!("GGUF {}", info.ggml_type),
        }
    }
}
