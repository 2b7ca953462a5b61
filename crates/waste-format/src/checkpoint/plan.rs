//! Per-tensor validation and decoding: gathers the stored parts of one
//! logical tensor, checks their dtypes and shapes against each other (a
//! malformed checkpoint gives an error naming the file and tensor, never a
//! panic), then decodes them with `crate::decode`. Owns those checks only.

use std::path::Path;

use safetensors::Dtype;
use waste_kernels::ggml::GgmlType;
use waste_kernels::{Format, Tensor, TensorData};

use super::layout::{
    BLOCKS_SUFFIX, FORMAT_SUFFIX, GGML_SUFFIX, GGML_TYPE_SUFFIX, Layout, PACKED_G_IDX,
    PACKED_SCALE, PACKED_SHAPE, PACKED_SUFFIX, PACKED_ZERO_POINT, Q8_SUFFIX,
};
use super::{Checkpoint, RawTensor, Storage};
use crate::checkpoint::error::{Error, Result};
use crate::decode::{self, fp8, int4, mxfp4};

/// A logical tensor whose parts have been found and checked.
pub(super) enum Plan<'a> {
    Plain(RawTensor<'a>),
    /// `packed` is [rows, ceil(cols/32)·34] U8 waste-kernels `q8` blocks.
    Q8 {
        packed: RawTensor<'a>,
        rows: usize,
        cols: usize,
    },
    /// `packed` is [rows, row bytes] U8 ggml blocks of `ty`.
    Ggml {
        packed: RawTensor<'a>,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    },
    /// `packed` is [rows, row bytes] U8 blocks of `format` (a block format).
    Blocks {
        packed: RawTensor<'a>,
        format: Format,
        rows: usize,
        cols: usize,
    },
    /// `weight` is [rows, cols] F8_E4M3; `scale` is the block grid.
    Fp8 {
        name: &'a str,
        weight: RawTensor<'a>,
        scale: RawTensor<'a>,
        rows: usize,
        cols: usize,
        block: [usize; 2],
    },
    /// `packed` is [rows, ceil(cols/8)] I32; `scale` [rows, ceil(cols/group)].
    Int4 {
        name: &'a str,
        packed: RawTensor<'a>,
        scale: RawTensor<'a>,
        rows: usize,
        cols: usize,
        group: usize,
    },
    /// `packed` is [rows, cols/2] U8 e2m1 pairs; `scale` [rows, cols/group] U8 E8M0.
    Mxfp4 {
        name: &'a str,
        packed: RawTensor<'a>,
        scale: RawTensor<'a>,
        rows: usize,
        cols: usize,
        group: usize,
    },
}

impl<'a> Plan<'a> {
    pub(super) fn shape(&self) -> Vec<usize> {
        match self {
            Plan::Plain(raw) => raw.shape.to_vec(),
            Plan::Fp8 { rows, cols, .. }
            | Plan::Int4 { rows, cols, .. }
            | Plan::Mxfp4 { rows, cols, .. }
            | Plan::Q8 { rows, cols, .. }
            | Plan::Ggml { rows, cols, .. }
            | Plan::Blocks { rows, cols, .. } => vec![*rows, *cols],
        }
    }

    pub(super) fn storage(&self) -> Storage {
        match self {
            Plan::Plain(raw) => match raw.dtype {
                Dtype::F32 => Storage::F32,
                Dtype::BF16 => Storage::Bf16,
                Dtype::F16 => Storage::F16,
                other => Storage::Unsupported {
                    dtype: other.to_string(),
                },
            },
            Plan::Fp8 { block, .. } => Storage::Fp8Block { block: *block },
            Plan::Int4 { group, .. } => Storage::Int4PackQuantized { group_size: *group },
            Plan::Mxfp4 { group, .. } => Storage::Mxfp4PackQuantized { group_size: *group },
            Plan::Q8 { .. } => Storage::Q8,
            Plan::Ggml { ty, .. } => Storage::Ggml { ggml_type: *ty },
            // One layout, the storage each format always had.
            Plan::Blocks { format, .. } => match format {
                Format::Q8 => Storage::Q8,
                Format::Ggml(ty) => Storage::Ggml { ggml_type: *ty },
                format => Storage::Blocks { format: *format },
            },
        }
    }

    pub(super) fn path(&self) -> &Path {
        match self {
            Plan::Plain(raw) => raw.path,
            Plan::Fp8 { weight, .. } => weight.path,
            Plan::Int4 { packed, .. }
            | Plan::Mxfp4 { packed, .. }
            | Plan::Q8 { packed, .. }
            | Plan::Ggml { packed, .. }
            | Plan::Blocks { packed, .. } => packed.path,
        }
    }

    /// The stored part holding the values (not the scales or shape).
    pub(super) fn values(&self) -> RawTensor<'a> {
        match self {
            Plan::Plain(raw) => *raw,
            Plan::Fp8 { weight, .. } => *weight,
            Plan::Int4 { packed, .. }
            | Plan::Mxfp4 { packed, .. }
            | Plan::Q8 { packed, .. }
            | Plan::Ggml { packed, .. }
            | Plan::Blocks { packed, .. } => *packed,
        }
    }

    /// Decodes the tensor. `release(start, len)` is called for each span
    /// of [`Plan::values`]' bytes once copied out, so the caller can drop
    /// the file's pages from the process as the copy grows (a copy never
    /// sits beside its whole mapped source: loading the largest tensor
    /// would otherwise add its size to the peak RSS).
    pub(super) fn decode(self, release: &dyn Fn(usize, usize)) -> Result<Tensor> {
        let shape = self.shape();
        let values = self.values().data;
        let by_spans = matches!(
            self,
            Plan::Plain(_) | Plan::Q8 { .. } | Plan::Ggml { .. } | Plan::Blocks { .. }
        );
        let data = match self {
            // Kept packed: an 8-bit backbone is held and multiplied as its
            // blocks (`plan_q8` checked their size against the shape).
            Plan::Q8 { .. } => TensorData::Q8(by_span(values, 1, release, <[u8]>::to_vec)),
            Plan::Ggml { ty, .. } => {
                TensorData::Ggml(ty, by_span(values, 1, release, <[u8]>::to_vec))
            }
            // Each format as it is held: q8 and ggml blocks as in 1.2 stores.
            Plan::Blocks { format, .. } => {
                let bytes = by_span(values, 1, release, <[u8]>::to_vec);
                match format {
                    Format::Q8 => TensorData::Q8(bytes),
                    Format::Ggml(ty) => TensorData::Ggml(ty, bytes),
                    format => TensorData::Packed(format, bytes),
                }
            }
            Plan::Plain(raw) => match raw.dtype {
                Dtype::F32 => TensorData::F32(by_span(values, 4, release, decode::f32_from_le)),
                Dtype::BF16 => TensorData::Bf16(by_span(values, 2, release, decode::bf16_from_le)),
                Dtype::F16 => {
                    TensorData::F32(by_span(values, 2, release, decode::f16_from_le_to_f32))
                }
                other => return Err(unsupported(&raw, raw.name, other.to_string())),
            },
            Plan::Fp8 {
                name,
                weight,
                scale,
                rows,
                cols,
                block,
            } => {
                let scale = scale_values(&scale)?;
                let values = fp8::dequantize_fp8_block(weight.data, rows, cols, &scale, block)
                    .ok_or_else(|| internal(&weight, name))?;
                TensorData::F32(values)
            }
            Plan::Int4 {
                name,
                packed,
                scale,
                rows,
                cols,
                group,
            } => {
                let scale = scale_values(&scale)?;
                let values = int4::dequantize_int4_packed(packed.data, rows, cols, &scale, group)
                    .ok_or_else(|| internal(&packed, name))?;
                TensorData::F32(values)
            }
            Plan::Mxfp4 {
                name,
                packed,
                scale,
                rows,
                cols,
                group,
            } => {
                let values =
                    mxfp4::dequantize_mxfp4_packed(packed.data, scale.data, rows, cols, group)
                        .ok_or_else(|| internal(&packed, name))?;
                TensorData::F32(values)
            }
        };
        // The block-scaled formats widen to f32, 2 to 8 times their bytes:
        // their source is released after.
        if !by_spans {
            release(0, values.len());
        }
        Ok(Tensor { shape, data })
    }
}

