//! PJRT runtime endpoints (issue 9): `GET /api/runs/{id}/runtime` (per device: the
//! framework allocator's timeline, executions as spans, the executable running at the
//! runtime peak and its compiled statistics), `POST /api/runs/{id}/xla` (attach an XLA
//! dump's module reports to a run), and the `runtime` member added to
//! `/api/runs/{id}/peak`. The data and the attribution come from `store::pjrt`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memwatch_analysis::xla::ModuleReport;
use serde::Deserialize;

use super::{bad, not_found, ApiError, AppState};
use crate::extract::{ApiBody, ApiPath, ApiQuery};
use crate::store::{pjrt, Store};

#[derive(Deserialize)]
pub(super) struct RuntimeQ {
    device: Option<i64>,
    points: Option<usize>,
    limit: Option<usize>,
    top: Option<usize>,
}

pub(super) async fn runtime(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<RuntimeQ>,
) -> Result<Response, ApiError> {
    let points = q.points.unwrap_or(2000);
    if points == 0 || points > 100_000 {
        return Err(bad(format!("`points` must be 1..=100000, got {points}")));
    }
    let limit = q.limit.unwrap_or(10_000).min(1_000_000);
    let top = q.top.unwrap_or(20).min(10_000);
    match pjrt::device_runtime(&st.store, id, q.device.unwrap_or(0), points, limit, top).await? {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

/// Body of `POST /api/runs/{id}/xla`: what `memwatch xla report DUMP --json` prints.
#[derive(Deserialize)]
pub(super) struct XlaDoc {
    modules: Vec<ModuleReport>,
    /// Where the dump came from (a path); attaching the same source again replaces it.
    #[serde(default)]
    source: Option<String>,
}

pub(super) async fn attach_xla(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let doc: XlaDoc = serde_json::from_slice(&body).map_err(|e| {
        bad(format!(
            "body is not a `memwatch xla report --json` document: {e}"
        ))
    })?;
    if doc.modules.is_empty() {
        return Err(bad("the document lists no modules"));
    }
    let source = doc.source.as_deref().unwrap_or("POST /api/runs/{id}/xla");
    match pjrt::attach_modules(&st.store, id, source, &doc.modules).await? {
        Some(n) => Ok(Json(serde_json::json!({ "run_id": id, "modules": n })).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

/// Adds `"runtime"` (the PJRT attribution of the device's peak) to a `/peak` document
/// when the run has PJRT memory statistics for that device.
pub(super) async fn add_to_peak(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
    doc: &mut serde_json::Value,
) -> Result<(), ApiError> {
    if let Some(r) = pjrt::peak_runtime(store, run, device, top).await? {
        let v = serde_json::to_value(r)
            .map_err(|e| ApiError(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        if let Some(o) = doc.as_object_mut() {
            o.insert("runtime".into(), v);
        }
    }
    Ok(())
}
