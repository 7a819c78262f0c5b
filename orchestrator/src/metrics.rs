//! Prometheus metrics (the `prometheus-client` crate): HTTP requests, sandbox creations and
//! removals, live sandboxes, the warm pool and open proxy sessions. Rendered as text at
//! `GET /metrics`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why a sandbox went away (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Deleted,
    Idle,
    Lifetime,
    Failed,
    Orphan,
    Lost,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Idle => "idle",
            Self::Lifetime => "lifetime",
            Self::Failed => "failed",
            Self::Orphan => "orphan",
            Self::Lost => "lost",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The route template (`/v1/sandboxes/{id}`), never the raw path.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreateLabels {
    /// `cold` or `pool`.
    pub source: String,
    /// `ok` or `failed`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `api`, `vnc` or `cdp`.
    pub kind: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub creates: Family<CreateLabels, Counter>,
    pub create_seconds: Family<SourceLabels, Histogram, fn() -> Histogram>,
    pub ended: Family<ReasonLabels, Counter>,
    pub sandboxes_live: Gauge,
    /// Paused sandboxes: frozen, their memory still held.
    pub sandboxes_paused: Gauge,
    /// Hibernated sandboxes: no container, their home kept on disk.
    pub sandboxes_hibernated: Gauge,
    pub pool_ready: Gauge,
    pub proxy_sessions: Family<KindLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agentbox");
        let http_requests = Family::<HttpLabels, Counter>::default();
        let http_seconds =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let creates = Family::<CreateLabels, Counter>::default();
        let create_seconds =
            Family::<SourceLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let ended = Family::<ReasonLabels, Counter>::default();
        let sandboxes_live = Gauge::default();
        let sandboxes_paused = Gauge::default();
        let sandboxes_hibernated = Gauge::default();
        let pool_ready = Gauge::default();
        let proxy_sessions = Family::<KindLabels, Gauge>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered",
            http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            http_seconds.clone(),
        );
        registry.register(
            "sandbox_creates",
            "Sandbox creations by source and outcome",
            creates.clone(),
        );
        registry.register(
            "sandbox_create_duration_seconds",
            "Time from a create request to a ready sandbox",
            create_seconds.clone(),
        );
        registry.register(
            "sandboxes_ended",
            "Sandboxes removed, by reason",
            ended.clone(),
        );
        registry.register(
            "sandboxes_live",
            "Ready sandboxes handed out",
            sandboxes_live.clone(),
        );
        registry.register(
            "sandboxes_paused",
            "Paused sandboxes (frozen, their memory still held)",
            sandboxes_paused.clone(),
        );
        registry.register(
            "sandboxes_hibernated",
            "Hibernated sandboxes (no container, their home kept on disk)",
            sandboxes_hibernated.clone(),
        );
        registry.register(
            "pool_ready",
            "Ready sandboxes waiting in the warm pool",
            pool_ready.clone(),
        );
        registry.register(
            "proxy_sessions",
            "Open proxied WebSocket sessions",
            proxy_sessions.clone(),
        );
        Self {
            registry,
            http_requests,
            http_seconds,
            creates,
            create_seconds,
            ended,
            sandboxes_live,
            sandboxes_paused,
            sandboxes_hibernated,
            pool_ready,
            proxy_sessions,
        }
    }

    pub fn observe_create(&self, source: &str, outcome: &str, took: Duration) {
        self.creates
            .get_or_create(&CreateLabels {
                source: source.into(),
                outcome: outcome.into(),
            })
            .inc();
        if outcome == "ok" {
            self.create_seconds
                .get_or_create(&SourceLabels {
                    source: source.into(),
                })
                .observe(took.as_secs_f64());
        }
    }

    pub fn sandbox_ended(&self, reason: EndReason) {
        self.ended
            .get_or_create(&ReasonLabels {
                reason: reason.as_str().into(),
            })
            .inc();
    }

    pub fn observe_http(&self, method: &str, route: &str, status: u16, took: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels {
                method: method.into(),
                route: route.into(),
                status,
            })
            .inc();
        self.http_seconds
            .get_or_create(&RouteLabels {
                route: route.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// A gauge counting open sessions of one kind.
    pub fn session(&self, kind: &str) -> SessionGauge {
        let gauge = self
            .proxy_sessions
            .get_or_create(&KindLabels { kind: kind.into() })
            .clone();
        gauge.inc();
        SessionGauge(gauge)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Decrements its gauge when dropped.
pub struct SessionGauge(Gauge);

impl Drop for SessionGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let metrics = Metrics::new();
        metrics.observe_create("cold", "ok", Duration::from_millis(1500));
        metrics.sandbox_ended(EndReason::Idle);
        let session = metrics.session("vnc");
        let text = metrics.render();
        assert!(
            text.contains("agentbox_sandbox_creates_total{source=\"cold\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agentbox_sandboxes_ended_total{reason=\"idle\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agentbox_proxy_sessions{kind=\"vnc\"} 1"),
            "{text}"
        );
        drop(session);
        assert!(
            metrics
                .render()
                .contains("agentbox_proxy_sessions{kind=\"vnc\"} 0")
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
