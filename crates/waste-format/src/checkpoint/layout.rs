//! How logical tensors map onto stored ones. A released checkpoint stores
//! some weights as several tensors; readers see one logical `<p>.weight`:
//! - FP8 blocks (DeepSeek-V3, Kimi-K2): `<p>.weight` F8_E4M3 plus
//!   `<p>.weight_scale_inv`, which is hidden.
//! - compressed-tensors packed (Kimi-K2-Thinking): `<p>.weight_packed`,
//!   `<p>.weight_scale`, `<p>.weight_shape` (and `weight_zero_point`,
//!   `weight_g_idx` when present), all hidden behind `<p>.weight`.
//! - waste's 8-bit backbone format (`waste convert --backbone q8`):
//!   `<p>.weight_q8` U8 [rows, ceil(cols/32)·34], waste-kernels `q8` blocks,
//!   and `<p>.weight_shape` = [rows, cols], both hidden behind `<p>.weight`.
//! - a GGUF's ggml blocks (`waste convert --backbone native` on a GGUF):
//!   `<p>.weight_ggml` U8 [rows, row bytes], `<p>.weight_shape` = [rows,
//!   cols] and `<p>.weight_ggml_type` = [ggml type id], hidden behind
//!   `<p>.weight`.
//! - any block format (store format 1.3: `q8`, `q4`, `q3`, ggml blocks):
//!   `<p>.weight_blocks` U8 [rows, row bytes], `<p>.weight_shape` = [rows,
//!   cols] and `<p>.weight_format` = [waste format id], hidden behind
//!   `<p>.weight`.
//! - everything else is stored under its own name.
//!
//! Owns naming only: shapes and dtypes of the parts are checked on use.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use safetensors::Dtype;

pub(crate) use crate::backbone::{
    BLOCKS_SUFFIX, FORMAT_SUFFIX, GGML_SUFFIX, GGML_TYPE_SUFFIX, Q8_SUFFIX,
};
use crate::checkpoint::error::{Error, Result};

pub(crate) const PACKED_SUFFIX: &str = ".weight_packed";
pub(crate) const PACKED_SCALE: &str = ".weight_scale";
pub(crate) const PACKED_SHAPE: &str = ".weight_shape";
pub(crate) const PACKED_ZERO_POINT: &str = ".weight_zero_point";
pub(crate) const PACKED_G_IDX: &str = ".weight_g_idx";
pub(crate) const FP8_SCALE_SUFFIX: &str = "_scale_inv";

/// How one logical tensor is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Stored as is, under the logical name.
    Plain,
    /// F8_E4M3 under the logical name, block scales in `scale`.
    Fp8 { scale: String },
    /// compressed-tensors packed parts named `<prefix>.weight_*`.
    Packed { prefix: String },
    /// waste `q8` blocks in `<prefix>.weight_q8`, shape in `<prefix>.weight_shape`.
    Q8 { prefix: String },
    /// ggml blocks in `<prefix>.weight_ggml`, shape in `<prefix>.weight_shape`,
    /// type in `<prefix>.weight_ggml_type`.
    Ggml { prefix: String },
    /// blocks of any format in `<prefix>.weight_blocks`, shape in
    /// `<prefix>.weight_shape`, format id in `<prefix>.weight_format`.
    Blocks { prefix: String },
}

/// What `classify` needs to know of a stored tensor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stored<'a> {
    pub dtype: Dtype,
    pub path: &'a Path,
}

/// The logical name `<prefix>.weight` of parts stored in `entry`'s file,
/// an error where a plain tensor holds that name too.
fn parts_of(
    stored: &BTreeMap<String, Stored<'_>>,
    prefix: &str,
    entry: &Stored<'_>,
) -> Result<String> {
    let weight = format!("{prefix}.weight");
    match stored.get(&weight) {
        Some(plain) => Err(Error::DuplicateTensor {
            name: weight,
            first: plain.path.to_path_buf(),
            second: entry.path.to_path_buf(),
        }),
        None => Ok(weight),
    }
}