/// `packed` must be U8 [rows, row bytes]: whole blocks of `format` for
/// each of `rows` rows of `cols` values (`what` says so in the error).
fn check_block_rows(
    packed: &RawTensor<'_>,
    format: Format,
    rows: usize,
    cols: usize,
    what: &'static str,
) -> Result<()> {
    let want = format
        .packed_size(rows, cols)
        .map(|_| [rows, format.row_bytes(cols)]);
    if packed.dtype != Dtype::U8 || Some(packed.shape) != want.as_ref().map(|w| &w[..]) {
        return Err(Error::ShapeMismatch {
            path: packed.path.to_path_buf(),
            tensor: packed.name.to_string(),
            what,
            expected: want.map_or_else(Vec::new, |w| w.to_vec()),
            found: packed.shape.to_vec(),
        });
    }
    Ok(())
}

/// Bytes decoded per span before its pages are released.
const SPAN_BYTES: usize = 8 << 20;

/// `decode` of `bytes` a span at a time (spans of whole `elem`-byte
/// values), each released once decoded, the pieces joined.
fn by_span<T>(
    bytes: &[u8],
    elem: usize,
    release: &dyn Fn(usize, usize),
    decode: impl Fn(&[u8]) -> Vec<T>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(bytes.len() / elem);
    let mut start = 0;
    for span in bytes.chunks(SPAN_BYTES / elem * elem) {
        out.extend(decode(span));
        release(start, span.len());
        start += span.len();
    }
    out
}

