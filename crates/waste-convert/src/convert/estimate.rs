//! Before converting: the output's size, a time estimate, the RAM the model
//! will need to run, and the disk check that refuses a conversion the
//! destination cannot hold. The quantization rate is measured on this
//! machine (one core, a small matrix of the plan's formats) rather than
//! assumed; IO is assumed to run at [`IO_BYTES_PER_SEC`].

use std::fmt;
use std::path::Path;
use std::time::Instant;

use waste_kernels::quantize;

use super::options::ExpertsMode;
use super::plan::Plan;
use crate::error::{Error, Result};

/// Read plus write throughput assumed for the time estimate.
pub const IO_BYTES_PER_SEC: f64 = 1.0e9;
/// Free space left over on top of the output, for the journal and metadata.
pub const DISK_MARGIN: u64 = 64 << 20;

/// What a conversion will produce and cost.
#[derive(Debug, Clone)]
pub struct Estimate {
    pub backbone_bytes: u64,
    pub experts_bytes: u64,
    pub backbone_params: u64,
    pub expert_params: u64,
    /// RAM the backbone takes once loaded to run the model.
    pub backbone_ram_bytes: u64,
    /// Expert record bytes one token reads at the model's top-k.
    pub expert_bytes_per_token: u64,
    /// Bytes of the source's files (read once).
    pub source_bytes: u64,
    /// Measured quantization rate of one core, params/s (None: no quantizer runs).
    pub params_per_sec_per_core: Option<f64>,
    pub jobs: usize,
    pub seconds: f64,
}

impl Estimate {
    pub fn new(plan: &Plan, mode: ExpertsMode, source_bytes: u64, jobs: usize) -> Self {
        let rate = match mode {
            ExpertsMode::Recipe(_) | ExpertsMode::Uniform(_) => {
                plan.layers.first().map(|l| measure_rate(&l.formats))
            }
            _ => None,
        };
        let out = plan.backbone_bytes() + plan.experts_bytes();
        let compute = rate.map_or(0.0, |r| {
            plan.expert_params() as f64 / (r * jobs.max(1) as f64)
        });
        Self {
            backbone_bytes: plan.backbone_bytes(),
            experts_bytes: plan.experts_bytes(),
            backbone_params: plan.backbone_params,
            expert_params: plan.expert_params(),
            backbone_ram_bytes: plan.backbone_ram_bytes,
            expert_bytes_per_token: plan.expert_bytes_per_token(),
            source_bytes,
            params_per_sec_per_core: rate,
            jobs,
            seconds: compute + (source_bytes + out) as f64 / IO_BYTES_PER_SEC,
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.backbone_bytes + self.experts_bytes
    }
}

/// params/s of one core quantizing a 64 x 2048 matrix in each of `formats`.
fn measure_rate(formats: &[waste_kernels::Format; 3]) -> f64 {
    let (rows, cols) = (64, 2048);
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i as f32) * 0.618).sin() * 0.02)
        .collect();
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build();
    // The best of three: a single timing can land in another process's
    // burst of work (the page cache writing back a source just made).
    let run = || {
        (0..3)
            .map(|_| {
                let start = Instant::now();
                for f in formats {
                    // A format without a quantizer never reaches a recipe.
                    let _ = quantize(*f, rows, cols, &w);
                }
                (3 * rows * cols) as f64 / start.elapsed().as_secs_f64().max(1e-9)
            })
            .fold(0f64, f64::max)
    };
    match one {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    }
}

/// `1.5 GiB`-style sizes.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} G", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bpw = |bytes: u64, params: u64| 8.0 * bytes as f64 / params.max(1) as f64;
        writeln!(
            f,
            "output:   {} (backbone {} for {} params, {:.2} bits/weight; experts {} for {} params, {:.3} bits/weight)",
            human_bytes(self.total_bytes()),
            human_bytes(self.backbone_bytes),
            human_count(self.backbone_params),
            bpw(self.backbone_bytes, self.backbone_params),
            human_bytes(self.experts_bytes),
            human_count(self.expert_params),
            bpw(self.experts_bytes, self.expert_params),
        )?;
        let rate = match self.params_per_sec_per_core {
            Some(r) => format!(
                ", quantizing at {}params/s per core measured",
                human_count(r as u64)
            ),
            None => String::new(),
        };
        writeln!(
            f,
            "time:     about {:.0} s with {} jobs (reading {}{rate})",
            self.seconds,
            self.jobs,
            human_bytes(self.source_bytes),
        )?;
        write!(
            f,
            "to run:   {} of RAM for the backbone (plus KV cache and any expert cache); {} of expert reads per token at top-k",
            human_bytes(self.backbone_ram_bytes),
            human_bytes(self.expert_bytes_per_token),
        )
    }
}

/// Bytes already in `dir` (a resumed conversion's finished files).
pub fn bytes_in(dir: &Path) -> u64 {
    let Ok(entries) = fs_err::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(std::result::Result::ok)
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                bytes_in(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

/// Refuses when the file system holding `out` lacks room for `total` bytes
/// (minus what a resumed run already wrote there); returns the free bytes.
pub fn check_disk(out: &Path, total: u64) -> Result<u64> {
    let probe = out
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let available = waste_format::io::available_bytes(probe)?;
    let needed = total.saturating_sub(bytes_in(out)) + DISK_MARGIN;
    if needed > available {
        return Err(Error::NoSpace {
            path: probe.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(available)
}
