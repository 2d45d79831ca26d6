//! The overview page: nodes with their devices' latest memory samples and a sparkline
//! of the last hour, the newest runs, and the processes still running.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::response::Response;

use super::model::RunRow;
use super::sql;
use super::views::{DeviceView, MemView, NodeView, Overview, RunListRow};
use crate::app::error::AppError;
use crate::app::page::html;
use crate::app::state::AppState;
use crate::incidents::is_oom;
use crate::render::{fmt, page_charts};

fn device_peak(r: &RunRow) -> (i64, String) {
    match r.devices.iter().max_by_key(|d| d.peak_bytes) {
        Some(d) if r.devices.len() > 1 => (d.peak_bytes, format!("GPU {}", d.device)),
        Some(d) => (d.peak_bytes, String::new()),
        None => (0, String::new()),
    }
}

pub async fn overview(State(st): State<AppState>) -> Result<Response, AppError> {
    let nodes = st.store.nodes().await?;
    let runs = st.store.runs(100).await?;
    let oom_runs: BTreeSet<i64> = st
        .store
        .incidents(None, 10_000)
        .await?
        .iter()
        .filter(|i| is_oom(i.result))
        .map(|i| i.run_id)
        .collect();
    let mut rows = Vec::with_capacity(runs.len());
    for r in &runs {
        let (peak, peak_device) = device_peak(r);
        rows.push(RunListRow {
            id: r.id,
            key: r.run_key.clone(),
            node: r.node.clone(),
            started: fmt::wall(r.wall_anchor_unix_ns),
            duration: fmt::duration(r.duration_ns),
            events: r.event_count,
            peak: fmt::bytes(peak),
            peak_device,
            failures: r.devices.iter().map(|d| d.failed_count).sum(),
            oom: oom_runs.contains(&r.id),
            active: sql::run_active(&st.store, r.id).await?,
            dropped: r.dropped_events,
        });
    }
    let ids = st.store.node_ids().await?;
    let mut views = Vec::with_capacity(nodes.len());
    for n in nodes {
        let node_id = ids.get(&n.name).copied().unwrap_or(-1);
        let mut devices = Vec::with_capacity(n.devices.len());
        for d in n.devices {
            let mut mems = Vec::with_capacity(d.samples.len());
            for s in &d.samples {
                let code = match s.memory {
                    "vram" => 0,
                    "gtt" => 1,
                    _ => 2,
                };
                // The last hour of this memory's samples, on the node's own clock.
                let hist = st
                    .store
                    .sample_history(node_id, d.ordinal, code, s.ts_ns - 3_600_000_000_000, 240)
                    .await?;
                let (spark, spark_note) = if hist.len() >= 2 {
                    let svg = page_charts::sparkline(260, 40, &hist).map_err(AppError::internal)?;
                    let hi = hist.iter().map(|p| p.1).max().unwrap_or(0);
                    let span = hist.last().map_or(0, |l| l.0) - hist.first().map_or(0, |f| f.0);
                    (
                        svg,
                        format!("last {}: highest {}", fmt::duration(span), fmt::bytes(hi)),
                    )
                } else {
                    (String::new(), String::new())
                };
                mems.push(MemView {
                    label: match s.memory {
                        "vram" => "VRAM",
                        "gtt" => "GTT",
                        _ => "other",
                    },
                    used: fmt::bytes(s.used_bytes),
                    total: fmt::bytes(s.total_bytes),
                    pct_int: if s.total_bytes > 0 {
                        (s.used_bytes.saturating_mul(100) / s.total_bytes).clamp(0, 100)
                    } else {
                        0
                    },
                    source: s.source.clone(),
                    spark,
                    spark_note,
                });
            }
            devices.push(DeviceView {
                ordinal: d.ordinal,
                name: d.name,
                vendor: d.vendor,
                total: fmt::bytes(d.total_bytes),
                mems,
            });
        }
        views.push(NodeView {
            name: n.name,
            last_seen: fmt::wall(n.last_seen_unix_ns),
            devices,
        });
    }
    let nodes = views;
    // Processes with no recorded end whose node reported in the last 10 minutes.
    let running = st.store.running_processes(600_000_000_000).await?;
    html(&Overview {
        db_hint: "memwatch.db".into(),
        nodes,
        runs: rows,
        running,
    })
}