/// Builds the logical name -> layout map from the stored tensors.
pub(crate) fn classify(stored: &BTreeMap<String, Stored<'_>>) -> Result<BTreeMap<String, Layout>> {
    let mut logical = BTreeMap::new();
    let mut hidden = HashSet::new();
    for (name, entry) in stored {
        let blocks = [
            (Q8_SUFFIX, None),
            (GGML_SUFFIX, Some(GGML_TYPE_SUFFIX)),
            (BLOCKS_SUFFIX, Some(FORMAT_SUFFIX)),
        ]
        .into_iter()
        .find_map(|(suffix, ty)| Some((name.strip_suffix(suffix)?, ty)));
        if let Some((prefix, ty)) = blocks {
            let weight = parts_of(stored, prefix, entry)?;
            hidden.insert(name.clone());
            hidden.insert(format!("{prefix}{PACKED_SHAPE}"));
            let prefix = prefix.to_string();
            let layout = match ty {
                Some(FORMAT_SUFFIX) => {
                    hidden.insert(format!("{prefix}{FORMAT_SUFFIX}"));
                    Layout::Blocks { prefix }
                }
                Some(ty) => {
                    hidden.insert(format!("{prefix}{ty}"));
                    Layout::Ggml { prefix }
                }
                None => Layout::Q8 { prefix },
            };
            logical.insert(weight, layout);
        } else if let Some(prefix) = name.strip_suffix(PACKED_SUFFIX) {
            let weight = parts_of(stored, prefix, entry)?;
            hidden.insert(name.clone());
            for part in [PACKED_SCALE, PACKED_SHAPE, PACKED_ZERO_POINT, PACKED_G_IDX] {
                hidden.insert(format!("{prefix}{part}"));
            }
            logical.insert(
                weight,
                Layout::Packed {
                    prefix: prefix.to_string(),
                },
            );
        } else if entry.dtype == Dtype::F8_E4M3 && name.ends_with(".weight") {
            let scale = format!("{name}{FP8_SCALE_SUFFIX}");
            hidden.insert(scale.clone());
            logical.insert(name.clone(), Layout::Fp8 { scale });
        }
    }
    for name in stored.keys() {
        if !hidden.contains(name) && !logical.contains_key(name) {
            logical.insert(name.clone(), Layout::Plain);
        }
    }
    Ok(logical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(names: &[(&str, Dtype)]) -> BTreeMap<String, Stored<'static>> {
        names
            .iter()
            .map(|&(n, dtype)| {
                (
                    n.to_string(),
                    Stored {
                        dtype,
                        path: Path::new("m.safetensors"),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn quantized_parts_hide_behind_the_weight() {
        let s = stored(&[
            ("a.weight", Dtype::F8_E4M3),
            ("a.weight_scale_inv", Dtype::F32),
            ("b.weight_packed", Dtype::I32),
            ("b.weight_scale", Dtype::BF16),
            ("b.weight_shape", Dtype::I64),
            ("c.weight", Dtype::BF16),
            ("orphan.weight_scale_inv", Dtype::F32),
            ("d.weight", Dtype::F8_E4M3), // scale missing: still fp8, fails on load
        ]);
        let l = classify(&s).unwrap();
        let names: Vec<&str> = l.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "a.weight",
                "b.weight",
                "c.weight",
                "d.weight",
                "orphan.weight_scale_inv"
            ]
        );
        assert_eq!(
            l["a.weight"],
            Layout::Fp8 {
                scale: "a.weight_scale_inv".into()
            }
        );
        assert_eq!(l["b.weight"], Layout::Packed { prefix: "b".into() });
        assert_eq!(l["c.weight"], Layout::Plain);
    }

    #[test]
    fn packed_and_plain_weight_of_one_name_is_an_error() {
        let s = stored(&[("b.weight_packed", Dtype::I32), ("b.weight", Dtype::BF16)]);
        assert!(matches!(classify(&s), Err(Error::DuplicateTensor { .. })));
    }
}