impl Checkpoint {
    /// Finds and checks the parts of logical tensor `name`.
    pub(super) fn plan<'a>(&'a self, name: &'a str) -> Result<Plan<'a>> {
        let layout = self.logical.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        match layout {
            Layout::Plain => Ok(Plan::Plain(self.stored(name)?)),
            Layout::Fp8 { scale } => self.plan_fp8(name, scale),
            Layout::Packed { prefix } => self.plan_packed(name, prefix),
            Layout::Q8 { prefix } => self.plan_q8(name, prefix),
            Layout::Ggml { prefix } => self.plan_ggml(name, prefix),
            Layout::Blocks { prefix } => self.plan_blocks(name, prefix),
        }
    }

    /// Block parts of any format: U8 rows of a block format the backbone
    /// holds packed (`q8`, `q4`, `q3`, ggml blocks), whose shape must be
    /// what `weight_shape` implies.
    fn plan_blocks<'a>(&'a self, name: &'a str, prefix: &str) -> Result<Plan<'a>> {
        let packed = self.stored_owned_name(format!("{prefix}{BLOCKS_SUFFIX}"))?;
        let shape = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SHAPE}"))?;
        let [rows, cols] = logical_shape(&shape)?;
        let id_part = self.companion_owned(&packed, name, format!("{prefix}{FORMAT_SUFFIX}"))?;
        let bad = |reason: String| Error::BadTensor {
            path: id_part.path.to_path_buf(),
            tensor: id_part.name.to_string(),
            reason,
        };
        let format = match decode::int_values(id_part.dtype, id_part.data).as_deref() {
            Some(&[id]) => u16::try_from(id)
                .ok()
                .and_then(|id| Format::from_id(id).ok())
                .ok_or_else(|| bad(format!("format id {id} is not a format waste knows")))?,
            _ => return Err(bad("weight_format must be one I64 or I32".into())),
        };
        // The native formats are widened on load, never held as blocks.
        if format.is_exact() && !matches!(format, Format::Ggml(_) | Format::Q3Tcq) {
            return Err(bad(format!("{format} is not a block format")));
        }
        check_block_rows(
            &packed,
            format,
            rows,
            cols,
            "weight_blocks: U8, whole blocks of weight_format for each row of weight_shape",
        )?;
        Ok(Plan::Blocks {
            packed,
            format,
            rows,
            cols,
        })
    }

    /// ggml parts: U8 blocks of a type the decoders read, whose shape must
    /// be what `weight_shape` implies (whole blocks per row).
    fn plan_ggml<'a>(&'a self, name: &'a str, prefix: &str) -> Result<Plan<'a>> {
        let packed = self.stored_owned_name(format!("{prefix}{GGML_SUFFIX}"))?;
        let shape = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SHAPE}"))?;
        let [rows, cols] = logical_shape(&shape)?;
        let ty_part = self.companion_owned(&packed, name, format!("{prefix}{GGML_TYPE_SUFFIX}"))?;
        let bad = |reason: String| Error::BadTensor {
            path: ty_part.path.to_path_buf(),
            tensor: ty_part.name.to_string(),
            reason,
        };
        let ty = match decode::int_values(ty_part.dtype, ty_part.data).as_deref() {
            Some(&[id]) => u32::try_from(id)
                .map(GgmlType)
                .map_err(|_| bad(format!("ggml type {id} is negative or too large")))?,
            _ => return Err(bad("weight_ggml_type must be one I64 or I32".into())),
        };
        let Some(format @ Format::Ggml(_)) = Format::ggml(ty) else {
            return Err(bad(format!("{ty} is not a ggml block type waste decodes")));
        };
        check_block_rows(
            &packed,
            format,
            rows,
            cols,
            "weight_ggml: U8, whole ggml blocks of each row, from weight_shape",
        )?;
        Ok(Plan::Ggml {
            packed,
            ty,
            rows,
            cols,
        })
    }

    /// waste `q8` parts: U8 blocks whose shape must be what `weight_shape` implies.
    fn plan_q8<'a>(&'a self, name: &'a str, prefix: &str) -> Result<Plan<'a>> {
        let packed = self.stored_owned_name(format!("{prefix}{Q8_SUFFIX}"))?;
        let shape = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SHAPE}"))?;
        let [rows, cols] = logical_shape(&shape)?;
        check_block_rows(
            &packed,
            Format::Q8,
            rows,
            cols,
            "q8 weight_q8: U8, 34 bytes per 32 inputs of each row, from weight_shape",
        )?;
        Ok(Plan::Q8 { packed, rows, cols })
    }

    fn plan_fp8<'a>(&'a self, name: &'a str, scale_name: &'a str) -> Result<Plan<'a>> {
        let weight = self.stored(name)?;
        let &[rows, cols] = weight.shape else {
            return Err(Error::BadTensor {
                path: weight.path.to_path_buf(),
                tensor: name.to_string(),
                reason: format!(
                    "an F8_E4M3 block-quantized weight must be 2-D, got shape {:?}",
                    weight.shape
                ),
            });
        };
        let scale = self.companion(&weight, scale_name)?;
        check_float(&scale)?;
        let block = self.quant.fp8_block;
        let grid = fp8::scale_grid(rows, cols, block);
        if scale.shape != grid {
            return Err(Error::ShapeMismatch {
                path: scale.path.to_path_buf(),
                tensor: scale_name.to_string(),
                what: "fp8 weight_scale_inv: one scale per block, partial edge blocks included",
                expected: grid.to_vec(),
                found: scale.shape.to_vec(),
            });
        }
        Ok(Plan::Fp8 {
            name,
            weight,
            scale,
            rows,
            cols,
            block,
        })
    }

    fn plan_packed<'a>(&'a self, name: &'a str, prefix: &str) -> Result<Plan<'a>> {
        let packed = self.stored_owned_name(format!("{prefix}{PACKED_SUFFIX}"))?;
        for (part, what) in [
            (
                PACKED_ZERO_POINT,
                "pack-quantized with weight_zero_point (asymmetric)",
            ),
            (
                PACKED_G_IDX,
                "pack-quantized with weight_g_idx (activation order)",
            ),
        ] {
            if self.stored.contains_key(&format!("{prefix}{part}")) {
                return Err(unsupported(&packed, name, what.to_string()));
            }
        }
        if packed.dtype == Dtype::U8 && self.quant.is_mxfp4() {
            return self.plan_mxfp4(name, prefix, packed);
        }
        if packed.dtype != Dtype::I32 {
            let format = self.quant.format.as_deref().unwrap_or("unknown format");
            let dtype = format!("{} weight_packed ({format})", packed.dtype);
            return Err(unsupported(&packed, name, dtype));
        }
        let shape = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SHAPE}"))?;
        let [rows, cols] = logical_shape(&shape)?;
        let groups = self.quant.int4_groups(cols).map_err(|schemes| {
            unsupported(
                &packed,
                name,
                format!("pack-quantized with weights {schemes}"),
            )
        })?;
        let packed_shape = [rows, cols.div_ceil(8)];
        if packed.shape != packed_shape {
            return Err(Error::ShapeMismatch {
                path: packed.path.to_path_buf(),
                tensor: packed.name.to_string(),
                what: "int4 weight_packed: eight values per int32 along the input dim, from weight_shape",
                expected: packed_shape.to_vec(),
                found: packed.shape.to_vec(),
            });
        }
        let scale = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SCALE}"))?;
        check_float(&scale)?;
        let group = groups
            .iter()
            .copied()
            .find(|&g| scale.shape == [rows, cols.div_ceil(g)]);
        let Some(group) = group else {
            return Err(Error::ShapeMismatch {
                path: scale.path.to_path_buf(),
                tensor: scale.name.to_string(),
                what: "int4 weight_scale: one scale per group of the configured group_size",
                expected: vec![rows, cols.div_ceil(groups[0])],
                found: scale.shape.to_vec(),
            });
        };
        Ok(Plan::Int4 {
            name,
            packed,
            scale,
            rows,
            cols,
            group,
        })
    }

    /// MXFP4 parts: the logical shape comes from the packed tensor (two codes
    /// per byte) and must agree with the E8M0 scale grid.
    fn plan_mxfp4<'a>(
        &'a self,
        name: &'a str,
        prefix: &str,
        packed: RawTensor<'a>,
    ) -> Result<Plan<'a>> {
        let &[rows, half] = packed.shape else {
            return Err(Error::BadTensor {
                path: packed.path.to_path_buf(),
                tensor: name.to_string(),
                reason: format!(
                    "MXFP4 weight_packed must be 2-D, got shape {:?}",
                    packed.shape
                ),
            });
        };
        let cols = half * 2;
        let group = self.quant.mxfp4_group();
        let scale = self.companion_owned(&packed, name, format!("{prefix}{PACKED_SCALE}"))?;
        let grid = [rows, cols.div_ceil(group)];
        if scale.dtype != Dtype::U8 || scale.shape != grid {
            return Err(Error::ShapeMismatch {
                path: scale.path.to_path_buf(),
                tensor: scale.name.to_string(),
                what: "MXFP4 weight_scale: one U8 E8M0 exponent per group of inputs",
                expected: grid.to_vec(),
                found: scale.shape.to_vec(),
            });
        }
        Ok(Plan::Mxfp4 {
            name,
            packed,
            scale,
            rows,
            cols,
            group,
        })
    }

    /// A part of a quantized tensor, or `MissingCompanion` naming `main`.
    fn companion<'a>(&'a self, main: &RawTensor<'a>, part: &'a str) -> Result<RawTensor<'a>> {
        self.find_stored(part).unwrap_or_else(|| {
            Err(Error::MissingCompanion {
                path: main.path.to_path_buf(),
                tensor: main.name.to_string(),
                companion: part.to_string(),
            })
        })
    }

    /// [`Self::companion`] for a computed name: borrows the catalogue's copy.
    fn companion_owned<'a>(
        &'a self,
        main: &RawTensor<'a>,
        logical: &str,
        part: String,
    ) -> Result<RawTensor<'a>> {
        match self.stored.get_key_value(&part) {
            Some((key, _)) => self.stored(key),
            None => Err(Error::MissingCompanion {
                path: main.path.to_path_buf(),
                tensor: logical.to_string(),
                companion: part,
            }),
        }
    }

    /// A stored tensor by computed name (must exist: `layout` saw it).
    fn stored_owned_name(&self, part: String) -> Result<RawTensor<'_>> {
        match self.stored.get_key_value(&part) {
            Some((key, _)) => self.stored(key),
            None => Err(Error::MissingTensor { name: part }),
        }
    }
}

