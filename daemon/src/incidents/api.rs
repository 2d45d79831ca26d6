//! `GET /api/incidents`: failed allocations and executes, newest first; a run's stored
//! diagnosis (`GET`/`POST /api/runs/{id}/diagnosis`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::app::error::AppError;
use crate::app::extract::{Body, Path, Query};
use crate::app::state::AppState;

#[derive(Deserialize)]
pub(super) struct IncidentsQ {
    run: Option<i64>,
    limit: Option<i64>,
}

pub(super) async fn incidents(
    State(st): State<AppState>,
    Query(q): Query<IncidentsQ>,
) -> Result<Json<serde_json::Value>, AppError> {
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    Ok(Json(
        serde_json::json!({ "incidents": st.store.incidents(q.run, limit).await? }),
    ))
}

/// `source` of `POST /api/runs/{id}/diagnosis`: what computed the document.
#[derive(Deserialize)]
pub(super) struct DiagnosisQ {
    source: Option<String>,
}

/// `POST /api/runs/{id}/diagnosis`: stores the body (what `memwatch diagnose --json`
/// prints) as the run's diagnosis, replacing one stored before.
pub(super) async fn store_diagnosis(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<DiagnosisQ>,
    Body(body, _charge): Body,
) -> Result<Response, AppError> {
    let doc: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| AppError::bad(format!("body is not JSON: {e}")))?;
    let source = q
        .source
        .as_deref()
        .unwrap_or("POST /api/runs/{id}/diagnosis");
    match st.store.store_diagnosis(id, source, &doc).await? {
        None => Err(AppError::not_found(format!("no run {id}"))),
        Some(Err(e)) => Err(AppError::bad(e.to_string())),
        Some(Ok(())) => {
            Ok(Json(serde_json::json!({ "run_id": id, "stored": true })).into_response())
        }
    }
}

/// `GET /api/runs/{id}/diagnosis`: the stored diagnosis with where it came from.
pub(super) async fn diagnosis(
    State(st): State<AppState>,
    Path(id): Path<i64>,
) -> Result<Response, AppError> {
    if !st.store.run_exists(id).await? {
        return Err(AppError::not_found(format!("no run {id}")));
    }
    let row = st.store.diagnosis(id).await?.ok_or_else(|| {
        AppError::not_found(format!(
            "run {id} has no stored diagnosis (memwatch run --db/--daemon stores one; for an \
             imported capture: memwatch import CAPTURE --log STDERR --db DB)"
        ))
    })?;
    let doc: serde_json::Value = serde_json::from_str(&row.diagnosis_json)
        .map_err(|e| AppError::internal(format!("stored diagnosis of run {id}: {e}")))?;
    Ok(Json(serde_json::json!({
        "run_id": id,
        "source": row.source,
        "created_unix_ns": row.created_unix_ns,
        "diagnosis": doc,
    }))
    .into_response())
}
