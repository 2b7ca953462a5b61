//! One MoE layer's experts into one layer file: each expert's gate, up and
//! down are loaded (decoded exactly), quantized or kept native, and built
//! into a record; records are appended in expert order. A window of experts
//! is built in parallel (rayon), sized so that the decoded f32 matrices in
//! flight stay within [`WINDOW_BYTES`], so memory is a few tensors whatever
//! the model's size. Experts that read the same source tensors (upcycled
//! copies) are built once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;
use waste_format::LayerEntry;
use waste_format::experts::{LayerHeader, LayerWriter};
use waste_kernels::{Format, Quantized, build_record, build_record_raw, quantize};

use super::options::ExpertsMode;
use super::plan::LayerPlan;
use super::source::Source;
use crate::error::{Error, Result};

/// Decoded f32 bytes of experts in flight at once, at most (at least one expert).
pub const WINDOW_BYTES: u64 = 384 << 20;

/// Experts built in parallel for a layer of this shape with `jobs` workers.
pub fn window(plan: &LayerPlan, jobs: usize) -> usize {
    // Per expert in flight: one f32 matrix at a time plus its three packed parts.
    let per_expert = (plan.d_model * plan.d_ff * 4 + plan.record_len) as u64;
    ((WINDOW_BYTES / per_expert.max(1)) as usize).clamp(1, jobs.max(1))
}

/// How far re-quantized weights are from the source's exact values:
/// `||W - Q(W)||²` and `||W||²` summed over the matrices built (f64).
/// Both zero for experts kept native, which are the source's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WeightError {
    pub sq_error: f64,
    pub sq_norm: f64,
}

impl WeightError {
    /// `||W - Q(W)||_F / ||W||_F`, None when nothing was re-quantized.
    pub fn relative(&self) -> Option<f64> {
        (self.sq_norm > 0.0).then(|| (self.sq_error / self.sq_norm).sqrt())
    }
}

impl std::ops::AddAssign for WeightError {
    fn add_assign(&mut self, o: Self) {
        self.sq_error += o.sq_error;
        self.sq_norm += o.sq_norm;
    }
}

/// Writes `dir/layer-LLL.experts`; `done(params)` after each expert, whose
/// error (a requested stop) ends the layer early.
/// Returns the layer's index entry and the error of its re-quantization.
pub fn convert_layer(
    source: &Source,
    mode: ExpertsMode,
    plan: &LayerPlan,
    format_id: u16,
    dir: &Path,
    jobs: usize,
    done: &(dyn Fn(u64) -> Result<()> + Sync),
) -> Result<(LayerEntry, WeightError)> {
    let n = plan.experts.len() as u32;
    let header = LayerHeader::new(
        plan.layer,
        n,
        format_id,
        plan.d_model as u32,
        plan.d_ff as u32,
        plan.record_len as u64,
    );
    let mut writer = LayerWriter::create(dir, header)?;
    // Source tensors of each expert, and how many experts still need them.
    let keys: Vec<[&str; 3]> = plan
        .experts
        .iter()
        .map(|names| [0, 1, 2].map(|i| source.source_name(&names[i])))
        .collect();
    let mut remaining: HashMap<[&str; 3], usize> = HashMap::new();
    for k in &keys {
        *remaining.entry(*k).or_default() += 1;
    }
    let mut built: HashMap<[&str; 3], Arc<Vec<u8>>> = HashMap::new();
    let window = window(plan, jobs);
    let mut error = WeightError::default();
    let ids: Vec<usize> = (0..plan.experts.len()).collect();
    for chunk in ids.chunks(window) {
        let mut todo: Vec<usize> = Vec::new();
        for &e in chunk {
            if !built.contains_key(&keys[e]) && !todo.iter().any(|&t| keys[t] == keys[e]) {
                todo.push(e);
            }
        }
        let records: Vec<(usize, (Vec<u8>, WeightError))> = todo
            .par_iter()
            .map(|&e| Ok((e, build(source, mode, plan, e)?)))
            .collect::<Result<_>>()?;
        for (e, (record, err)) in records {
            error += err;
            built.insert(keys[e], Arc::new(record));
        }
        for &e in chunk {
            let record = Arc::clone(&built[&keys[e]]);
            writer.push(&record)?;
            let left = remaining.get_mut(&keys[e]).expect("counted above");
            *left -= 1;
            if *left == 0 {
                built.remove(&keys[e]);
            }
            done(plan.expert_params())?;
        }
    }
    Ok((writer.finish()?, error))
}

/// The record of expert `e` with its weights as the source stores them
/// (`--experts native`): what a node running straight from a release reads
/// too, so a release and its native store give the same records.
pub fn native_record(source: &Source, plan: &LayerPlan, e: usize) -> Result<Vec<u8>> {
    let names = plan.experts.get(e).ok_or_else(|| Error::BadTensor {
        path: source.path().to_path_buf(),
        tensor: format!("layer {} expert {e}", plan.layer),
        reason: format!("the layer has {} experts", plan.experts.len()),
    })?;
    let parts = (0..3)
        .map(|i| source.native_matrix(&names[i], plan.formats[i]))
        .collect::<Result<Vec<_>>>()?;
    build_record_raw(
        plan.d_model,
        plan.d_ff,
        [
            (plan.formats[0], &parts[0]),
            (plan.formats[1], &parts[1]),
            (plan.formats[2], &parts[2]),
        ],
    )
    .map_err(|err| Error::BadTensor {
        path: source.path().to_path_buf(),
        tensor: names[0].clone(),
        reason: err.to_string(),
    })
}

/// The record of expert `e`, and its re-quantization error.
fn build(
    source: &Source,
    mode: ExpertsMode,
    plan: &LayerPlan,
    e: usize,
) -> Result<(Vec<u8>, WeightError)> {
    let mut error = WeightError::default();
    let names = &plan.experts[e];
    let shapes = [
        (plan.d_ff, plan.d_model),
        (plan.d_ff, plan.d_model),
        (plan.d_model, plan.d_ff),
    ];
    let kernel_error = |i: usize, e: waste_kernels::Error| Error::BadTensor {
        path: source.path().to_path_buf(),
        tensor: names[i].clone(),
        reason: e.to_string(),
    };
    let record = if mode == ExpertsMode::Native {
        native_record(source, plan, e)?
    } else {
        // One decoded matrix alive at a time.
        let mut q: Vec<Quantized> = Vec::with_capacity(3);
        for i in 0..3 {
            let values = source.load(&names[i])?.into_f32();
            let (rows, cols) = shapes[i];
            let packed = quantize(plan.formats[i], rows, cols, &values)
                .map_err(|err| kernel_error(i, err))?;
            error.sq_error += packed.sq_error;
            error.sq_norm += packed.sq_norm;
            q.push(packed);
        }
        build_record(&q[0], &q[1], &q[2]).map_err(|err| kernel_error(0, err))?
    };
    if record.len() != plan.record_len {
        return Err(Error::BadTensor {
            path: source.path().to_path_buf(),
            tensor: names[0].clone(),
            reason: format!(
                "layer {} expert {e}: record of {} bytes, planned {} (formats {:?})",
                plan.layer,
                record.len(),
                plan.record_len,
                plan.formats.map(Format::name)
            ),
        });
    }
    Ok((record, error))
}
