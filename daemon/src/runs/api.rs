//! The runs feature's JSON API: nodes, runs, a run's detail, its timeline per device,
//! its raw events and its annotations (both paged by cursor).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::state::AppState;

type ApiResult<T> = Result<Json<T>, AppError>;

pub(super) async fn nodes(State(st): State<AppState>) -> ApiResult<serde_json::Value> {
    Ok(Json(
        serde_json::json!({ "nodes": st.store.nodes().await? }),
    ))
}

#[derive(Deserialize)]
pub(super) struct Limit {
    limit: Option<i64>,
}

pub(super) async fn runs(
    State(st): State<AppState>,
    Query(q): Query<Limit>,
) -> ApiResult<serde_json::Value> {
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    Ok(Json(
        serde_json::json!({ "runs": st.store.runs(limit).await? }),
    ))
}

pub(super) async fn run(
    State(st): State<AppState>,
    Path(id): Path<i64>,
) -> Result<Response, AppError> {
    match st.store.run(id).await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
pub(super) struct TimelineQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
    points: Option<usize>,
}

pub(super) async fn timeline(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<TimelineQ>,
) -> Result<Response, AppError> {
    if let (Some(f), Some(t)) = (q.from, q.to) {
        if t <= f {
            return Err(AppError::bad(format!(
                "`to` ({t}) must be greater than `from` ({f})"
            )));
        }
    }
    let points = q.points.unwrap_or(2000);
    if points == 0 || points > 100_000 {
        return Err(AppError::bad(format!(
            "`points` must be 1..=100000, got {points}"
        )));
    }
    match st
        .store
        .timeline(id, q.device.unwrap_or(0), q.from, q.to, points)
        .await?
    {
        Some(t) => Ok(Json(t).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}

/// A paged endpoint's `cursor` ("A:B", as its previous page's `next_cursor` gave it);
/// absent or empty: the first page. `form` names the two parts in the error.
fn page_cursor<B: std::str::FromStr>(
    c: Option<&str>,
    form: &str,
) -> Result<Option<(i64, B)>, AppError> {
    match c {
        None | Some("") => Ok(None),
        Some(c) => c
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<B>().ok()?)))
            .map(Some)
            .ok_or_else(|| AppError::bad(format!("bad cursor {c:?} (expected {form})"))),
    }
}

#[derive(Deserialize)]
pub(super) struct EventsQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
    cursor: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn events(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<EventsQ>,
) -> Result<Response, AppError> {
    let cursor = page_cursor::<usize>(q.cursor.as_deref(), "CHUNK:INDEX")?;
    let limit = q.limit.unwrap_or(1000);
    match st
        .store
        .events(id, q.device.unwrap_or(0), q.from, q.to, cursor, limit)
        .await?
    {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
pub(super) struct AnnotationsQ {
    from: Option<u64>,
    to: Option<u64>,
    cursor: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn annotations(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<AnnotationsQ>,
) -> Result<Response, AppError> {
    let cursor = page_cursor::<i64>(q.cursor.as_deref(), "TS:ID")?;
    let limit = q.limit.unwrap_or(1000);
    match st
        .store
        .annotations_page(id, q.from, q.to, cursor, limit)
        .await?
    {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}
