//! The Incidents page (every failure and attached log) and the Incident page of an
//! attached log: `memwatch_analysis`'s diagnosis (`log::parse_log` +
//! `log::diagnose::diagnose`) run on what `memwatch import --log/--xla-dump` stored, with
//! the BFC pool's chunk map. `?format=json` gives the data, `?format=png` a chart.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memwatch_analysis::log::{self, diagnose, BfcOom, LogReport};
use serde::Deserialize;

use super::sql::IncidentRow;
use super::views::{IncidentPage, IncidentView, IncidentsPage, OomView};
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::{html, png_of, wants_json, wants_png};
use crate::app::state::AppState;
use crate::render::fmt::{self, bytes_exact as exact, bytes_u64 as b};
use crate::render::page_charts::{self, MapChunk, PAGE_CHART_W as W};
use crate::render::{Cells, Fact};
use crate::xla::{buffer_row, dump_reports};

/// Allocation error codes that mean "out of memory" (hipErrorOutOfMemory = 2,
/// cudaErrorMemoryAllocation = 2, CUDA_ERROR_OUT_OF_MEMORY = 2).
pub(crate) fn is_oom(result: i64) -> bool {
    result == 2
}

pub(crate) fn incident_view(i: &IncidentRow, t0: i64) -> IncidentView {
    let at = (i.ts_ns - t0).max(0) as u64;
    let pad = 50_000_000u64.max(at / 20);
    IncidentView {
        id: i.id,
        run_id: i.run_id,
        node: i.node.clone(),
        at: fmt::duration(at as i64),
        zoom_from: at.saturating_sub(pad),
        zoom_to: at + pad,
        device: i.device,
        api: i.api.clone(),
        size: fmt::bytes(i.size),
        live: fmt::bytes(i.live_bytes),
        result: i.result,
        pid: i.pid,
        tid: i.tid,
    }
}

pub(super) async fn incidents(State(st): State<AppState>) -> Result<Response, AppError> {
    let rows = st.store.incidents(None, 1000).await?;
    let t0: HashMap<i64, i64> = st.store.run_starts(10_000).await?;
    let logs = st
        .store
        .incident_logs()
        .await?
        .into_iter()
        .map(|l| {
            (
                l.id,
                l.source,
                l.run_id,
                l.dump_id.is_some(),
                fmt::wall(l.created_unix_ns),
            )
        })
        .collect();
    html(&IncidentsPage {
        logs,
        rows: rows
            .iter()
            .map(|i| incident_view(i, t0.get(&i.run_id).copied().unwrap_or(0)))
            .collect(),
    })
}

/// `format=json|png`, and which chart of the page `format=png` draws (`oom-1`, ...).
#[derive(Deserialize, Default)]
pub(super) struct LogQ {
    format: Option<String>,
    chart: Option<String>,
}

/// `/incidents/logs/{id}`: the `memwatch log --xla-dump` diagnosis of a stored log.
pub(super) async fn incident_log(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<LogQ>,
) -> Result<Response, AppError> {
    let json = wants_json(q.format.as_deref())?;
    let (row, text) = st.store.incident_log(id).await?.ok_or_else(|| {
        AppError::not_found(format!(
            "There is no stored log #{id}. Attach one with `memwatch import --db DB --log FILE`."
        ))
    })?;
    let mut report = LogReport::default();
    log::parse_log(
        text.as_bytes(),
        std::path::Path::new(&row.source),
        &mut report,
    )
    .map_err(|e| AppError::internal(format!("stored log #{id} cannot be parsed: {e}")))?;
    let mods = match row.dump_id {
        Some(d) => dump_reports(&st.store, d).await?,
        None => Vec::new(),
    };
    let diagnoses = diagnose::diagnose(&report, &mods, row.mem_fraction);
    if json {
        return Ok(Json(serde_json::json!({
            "id": id,
            "source": row.source,
            "run_id": row.run_id,
            "dump_id": row.dump_id,
            "log": report,
            "diagnoses": diagnoses,
        }))
        .into_response());
    }
    let dump_modules = match row.dump_id {
        Some(d) => st
            .store
            .dump_modules(Some(d))
            .await?
            .into_iter()
            .map(|m| (m.id, m.name))
            .collect(),
        None => Vec::new(),
    };
    let mut ooms = Vec::new();
    for (i, (oom, d)) in report.ooms.iter().zip(&diagnoses).enumerate() {
        ooms.push(oom_view(i + 1, oom, d, &report)?);
    }
    if wants_png(q.format.as_deref()) {
        let charts: Vec<(String, &str)> = ooms
            .iter()
            .map(|o| (format!("oom-{}", o.n), o.chunk_svg.as_str()))
            .collect();
        return png_of(
            q.chart.as_deref(),
            &charts,
            &format!("memwatch-incident{id}"),
        );
    }
    html(&IncidentPage {
        id,
        source: row.source,
        run_id: row.run_id,
        dump_id: row.dump_id,
        dump_modules,
        devices: report.devices.clone(),
        lines: report.lines,
        ooms,
        errors: report
            .resource_exhausted
            .iter()
            .map(|e| e.message.clone())
            .collect(),
        remat: report
            .remat_warnings
            .iter()
            .map(|w| {
                format!(
                    "Rematerialization could not reduce memory use below {}: reached {} (from {}), {}:{}.",
                    b(w.target_bytes),
                    b(w.achieved_bytes),
                    b(w.original_bytes),
                    w.at.file,
                    w.at.line
                )
            })
            .collect(),
    })
}

