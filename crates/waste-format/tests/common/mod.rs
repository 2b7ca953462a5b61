//! Helpers shared by the integration tests: where the fixtures are, writing
//! small safetensors files with arbitrary dtypes, and comparing tensors.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use waste_format::Checkpoint;
use waste_kernels::{Tensor, TensorData};

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}

/// One stored tensor to write: name, dtype, shape, little-endian bytes.
pub struct Raw {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Raw {
    pub fn new(name: &str, dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    pub fn f32(name: &str, shape: &[usize], values: &[f32]) -> Self {
        Self::new(
            name,
            Dtype::F32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    pub fn i64(name: &str, shape: &[usize], values: &[i64]) -> Self {
        Self::new(
            name,
            Dtype::I64,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    pub fn i32(name: &str, shape: &[usize], values: &[i32]) -> Self {
        Self::new(
            name,
            Dtype::I32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    pub fn bf16(name: &str, shape: &[usize], values: &[f32]) -> Self {
        let data = values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
            .collect();
        Self::new(name, Dtype::BF16, shape, data)
    }
}

/// Serializes `tensors` into one safetensors file with the crate itself.
pub fn write_safetensors(path: &Path, tensors: &[Raw]) -> Result<()> {
    let views = tensors
        .iter()
        .map(|t| {
            Ok((
                t.name.clone(),
                TensorView::new(t.dtype, t.shape.clone(), &t.data)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None)?;
    fs_err::write(path, bytes)?;
    Ok(())
}

/// Every stored tensor of a safetensors file, read with the safetensors crate
/// alone (independent of the reader under test).
pub fn read_all(path: &Path) -> Result<Vec<Raw>> {
    let bytes = fs_err::read(path)?;
    let st = safetensors::SafeTensors::deserialize(&bytes).context("deserialize")?;
    let mut out: Vec<Raw> = st
        .iter()
        .map(|(name, view)| Raw::new(name, view.dtype(), view.shape(), view.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// f32 values of a loaded tensor.
pub fn values(t: Tensor) -> Vec<f32> {
    t.into_f32()
}

/// Tensors equal bit for bit, precision included.
pub fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.shape == b.shape
        && match (&a.data, &b.data) {
            (TensorData::F32(x), TensorData::F32(y)) => x
                .iter()
                .map(|v| v.to_bits())
                .eq(y.iter().map(|v| v.to_bits())),
            (TensorData::Bf16(x), TensorData::Bf16(y)) => x
                .iter()
                .map(|v| v.to_bits())
                .eq(y.iter().map(|v| v.to_bits())),
            _ => false,
        }
}

/// Every logical tensor of `a` and `b` has the same name and bits.
pub fn assert_same_checkpoint(a: &Checkpoint, b: &Checkpoint) -> Result<()> {
    assert_eq!(a.tensor_names(), b.tensor_names());
    for name in a.tensor_names() {
        let (x, y) = (a.load(name)?, b.load(name)?);
        assert!(same_bits(&x, &y), "{name} differs");
        assert_eq!(a.info(name)?.storage, b.info(name)?.storage, "{name}");
    }
    Ok(())
}

/// ||a - b|| / ||b||.
pub fn relative_error(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}
