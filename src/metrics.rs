//! The rates operators watch, as Prometheus counters and histograms: spawns
//! by connector and outcome, denials by reason, the daemon's round trip per
//! method, the relay's connections and bytes, and how long an audit record
//! takes to become durable. One registry per process, counted from where
//! each event happens; the daemon writes it for the node exporter's
//! textfile collector (`[server] metrics_file`) and answers it on its
//! socket (`metrics`). Label values come from closed sets (outcomes,
//! reasons, methods) or from the connectors the operator serves, so the
//! number of series stays bounded.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts,
    Registry, TextEncoder,
};

/// Every metric, registered once.
struct Metrics {
    registry: Registry,
    spawns: IntCounterVec,
    denials: IntCounterVec,
    round_trip: HistogramVec,
    relay_connections: IntCounterVec,
    relay_bytes: IntCounterVec,
    audit_flush: Histogram,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Histogram buckets from 0.25 ms to about 8 s, doubling.
fn latency_buckets() -> Vec<f64> {
    exponential_buckets(0.000_25, 2.0, 16).unwrap_or_default()
}

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let vec = IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
            registry
                .register(Box::new(vec.clone()))
                .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
            vec
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(latency_buckets());
            let vec = HistogramVec::new(opts, labels)
                .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
            registry
                .register(Box::new(vec.clone()))
                .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
            vec
        };
        let spawns = counter(
            "spawnd_spawns_total",
            "Spawns that ran, by connector and how they ended.",
            &["connector", "outcome"],
        );
        let denials = counter(
            "spawnd_denials_total",
            "Requests refused, by denial reason.",
            &["reason"],
        );
        let round_trip = histogram(
            "spawnd_request_duration_seconds",
            "From a request's arrival to its answer, by method.",
            &["method"],
        );
        let relay_connections = counter(
            "spawnd_relay_connections_total",
            "Connections a sandboxed program opened, relayed or refused (by reason).",
            &["outcome"],
        );
        let relay_bytes = counter(
            "spawnd_relay_bytes_total",
            "Bytes the relay carried, by direction.",
            &["direction"],
        );
        let audit_flush = Histogram::with_opts(
            HistogramOpts::new(
                "spawnd_audit_flush_seconds",
                "From an audit record's write to its being durable.",
            )
            .buckets(latency_buckets()),
        )
        .unwrap_or_else(|e| unreachable!("metric spawnd_audit_flush_seconds: {e}"));
        registry
            .register(Box::new(audit_flush.clone()))
            .unwrap_or_else(|e| unreachable!("metric spawnd_audit_flush_seconds: {e}"));
        Metrics {
            registry,
            spawns,
            denials,
            round_trip,
            relay_connections,
            relay_bytes,
            audit_flush,
        }
    }
}

/// How a spawn that ran ended, as `spawnd_spawns_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The program exited 0.
    Succeeded,
    /// The program exited with another code.
    Failed,
    /// Ended by a signal, a limit, a timeout or a kill.
    Killed,
    /// The sandbox could not be set up: nothing ran.
    SetupFailed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Killed => "killed",
            Outcome::SetupFailed => "setup_failed",
        }
    }
}

/// A spawn of `connector` ended.
pub(crate) fn spawn_ended(connector: &str, outcome: Outcome) {
    METRICS
        .spawns
        .with_label_values(&[connector, outcome.label()])
        .inc();
}

/// A request was refused with `reason` (SPEC §10's names).
pub(crate) fn denied(reason: &str) {
    METRICS.denials.with_label_values(&[reason]).inc();
}

/// The daemon answered a `method` request `elapsed` after it arrived.
pub(crate) fn answered(method: &str, elapsed: Duration) {
    METRICS
        .round_trip
        .with_label_values(&[method])
        .observe(elapsed.as_secs_f64());
}

/// The relay ended a connection: `outcome` is `relayed` or the refusal's
/// reason; the bytes it carried each way.
pub(crate) fn relay_connection(outcome: &str, to_destination: u64, to_program: u64) {
    METRICS
        .relay_connections
        .with_label_values(&[outcome])
        .inc();
    METRICS
        .relay_bytes
        .with_label_values(&["to_destination"])
        .inc_by(to_destination);
    METRICS
        .relay_bytes
        .with_label_values(&["to_program"])
        .inc_by(to_program);
}

/// An audit record became durable `elapsed` after it was written.
pub(crate) fn audit_flushed(elapsed: Duration) {
    METRICS.audit_flush.observe(elapsed.as_secs_f64());
}

/// Every metric in Prometheus's text format (0.0.4), as the node
/// exporter's textfile collector and a scrape read it.
pub(crate) fn render() -> String {
    let mut out = Vec::new();
    // Encoding into a Vec fails only on a malformed family, which the
    // registry never holds; an empty text is what is left then.
    let _ = TextEncoder::new().encode(&METRICS.registry.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `series` (a line's name and labels) in `text`.
    fn value(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }

    /// Other tests of this process count too (audit records, the relay's
    /// bytes): what this test adds is read as a difference, under labels
    /// no other test uses.
    #[test]
    fn every_event_is_counted_under_its_labels() {
        let flushes = "spawnd_audit_flush_seconds_count";
        let sent = "spawnd_relay_bytes_total{direction=\"to_destination\"}";
        let received = "spawnd_relay_bytes_total{direction=\"to_program\"}";
        let before = render();
        spawn_ended("local://t/metrics", Outcome::Succeeded);
        spawn_ended("local://t/metrics", Outcome::Killed);
        denied("metrics_test_reason");
        answered("metrics_test_method", Duration::from_millis(3));
        relay_connection("metrics_test_relayed", 10, 20);
        audit_flushed(Duration::from_micros(700));
        let text = render();
        for line in [
            "spawnd_spawns_total{connector=\"local://t/metrics\",outcome=\"succeeded\"} 1",
            "spawnd_spawns_total{connector=\"local://t/metrics\",outcome=\"killed\"} 1",
            "spawnd_denials_total{reason=\"metrics_test_reason\"} 1",
            "spawnd_request_duration_seconds_count{method=\"metrics_test_method\"} 1",
            "spawnd_relay_connections_total{outcome=\"metrics_test_relayed\"} 1",
            "# TYPE spawnd_spawns_total counter",
            "# TYPE spawnd_request_duration_seconds histogram",
            "# TYPE spawnd_audit_flush_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        assert!(value(&text, flushes) > value(&before, flushes), "{text}");
        assert!(value(&text, sent) >= value(&before, sent) + 10, "{text}");
        assert!(
            value(&text, received) >= value(&before, received) + 20,
            "{text}"
        );
        // 3 ms falls in the 4 ms bucket, not the 2 ms one.
        assert!(text.contains(
            "spawnd_request_duration_seconds_bucket{method=\"metrics_test_method\",le=\"0.004\"} 1"
        ));
        assert!(text.contains(
            "spawnd_request_duration_seconds_bucket{method=\"metrics_test_method\",le=\"0.002\"} 0"
        ));
    }
}