fn oom_view(
    n: usize,
    oom: &BfcOom,
    d: &diagnose::Diagnosis,
    report: &LogReport,
) -> Result<OomView, AppError> {
    let mut failed = vec![
        Fact {
            label: "Requested (BFC-rounded)",
            value: exact(d.requested_bytes),
        },
        Fact {
            label: "Allocator",
            value: oom.allocator.clone(),
        },
    ];
    if let Some(e) = &d.executable {
        failed.push(Fact {
            label: "Executable",
            value: e.clone(),
        });
    }
    let opt = |v: Option<u64>| v.map_or_else(|| "unknown".into(), exact);
    failed.push(Fact {
        label: "Pool",
        value: opt(d.pool_bytes),
    });
    failed.push(Fact {
        label: "In use",
        value: opt(d.in_use_bytes),
    });
    failed.push(Fact {
        label: "Largest free chunk",
        value: opt(d.largest_free_bytes),
    });
    failed.push(Fact {
        label: "Needed (in use + request)",
        value: exact(d.needed_bytes),
    });
    if let Some(s) = d.shortfall_bytes {
        failed.push(Fact {
            label: "Short by",
            value: exact(s),
        });
    }
    let matched = d.matched.as_ref().map_or(String::new(), |m| {
        format!(
            "The failed request is {}'s {} ({} bytes in its buffer assignment, {} after rounding to 256).",
            m.module, m.what, m.bytes, m.rounded_bytes
        )
    });
    let live_rows = d
        .live_by_executable
        .iter()
        .map(|(e, bytes, c)| Cells(vec![e.clone(), b(*bytes), c.to_string()]))
        .collect();
    // The chunk map: offsets from the lowest chunk address, in address order.
    let mut chunks: Vec<&log::Chunk> = oom.chunks.iter().collect();
    chunks.sort_by_key(|c| c.address);
    let base = chunks.first().map_or(0, |c| c.address);
    let map: Vec<MapChunk> = chunks
        .iter()
        .map(|c| MapChunk {
            offset: c.address.saturating_sub(base),
            size: c.size,
            in_use: c.in_use,
            owner: c
                .executable
                .clone()
                .or_else(|| c.annotation.clone())
                .or_else(|| c.op.clone())
                .unwrap_or_else(|| "(unannotated)".into()),
        })
        .collect();
    let mapped_end = map.iter().map(|c| c.offset + c.size).max().unwrap_or(0);
    let pool = d.pool_bytes.unwrap_or(mapped_end).max(mapped_end);
    let (chunk_svg, chunk_note) = if map.is_empty() {
        let note = if oom.in_use_by_size.is_empty() {
            "The log has no chunk dump (older one-line OOM messages), so the pool's layout is unknown.".to_string()
        } else {
            format!(
                "The log lists in-use chunks by size only: {}.",
                oom.in_use_by_size
                    .iter()
                    .map(|(n, s)| format!("{n} × {}", b(*s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        (String::new(), note)
    } else {
        let free: Vec<u64> = map.iter().filter(|c| !c.in_use).map(|c| c.size).collect();
        let largest = free.iter().copied().max().unwrap_or(0);
        let note = if largest >= d.requested_bytes {
            format!(
                "{} chunks; the largest free chunk ({}) would have held the request, so the failure was not caused by lack of room in this pool region.",
                map.len(),
                b(largest)
            )
        } else if free.iter().sum::<u64>() >= d.requested_bytes {
            format!(
                "Fragmentation: the {} free chunk(s) add up to {}, enough for the request, but the largest is only {}.",
                free.len(),
                b(free.iter().sum()),
                b(largest)
            )
        } else {
            format!(
                "Not fragmentation: all {} free chunk(s) together hold {}, less than the {} requested; the pool is too small for what is live plus the request.",
                free.len(),
                b(free.iter().sum()),
                b(d.requested_bytes)
            )
        };
        let svg = page_charts::chunk_map(W, pool, &map, d.requested_bytes, largest)
            .map_err(AppError::internal)?;
        (svg, note)
    };
    let fraction = match (d.suggested_mem_fraction, d.device_memory_bytes) {
        (Some(f), Some(dev)) => format!(
            "With {} of device memory, XLA_CLIENT_MEM_FRACTION={f:.2} leaves room for what was needed plus 5%.",
            b(dev)
        ),
        _ => String::new(),
    };
    let title = format!(
        "{} could not allocate {}{}",
        oom.allocator,
        b(d.requested_bytes),
        d.executable
            .as_deref()
            .map(|e| format!(" while running {e}"))
            .unwrap_or_default()
    );
    let _ = report;
    Ok(OomView {
        n,
        title,
        failed,
        matched,
        live_rows,
        chunk_svg,
        chunk_note,
        peak_rows: d
            .module_peak_buffers
            .iter()
            .take(12)
            .map(|p| buffer_row(p, true))
            .collect(),
        temp_rows: d
            .module_top_temp_values
            .iter()
            .take(12)
            .map(|p| buffer_row(p, false))
            .collect(),
        findings: d.findings.clone(),
        fraction,
    })
}
