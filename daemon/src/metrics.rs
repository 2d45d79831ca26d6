//! Process-wide counters and the Prometheus text rendering of `/metrics`.
//!
//! Owns the counters the ingest paths bump and the text format; per-device and per-run
//! gauges are read from the store at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::db::{Store, StoreError};

/// Counters shared by the writer, the TCP listener and the HTTP API.
#[derive(Default)]
pub struct Metrics {
    pub events_total: AtomicU64,
    pub batches_total: AtomicU64,
    pub duplicate_batches_total: AtomicU64,
    pub frame_bytes_total: AtomicU64,
    pub commits_total: AtomicU64,
    pub commit_errors_total: AtomicU64,
    pub connections_open: AtomicI64,
    pub connections_total: AtomicU64,
    pub connections_rejected_total: AtomicU64,
    /// Batches waiting for the writer.
    pub queue_depth: AtomicI64,
    /// Events per second over the last second (updated by a ticker).
    pub events_per_second: AtomicU64,
}

impl Metrics {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders all metrics in the Prometheus text exposition format (version 0.0.4).
pub async fn render(m: &Metrics, store: &Store) -> Result<String, StoreError> {
    let mut o = String::new();
    let mut counter = |name: &str, help: &str, kind: &str, v: String| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    };
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    counter(
        "memwatch_ingest_events_total",
        "Events committed.",
        "counter",
        g(&m.events_total),
    );
    counter(
        "memwatch_ingest_batches_total",
        "Batches committed.",
        "counter",
        g(&m.batches_total),
    );
    counter(
        "memwatch_ingest_duplicate_batches_total",
        "Resent batches acknowledged without storing them again.",
        "counter",
        g(&m.duplicate_batches_total),
    );
    counter(
        "memwatch_ingest_frame_bytes_total",
        "Frame bytes received.",
        "counter",
        g(&m.frame_bytes_total),
    );
    counter(
        "memwatch_ingest_commits_total",
        "Transactions committed.",
        "counter",
        g(&m.commits_total),
    );
    counter(
        "memwatch_ingest_commit_errors_total",
        "Transactions that failed.",
        "counter",
        g(&m.commit_errors_total),
    );
    counter(
        "memwatch_ingest_events_per_second",
        "Events committed during the last second.",
        "gauge",
        g(&m.events_per_second),
    );
    counter(
        "memwatch_ingest_queue_depth",
        "Batches waiting for the writer.",
        "gauge",
        m.queue_depth.load(Ordering::Relaxed).to_string(),
    );
    counter(
        "memwatch_ingest_connections_open",
        "Open agent connections.",
        "gauge",
        m.connections_open.load(Ordering::Relaxed).to_string(),
    );
    counter(
        "memwatch_ingest_connections_rejected_total",
        "Connections closed because of bad input or a bad token.",
        "counter",
        g(&m.connections_rejected_total),
    );

    let _ = writeln!(
        o,
        "# HELP memwatch_device_used_bytes Latest sampled device memory use (memory=vram|gtt).\n\
         # TYPE memwatch_device_used_bytes gauge\n\
         # HELP memwatch_device_total_bytes Latest sampled device memory size.\n\
         # TYPE memwatch_device_total_bytes gauge"
    );
    for n in store.nodes().await? {
        let all = n
            .devices
            .iter()
            .flat_map(|d| d.samples.iter())
            .chain(n.samples.iter());
        for s in all {
            let labels = format!(
                "node=\"{}\",device=\"{}\",memory=\"{}\"",
                esc(&n.name),
                s.device,
                s.memory
            );
            let _ = writeln!(o, "memwatch_device_used_bytes{{{labels}}} {}", s.used_bytes);
            let _ = writeln!(
                o,
                "memwatch_device_total_bytes{{{labels}}} {}",
                s.total_bytes
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP memwatch_run_live_bytes Live bytes per run and device (newest 100 runs).\n\
         # TYPE memwatch_run_live_bytes gauge\n\
         # HELP memwatch_run_peak_bytes Peak live bytes per run and device.\n\
         # TYPE memwatch_run_peak_bytes gauge"
    );
    let devices: Vec<RunDeviceGauge> = sqlx::query_as(
        "SELECT d.run_id AS run_id, r.run_key AS run_key, d.device AS device, \
         d.live_bytes AS live_bytes, d.peak_bytes AS peak_bytes FROM run_devices d \
         JOIN runs r ON r.id = d.run_id WHERE d.run_id IN (SELECT id FROM runs ORDER BY id DESC LIMIT $1) \
         ORDER BY d.run_id, d.device",
    )
    .bind(100i64)
    .fetch_all(&store.pool)
    .await?;
    for d in devices {
        let labels = format!(
            "run=\"{}\",run_key=\"{}\",device=\"{}\"",
            d.run_id,
            esc(&d.run_key),
            d.device
        );
        let _ = writeln!(o, "memwatch_run_live_bytes{{{labels}}} {}", d.live_bytes);
        let _ = writeln!(o, "memwatch_run_peak_bytes{{{labels}}} {}", d.peak_bytes);
    }
    let dropped: Vec<RunDropped> =
        sqlx::query_as("SELECT id, dropped_events FROM runs ORDER BY id DESC LIMIT 100")
            .fetch_all(&store.pool)
            .await?;
    let _ = writeln!(
        o,
        "# HELP memwatch_run_dropped_events Events the shims reported dropping, per run.\n\
         # TYPE memwatch_run_dropped_events gauge"
    );
    for r in &dropped {
        let _ = writeln!(
            o,
            "memwatch_run_dropped_events{{run=\"{}\"}} {}",
            r.id, r.dropped_events
        );
    }
    Ok(o)
}

/// Live and peak bytes of one device of a run.
#[derive(sqlx::FromRow)]
struct RunDeviceGauge {
    run_id: i64,
    run_key: String,
    device: i64,
    live_bytes: i64,
    peak_bytes: i64,
}

/// A run's dropped-events count.
#[derive(sqlx::FromRow)]
struct RunDropped {
    id: i64,
    dropped_events: i64,
}
