//! The overview page: nodes with their devices' latest memory samples and a sparkline
//! of the last hour, the newest runs, and the processes still running.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;

use super::identity;
use super::model::RunRow;
use super::outcome;
use super::sql;
use super::views::{DeviceView, JobView, MemView, NodeView, Overview, RunListRow};
use crate::app::error::AppError;
use crate::app::page::html;
use crate::app::state::AppState;
use crate::incidents::is_oom;
use crate::render::{fmt, page_charts};

fn device_peak(r: &RunRow) -> (i64, String) {
    let shown: Vec<_> = r.devices.iter().filter(|d| d.shown()).collect();
    match shown.iter().max_by_key(|d| d.peak_bytes) {
        Some(d) if shown.len() > 1 => (d.peak_bytes, d.label()),
        Some(d) => (d.peak_bytes, String::new()),
        None => (0, String::new()),
    }
}

pub async fn overview(State(st): State<AppState>) -> Result<Response, AppError> {
    let nodes = st.store.nodes().await?;
    let runs = st.store.runs(100).await?;
    let mut oom_runs: BTreeMap<i64, usize> = BTreeMap::new();
    for i in st
        .store
        .incidents(None, 10_000)
        .await?
        .iter()
        .filter(|i| is_oom(i))
    {
        *oom_runs.entry(i.run_id).or_default() += 1;
    }
    let heads: Vec<(i64, String, String, i64, i64)> = runs
        .iter()
        .map(|r| {
            (
                r.id,
                r.run_key.clone(),
                r.node.clone(),
                r.wall_anchor_unix_ns,
                r.created_unix_ns,
            )
        })
        .collect();
    let idents = st.store.identities(&heads).await?;
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    let verdicts = st.store.diagnosis_heads(&ids).await?;
    let job_groups = identity::jobs(&idents);
    let job_of = |id: i64| job_groups.iter().position(|g| g.contains(&id));
    let mut rows = Vec::with_capacity(runs.len());
    for r in &runs {
        let (peak, peak_device) = device_peak(r);
        let ident = idents.get(&r.id);
        let verdict = verdicts.get(&r.id);
        let devices: Vec<i64> = r.devices.iter().map(|d| d.device).collect();
        let end = r.duration_ns.max(0) as u64 + 1;
        let growing = crate::framework::run_growing(&st.store, r.id, &devices, end)
            .await?
            .map(|g| crate::framework::growing_label(&g))
            .unwrap_or_default();
        let ended = outcome::decide(&outcome::Facts {
            active: sql::run_active(&st.store, r.id).await?,
            exits: outcome::exits(&st.store, r.id).await?,
            any_oom: oom_runs.contains_key(&r.id),
            diagnosis: verdict.map(|d| (d.failed != 0, d.kind.clone())),
        });
        rows.push(RunListRow {
            growing,
            id: r.id,
            title: ident.map_or_else(|| r.run_key.clone(), |i| i.title.clone()),
            subtitle: ident.map_or_else(String::new, |i| i.subtitle.clone()),
            job: job_of(r.id).map_or(0, |j| j + 1),
            verdict: verdict.and_then(|d| d.kind.clone()).unwrap_or_default(),
            verdict_headline: verdict.map_or_else(String::new, |d| d.headline.clone()),
            node: crate::snapshot::machine_of(&st.store, r.id, &r.node).await?,
            started: ident.map_or_else(
                || fmt::wall(r.wall_anchor_unix_ns),
                |i| fmt::wall(i.started_unix_ns),
            ),
            duration: fmt::duration(r.duration_ns),
            events: r.event_count,
            peak: fmt::bytes(peak),
            peak_device,
            failures: r.devices.iter().map(|d| d.failed_count).sum(),
            status: outcome::badge(&ended),
            tone: outcome::tone(&ended),
            dropped: r.dropped_events,
        });
    }
    let ids = st.store.node_ids().await?;
    let mut views = Vec::with_capacity(nodes.len());
    for n in nodes {
        let node_id = ids.get(&n.name).copied().unwrap_or(-1);
        let mut devices = Vec::with_capacity(n.devices.len());
        // A device no driver described (no name, no memory, no samples: an imported
        // snapshot names only an ordinal) is not shown; nor a node left with none.
        let real: Vec<_> = n
            .devices
            .into_iter()
            .filter(|d| !(d.name.is_empty() && d.total_bytes <= 0 && d.samples.is_empty()))
            .collect();
        if real.is_empty() && n.samples.is_empty() {
            continue;
        }
        for d in real {
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
                    .device_sample_history(node_id, d.id, code, s.ts_ns - 3_600_000_000_000, 240)
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
                identity: memwatch_wire::DeviceIdentity {
                    uuid: d.uuid,
                    pci_bus_id: d.pci_bus_id,
                }
                .label(),
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
    let mut running: Vec<(i64, String, i64, String, String)> = Vec::new();
    for p in st.store.running_processes(600_000_000_000).await? {
        // Only runs still sending (`sql::run_active`): a finished attach or an imported
        // capture has processes without an exit record too.
        if sql::run_active(&st.store, p.0).await? {
            running.push(p);
        }
    }
    let running: Vec<(i64, String, i64, String, String)> = running
        .into_iter()
        .map(|(id, key, pid, argv, node)| {
            // Titled like the run list (tags, command), not by the machine-made key.
            let title = idents.get(&id).map_or(key, |i| i.title.clone());
            (id, title, pid, argv, node)
        })
        .collect();
    let jobs = job_groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let members = g
                .iter()
                .filter_map(|id| runs.iter().find(|r| r.id == *id))
                .map(|r| {
                    let devs = r
                        .devices
                        .iter()
                        .filter(|d| d.shown())
                        .map(|d| format!("{} {}", d.label(), fmt::bytes(d.peak_bytes)))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (r.id, devs)
                })
                .collect();
            let (node, ppid) = g
                .first()
                .and_then(|id| idents.get(id))
                .and_then(|i| i.launcher.clone())
                .map_or((String::new(), 0), |l| (l.node, l.ppid));
            JobView {
                n: i + 1,
                node,
                ppid,
                title: g
                    .first()
                    .and_then(|id| idents.get(id))
                    .map_or_else(String::new, |i| i.title.clone()),
                members,
            }
        })
        .collect();
    html(&Overview {
        db_hint: "memwatch.db".into(),
        nodes,
        runs: rows,
        jobs,
        running,
        sample_every: format!("{} ms", memwatch_wire::ingest::DEFAULT_SAMPLE_MS),
    })
}
