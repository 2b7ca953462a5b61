//! Node metrics for `GET /metrics` (OpenMetrics text, which Prometheus
//! scrapes): requests by outcome, prompt and generated tokens, time to first
//! token and per-token latency histograms, expert bytes read, the counts
//! behind retention and prefetch accuracy (and both ratios as gauges), the
//! queue, and the requests refused before generating, by reason. One registry per node (no global), so several nodes in one
//! process (tests) stay apart.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::generate::Summary;

/// Counters, gauges and histograms of one node.
#[derive(Debug)]
pub struct NodeMetrics {
    registry: Registry,
    requests: Family<Vec<(String, String)>, Counter>,
    rejected: Family<Vec<(String, String)>, Counter>,
    prompt_tokens: Counter,
    cached_prompt_tokens: Counter,
    generated_tokens: Counter,
    expert_bytes: Counter,
    experts_requested: Counter,
    experts_retained: Counter,
    prefetch_guessed: Counter,
    prefetch_right: Counter,
    retention: Gauge<f64, AtomicU64>,
    prefetch_accuracy: Gauge<f64, AtomicU64>,
    /// Requests waiting for a generation slot.
    pub queued: Gauge,
    /// Requests generating now.
    pub active: Gauge,
    ttft: Histogram,
    token_latency: Histogram,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("waste_node");
        let m = Self {
            requests: Family::default(),
            rejected: Family::default(),
            prompt_tokens: Counter::default(),
            cached_prompt_tokens: Counter::default(),
            generated_tokens: Counter::default(),
            expert_bytes: Counter::default(),
            experts_requested: Counter::default(),
            experts_retained: Counter::default(),
            prefetch_guessed: Counter::default(),
            prefetch_right: Counter::default(),
            retention: Gauge::default(),
            prefetch_accuracy: Gauge::default(),
            queued: Gauge::default(),
            active: Gauge::default(),
            // 10 ms .. ~80 s: a K3 token from disk takes seconds.
            ttft: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            token_latency: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            registry: Registry::default(),
        };
        r.register(
            "requests",
            "Generations by how they ended (stop, length, context, cancelled, error)",
            m.requests.clone(),
        );
        r.register(
            "requests_rejected",
            "Requests refused before generating, by reason (invalid_argument, queue_full, session_busy, model_not_found, unauthenticated, shutting_down)",
            m.rejected.clone(),
        );
        r.register(
            "prompt_tokens",
            "Prompt tokens received",
            m.prompt_tokens.clone(),
        );
        r.register(
            "cached_prompt_tokens",
            "Prompt tokens served from a session's state",
            m.cached_prompt_tokens.clone(),
        );
        r.register(
            "generated_tokens",
            "Tokens generated",
            m.generated_tokens.clone(),
        );
        r.register(
            "expert_bytes_read",
            "Expert bytes read from disk or received from the store",
            m.expert_bytes.clone(),
        );
        r.register(
            "experts_requested",
            "Routed experts the decode steps asked for",
            m.experts_requested.clone(),
        );
        r.register(
            "experts_retained",
            "Of those, already in RAM when asked for",
            m.experts_retained.clone(),
        );
        r.register(
            "prefetch_guessed",
            "Experts the prefetch guessed for decode steps",
            m.prefetch_guessed.clone(),
        );
        r.register(
            "prefetch_right",
            "Of those, used by the layer",
            m.prefetch_right.clone(),
        );
        r.register(
            "retention_ratio",
            "experts_retained / experts_requested so far",
            m.retention.clone(),
        );
        r.register(
            "prefetch_accuracy_ratio",
            "prefetch_right / prefetch_guessed so far",
            m.prefetch_accuracy.clone(),
        );
        r.register(
            "queue_depth",
            "Requests waiting for a generation slot",
            m.queued.clone(),
        );
        r.register(
            "active_requests",
            "Requests generating now",
            m.active.clone(),
        );
        r.register(
            "time_to_first_token_seconds",
            "Time to first token",
            m.ttft.clone(),
        );
        r.register(
            "token_latency_seconds",
            "Time of each decode step",
            m.token_latency.clone(),
        );
        Self { registry: r, ..m }
    }

    /// Counts a generation that ended with `summary`.
    pub fn finished(&self, s: &Summary) {
        let outcome = match s.finish {
            Some(waste_model::FinishReason::Stop) => "stop",
            Some(waste_model::FinishReason::Length) => "length",
            Some(waste_model::FinishReason::Context) => "context",
            Some(waste_model::FinishReason::Cancelled) | None => "cancelled",
        };
        self.count(outcome);
        self.prompt_tokens.inc_by(s.prompt_tokens as u64);
        self.cached_prompt_tokens
            .inc_by(s.cached_prompt_tokens as u64);
        self.generated_tokens.inc_by(s.generated_tokens as u64);
        self.expert_bytes
            .inc_by(s.prefill.bytes_read + s.decode.bytes_read);
        self.experts_requested.inc_by(s.decode.requested);
        self.experts_retained.inc_by(s.decode.retained);
        self.prefetch_guessed.inc_by(s.decode.guessed);
        self.prefetch_right.inc_by(s.decode.guessed_right);
        let ratio = |a: &Counter, b: &Counter| {
            let b = b.get();
            if b > 0 {
                a.get() as f64 / b as f64
            } else {
                0.0
            }
        };
        self.retention
            .set(ratio(&self.experts_retained, &self.experts_requested));
        self.prefetch_accuracy
            .set(ratio(&self.prefetch_right, &self.prefetch_guessed));
        self.ttft.observe(s.time_to_first_token.as_secs_f64());
        for &t in &s.step_seconds {
            self.token_latency.observe(f64::from(t));
        }
    }

    /// Counts a generation that failed.
    pub fn failed(&self) {
        self.count("error");
    }

    /// Counts a request refused with `e`, when `e` is a refusal (not a
    /// failure of the node).
    pub fn rejected(&self, e: &crate::Error) {
        if let Some(reason) = e.rejection() {
            self.rejected_for(reason);
        }
    }

    /// Counts a request refused for `reason`.
    pub fn rejected_for(&self, reason: &str) {
        self.rejected
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    fn count(&self, outcome: &str) {
        self.requests
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_generation_shows_in_the_text() {
        let m = NodeMetrics::new();
        let mut s = Summary {
            prompt_tokens: 7,
            generated_tokens: 3,
            finish: Some(waste_model::FinishReason::Length),
            step_seconds: vec![0.01, 0.02],
            ..Summary::default()
        };
        s.decode.requested = 4;
        s.decode.retained = 1;
        m.finished(&s);
        m.failed();
        m.rejected(&crate::Error::Overloaded {
            running: 1,
            queued: 0,
        });
        m.rejected(&crate::Error::Transport("not a refusal".into()));
        let text = m.render();
        for line in [
            "waste_node_prompt_tokens_total 7",
            "waste_node_generated_tokens_total 3",
            "waste_node_requests_total{outcome=\"length\"} 1",
            "waste_node_requests_total{outcome=\"error\"} 1",
            "waste_node_retention_ratio 0.25",
            "waste_node_requests_rejected_total{reason=\"queue_full\"} 1",
            "waste_node_token_latency_seconds_count 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert_eq!(
            text.matches("requests_rejected_total{").count(),
            1,
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
