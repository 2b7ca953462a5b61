//! `waste quantize`: quantizes every 2-D tensor of a safetensors file to one
//! weight format and writes the dequantized float32 values under the same
//! names; stdout carries one JSON object {name: {packed_bytes, bits_per_weight}}
//! and nothing else. Outside checks call this exact interface: keep it stable.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype, TensorView};
use waste_kernels::{Format, quantize};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input safetensors file.
    #[arg(long = "in")]
    input: PathBuf,
    /// Weight format: q3 (default, 3.25 bpw), q3-tcq (3.25 bpw, trellis-coded), q3-rtn, q4, q8.
    #[arg(long, default_value = "q3")]
    format: String,
    /// Output safetensors file of float32 dequantized values.
    #[arg(long)]
    out: PathBuf,
}

/// A 2-D float tensor read from a safetensors file, widened to f32.
#[derive(Debug)]
pub struct Matrix2d {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub values: Vec<f32>,
}

/// Every 2-D f32/bf16/f16 tensor of `path`, in file order; other tensors are
/// listed on stderr and skipped.
pub fn read_matrices(path: &Path) -> Result<Vec<Matrix2d>> {
    let bytes = fs_err::read(path)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .with_context(|| format!("parse {}", path.display()))?;
    let mut tensors = st.tensors();
    tensors.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut out = Vec::new();
    for (name, view) in tensors {
        let &[rows, cols] = view.shape() else {
            tracing::info!("skip {name}: shape {:?} is not 2-D", view.shape());
            continue;
        };
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            other => {
                tracing::info!("skip {name}: dtype {other:?}");
                continue;
            }
        };
        out.push(Matrix2d {
            name,
            rows,
            cols,
            values,
        });
    }
    Ok(out)
}

pub fn run(args: &Args) -> Result<()> {
    let format: Format = args.format.parse()?;
    let matrices = read_matrices(&args.input)?;
    if matrices.is_empty() {
        bail!("{} holds no 2-D float tensor", args.input.display());
    }
    let mut report = BTreeMap::new();
    let mut outputs = Vec::with_capacity(matrices.len());
    for m in &matrices {
        let q = quantize(format, m.rows, m.cols, &m.values)
            .with_context(|| format!("quantize {}", m.name))?;
        tracing::info!(
            "{}: {}x{} {format} {:.4} bpw, rel error {:.5}",
            m.name,
            m.rows,
            m.cols,
            q.bits_per_weight(),
            q.rel_error()
        );
        report.insert(
            m.name.clone(),
            serde_json::json!({"packed_bytes": q.bytes.len(), "bits_per_weight": q.bits_per_weight()}),
        );
        let deq = q.matrix().dequantize();
        outputs.push((
            m.name.clone(),
            vec![m.rows, m.cols],
            deq.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        ));
    }
    let views = outputs
        .iter()
        .map(|(name, shape, bytes)| {
            Ok((
                name.clone(),
                TensorView::new(Dtype::F32, shape.clone(), bytes)?,
            ))
        })
        .collect::<Result<HashMap<_, _>>>()?;
    safetensors::serialize_to_file(&views, None, &args.out)
        .with_context(|| format!("write {}", args.out.display()))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
