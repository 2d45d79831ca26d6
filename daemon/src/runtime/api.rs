//! `GET /api/runs/{id}/runtime` (per device: the framework allocator's timeline,
//! executions as spans, the executable running at the runtime peak and its compiled
//! statistics) and the `runtime` member added to `/api/runs/{id}/peak`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::peak::peak_runtime;
use super::view::device_runtime;
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::state::AppState;
use crate::db::Store;

#[derive(Deserialize)]
pub(super) struct RuntimeQ {
    device: Option<i64>,
    points: Option<usize>,
    limit: Option<usize>,
    top: Option<usize>,
}

pub(super) async fn runtime(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RuntimeQ>,
) -> Result<Response, AppError> {
    let points = q.points.unwrap_or(2000);
    if points == 0 || points > 100_000 {
        return Err(AppError::bad(format!(
            "`points` must be 1..=100000, got {points}"
        )));
    }
    let limit = q.limit.unwrap_or(10_000).min(1_000_000);
    let top = q.top.unwrap_or(20).min(10_000);
    match device_runtime(&st.store, id, q.device.unwrap_or(0), points, limit, top).await? {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}

/// Adds `"runtime"` (the PJRT attribution of the device's peak) to a `/peak` document
/// when the run has PJRT memory statistics for that device.
pub(crate) async fn add_to_peak(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
    doc: &mut serde_json::Value,
) -> Result<(), AppError> {
    if let Some(r) = peak_runtime(store, run, device, top).await? {
        let v = serde_json::to_value(r).map_err(|e| AppError::internal(e.to_string()))?;
        if let Some(o) = doc.as_object_mut() {
            o.insert("runtime".into(), v);
        }
    }
    Ok(())
}
