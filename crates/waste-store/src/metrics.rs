//! Store metrics: bytes and records served, requests by outcome, reads in
//! flight (from the IO engine), and latency histograms of whole requests.
//! Plain atomics, rendered in the Prometheus text format by
//! [`Metrics::render`] and logged periodically by the server; no global
//! registry, so several stores in one process (tests) stay separate.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use waste_format::io::EngineStats;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cum}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cum}");
    }
}

/// Counters of one store.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Record bytes handed to the gRPC layer (fetch) or applied (compute).
    pub bytes_served: AtomicU64,
    pub records_served: AtomicU64,
    pub fetch_requests: AtomicU64,
    pub compute_requests: AtomicU64,
    /// Requests refused: bad requests, overload, shutdown.
    pub rejected: AtomicU64,
    /// Requests that failed on the store's side (data loss, internal).
    pub failed: AtomicU64,
    /// Records that failed their checksum (or came back short) when read.
    pub corrupt_records: AtomicU64,
    pub fetch_latency: Histogram,
    pub compute_latency: Histogram,
}

impl Metrics {
    /// The Prometheus text exposition of every counter, plus the engine's.
    pub fn render(&self, engine: &EngineStats, pool_in_use: usize) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, kind, help, v) in [
            (
                "waste_store_bytes_served_total",
                "counter",
                "Record bytes served.",
                load(&self.bytes_served),
            ),
            (
                "waste_store_records_served_total",
                "counter",
                "Records served.",
                load(&self.records_served),
            ),
            (
                "waste_store_fetch_requests_total",
                "counter",
                "FetchExperts calls.",
                load(&self.fetch_requests),
            ),
            (
                "waste_store_compute_requests_total",
                "counter",
                "ComputeExperts calls.",
                load(&self.compute_requests),
            ),
            (
                "waste_store_rejected_total",
                "counter",
                "Requests refused (bad, overloaded, shutting down).",
                load(&self.rejected),
            ),
            (
                "waste_store_failed_total",
                "counter",
                "Requests failed by the store (data loss, internal).",
                load(&self.failed),
            ),
            (
                "waste_store_corrupt_records_total",
                "counter",
                "Records that failed their checksum when read (DATA_LOSS).",
                load(&self.corrupt_records),
            ),
            (
                "waste_store_disk_bytes_read_total",
                "counter",
                "Bytes read from disk.",
                load(&engine.bytes),
            ),
            (
                "waste_store_reads_in_flight",
                "gauge",
                "Reads issued and not returned.",
                load(&engine.in_flight),
            ),
            (
                "waste_store_reads_queued",
                "gauge",
                "Reads waiting for an IO thread.",
                load(&engine.queued),
            ),
            (
                "waste_store_buffer_bytes_in_use",
                "gauge",
                "Bytes of read buffers alive.",
                pool_in_use as u64,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        self.fetch_latency.render(
            "waste_store_fetch_seconds",
            "FetchExperts latency, request to last chunk.",
            &mut out,
        );
        self.compute_latency.render(
            "waste_store_compute_seconds",
            "ComputeExperts latency.",
            &mut out,
        );
        out
    }

    /// One line for the log.
    pub fn summary(&self, engine: &EngineStats) -> String {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "served {} records / {:.2} GB, {} fetches, {} computes, {} rejected, {} failed, {} reads in flight",
            load(&self.records_served),
            load(&self.bytes_served) as f64 / 1e9,
            load(&self.fetch_requests),
            load(&self.compute_requests),
            load(&self.rejected),
            load(&self.failed),
            load(&engine.in_flight),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.bytes_served.fetch_add(42, Ordering::Relaxed);
        m.fetch_latency.observe(Duration::from_millis(3));
        m.fetch_latency.observe(Duration::from_secs(60));
        let text = m.render(&EngineStats::default(), 0);
        assert!(text.contains("waste_store_bytes_served_total 42"));
        assert!(text.contains("waste_store_fetch_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("waste_store_fetch_seconds_bucket{le=\"+Inf\"} 2"));
        assert_eq!(m.fetch_latency.count(), 2);
    }
}