/// `[rows, cols]` from a `weight_shape` tensor (I64 or I32, two non-negative values).
fn logical_shape(shape: &RawTensor<'_>) -> Result<[usize; 2]> {
    let bad = |reason: String| Error::BadTensor {
        path: shape.path.to_path_buf(),
        tensor: shape.name.to_string(),
        reason,
    };
    let values = decode::int_values(shape.dtype, shape.data).ok_or_else(|| {
        bad(format!(
            "weight_shape must be I64 or I32, got {}",
            shape.dtype
        ))
    })?;
    let dims: Vec<usize> = values
        .iter()
        .map(|&v| usize::try_from(v))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(format!("weight_shape {values:?} has a negative dimension")))?;
    <[usize; 2]>::try_from(dims)
        .map_err(|_| bad(format!("weight_shape {values:?} is not two dimensions")))
}

fn check_float(raw: &RawTensor<'_>) -> Result<()> {
    match raw.dtype {
        Dtype::F32 | Dtype::BF16 | Dtype::F16 => Ok(()),
        other => Err(unsupported(raw, raw.name, format!("{other} scales"))),
    }
}

fn scale_values(raw: &RawTensor<'_>) -> Result<Vec<f32>> {
    decode::float_to_f32(raw.dtype, raw.data)
        .ok_or_else(|| unsupported(raw, raw.name, format!("{} scales", raw.dtype)))
}

fn unsupported(raw: &RawTensor<'_>, tensor: &str, dtype: String) -> Error {
    Error::Unsupported {
        path: raw.path.to_path_buf(),
        tensor: tensor.to_string(),
        dtype,
    }
}

/// Lengths disagreed after `plan` checked them: a bug here, reported, not a panic.
fn internal(raw: &RawTensor<'_>, tensor: &str) -> Error {
    Error::BadTensor {
        path: raw.path.to_path_buf(),
        tensor: tensor.to_string(),
        reason: "stored sizes disagree with the checked shapes (reader bug)".into(),
    }
}
