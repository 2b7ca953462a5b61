//! Progress of a conversion on stderr: an indicatif bar per phase with
//! throughput and ETA (drawn only when stderr is a terminal; indicatif hides
//! itself otherwise), and a log line per finished layer for logs and CI.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// What a bar counts.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Bytes,
    Params,
    /// Tensors and records checked.
    Items,
}

/// One phase's bar.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
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
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("the templates above are valid")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Sets the position and the length (for callers that learn it late).
    pub fn set(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
    }

    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    pub fn finish(&self) {
        self.bar.finish();
    }

    /// Removes the bar from the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}
