//! The Gate history page (`/gates`): per baseline entry, its results over time as a chart
//! and a table. `?format=json` gives the data, `?format=png` an entry's chart.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::sql::{gate_results, GateRow};
use super::views::{GateEntryView, GateHistoryPage, GateRowView};
use crate::app::error::AppError;
use crate::app::extract::Query;
use crate::app::page::{html, png_of, wants_json, wants_png};
use crate::app::state::AppState;
use crate::render::fmt;
use crate::render::page_charts::{self, GatePoint, PAGE_CHART_W as W};

/// `format=json|png`, and which entry's chart `format=png` draws (its number).
#[derive(Deserialize, Default)]
pub(super) struct GatesQ {
    format: Option<String>,
    chart: Option<String>,
}

/// `/gates`: per baseline entry, its results over time as a chart and a table.
pub(super) async fn gates(
    State(st): State<AppState>,
    Query(q): Query<GatesQ>,
) -> Result<Response, AppError> {
    let json = wants_json(q.format.as_deref())?;
    let rows = gate_results(&st.store).await?;
    let mut by: BTreeMap<String, Vec<GateRow>> = BTreeMap::new();
    for r in rows {
        by.entry(r.name.clone()).or_default().push(r);
    }
    if json {
        let v: BTreeMap<&String, Vec<serde_json::Value>> = by
            .iter()
            .map(|(k, rs)| {
                (
                    k,
                    rs.iter()
                        .map(|r| {
                            serde_json::json!({
                                "created_unix_ns": r.created_unix_ns,
                                "run_id": r.run_id,
                                "passed": r.passed,
                                "measured_bytes": r.measured_bytes,
                                "limit_bytes": r.limit_bytes,
                            })
                        })
                        .collect(),
                )
            })
            .collect();
        return Ok(Json(serde_json::json!({ "entries": v })).into_response());
    }
    let mut entries = Vec::new();
    for (i, (name, rs)) in by.into_iter().enumerate() {
        let pts: Vec<GatePoint> = rs
            .iter()
            .map(|r| GatePoint {
                t: r.created_unix_ns,
                measured: r.measured_bytes,
                limit: r.limit_bytes,
                passed: r.passed,
            })
            .collect();
        let fails = rs.iter().filter(|r| !r.passed).count();
        let last = rs.first();
        let summary = format!(
            "{} result(s), {} failed; latest {} ({} of {} limit)",
            rs.len(),
            fails,
            last.map_or("-", |r| if r.passed { "passed" } else { "failed" }),
            last.map_or("-".into(), |r| fmt::bytes(r.measured_bytes)),
            last.map_or("-".into(), |r| fmt::bytes(r.limit_bytes)),
        );
        entries.push(GateEntryView {
            slug: format!("{i}"),
            svg: page_charts::gate_history(W, &pts).map_err(AppError::internal)?,
            summary,
            rows: rs
                .iter()
                .take(50)
                .map(|r| GateRowView {
                    when: fmt::wall(r.created_unix_ns),
                    run: r.run_id,
                    passed: r.passed,
                    measured: fmt::bytes(r.measured_bytes),
                    limit: fmt::bytes(r.limit_bytes),
                })
                .collect(),
            name,
        });
    }
    if wants_png(q.format.as_deref()) {
        let charts: Vec<(String, &str)> = entries
            .iter()
            .map(|e| (e.slug.clone(), e.svg.as_str()))
            .collect();
        return png_of(q.chart.as_deref(), &charts, "memwatch-gate");
    }
    html(&GateHistoryPage { entries })
}
