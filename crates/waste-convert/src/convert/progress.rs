//! Progress of a long step (a conversion's phases, a backbone load): an
//! indicatif bar per step on stderr with throughput and ETA (drawn only
//! when stderr is a terminal; indicatif hides itself otherwise), or, for
//! scripts that orchestrate conversions (`--progress json`), one JSON
//! object per line on stdout: `{"step", "unit", "done", "total",
//! "per_sec", "elapsed_s", "eta_s", "finished"}`, at most one a second per
//! step and one when it finishes.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a step's JSON line may repeat.
const JSON_EVERY: Duration = Duration::from_secs(1);

static JSON: AtomicBool = AtomicBool::new(false);

/// Reports every later step of this process as JSON lines on stdout
/// instead of bars on stderr.
pub fn report_as_json() {
    JSON.store(true, Ordering::SeqCst);
}

/// Whether steps report as JSON lines.
pub fn json() -> bool {
    JSON.load(Ordering::SeqCst)
}

/// What a bar counts.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Bytes,
    Params,
    /// Tensors and records checked.
    Items,
}

/// One step's bar.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    step: String,
    unit: Unit,
    /// JSON mode: when the last line was printed.
    printed: Option<Mutex<Instant>>,
}

impl Progress {
    pub fn new(len: u64, unit: Unit, label: &str) -> Self {
        let template = match unit {
            Unit::Bytes => {
                "{prefix:>9} [{elapsed_precise}] [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}"
            }
            Unit::Items => {
                "{prefix:>9} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} ETA {eta}"
            }
            Unit::Params => {
                "{prefix:>9} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} params {per_sec} ETA {eta} {msg}"
            }
        };
        let json = json();
        let bar = if json {
            ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden())
        } else {
            ProgressBar::new(len)
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("the templates above are valid")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        if !json {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        let printed = json.then(|| Mutex::new(Instant::now() - JSON_EVERY));
        Self {
            bar,
            step: label.to_string(),
            unit,
            printed,
        }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.json_line(false);
    }

    /// Sets the position and the length (for callers that learn it late).
    pub fn set(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        self.json_line(false);
    }

    /// In JSON mode, prints the step's line if a second has passed since the
    /// last one, or when it finishes.
    fn json_line(&self, finished: bool) {
        let Some(printed) = &self.printed else {
            return;
        };
        let mut last = printed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !finished && last.elapsed() < JSON_EVERY {
            return;
        }
        *last = Instant::now();
        let (done, total) = (self.bar.position(), self.bar.length().unwrap_or(0));
        let per_sec = self.bar.per_sec();
        let eta = if finished || per_sec <= 0.0 {
            0.0
        } else {
            total.saturating_sub(done) as f64 / per_sec
        };
        let line = serde_json::json!({
            "step": self.step,
            "unit": match self.unit {
                Unit::Bytes => "bytes",
                Unit::Params => "params",
                Unit::Items => "items",
            },
            "done": done,
            "total": total,
            "per_sec": per_sec.round(),
            "elapsed_s": (self.bar.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "eta_s": eta.round(),
            "finished": finished,
        });
        // Progress is advisory: a closed stdout must not fail the work.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    pub fn finish(&self) {
        self.bar.finish();
        self.json_line(true);
    }

    /// Removes the bar from the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}
