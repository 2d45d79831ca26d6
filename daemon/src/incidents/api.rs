//! `GET /api/incidents`: failed allocations and executes, newest first.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use crate::app::error::AppError;
use crate::app::extract::Query;
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
