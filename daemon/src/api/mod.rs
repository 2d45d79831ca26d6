//! The HTTP API: JSON queries, HTTP ingest, `/metrics`, `/api/openapi.json`.
//!
//! Owns routing, the bearer-token check, request size limits and the mapping of errors
//! to HTTP statuses. Queries live in `store::query`; the document in `openapi`.

mod login;
pub mod openapi;
mod runtime;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memwatch_wire::frame::decode_preamble;
use memwatch_wire::ingest::decode_frames_strict;
use memwatch_wire::PREAMBLE_LEN;
use serde::Deserialize;

use crate::extract::{ApiBody, ApiPath, ApiQuery};
use crate::metrics::Metrics;
use crate::store::{Batch, Store, StoreError};
use crate::writer::WriterHandle;

/// Everything a handler needs.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub writer: WriterHandle,
    pub metrics: Arc<Metrics>,
    pub token: Option<String>,
}

/// An API error: status plus a message, sent as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!("query failed: {e}");
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

fn not_found(what: String) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, what)
}

fn bad(what: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, what.into())
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Builds the router; `max_body_bytes` limits request bodies (HTTP ingest).
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/api/nodes", get(nodes))
        .route("/api/runs", get(runs))
        .route("/api/runs/{id}", get(run))
        .route("/api/runs/{id}/timeline", get(timeline))
        .route("/api/runs/{id}/peak", get(peak))
        .route("/api/runs/{id}/runtime", get(runtime::runtime))
        .route("/api/runs/{id}/xla", post(runtime::attach_xla))
        .route("/api/runs/{id}/events", get(events))
        .route("/api/runs/{id}/annotations", get(annotations))
        .route("/api/incidents", get(incidents))
        .route("/api/ingest", post(ingest).get(ingest_position))
        .route("/api/openapi.json", get(openapi_doc))
        .route("/metrics", get(metrics))
        .route("/login", get(login::page).post(login::submit))
        .merge(crate::web::routes())
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

async fn auth(
    State(st): State<AppState>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = &st.token {
        if req.uri().path() == "/login" {
            return next.run(req).await;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = bearer.is_some_and(|g| login::token_matches(g, want))
            || login::cookie_token(&headers)
                .is_some_and(|c| login::token_matches(c, &login::cookie_value(want)));
        if !ok {
            if login::wants_page(req.uri().path(), &headers) {
                let pq = req
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_string();
                return login::to_login(&pq);
            }
            return ApiError(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token".into(),
            )
            .into_response();
        }
    }
    next.run(req).await
}

async fn nodes(State(st): State<AppState>) -> ApiResult<serde_json::Value> {
    Ok(Json(
        serde_json::json!({ "nodes": st.store.nodes().await? }),
    ))
}

#[derive(Deserialize)]
struct Limit {
    limit: Option<i64>,
}

async fn runs(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<Limit>,
) -> ApiResult<serde_json::Value> {
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    Ok(Json(
        serde_json::json!({ "runs": st.store.runs(limit).await? }),
    ))
}

async fn run(State(st): State<AppState>, ApiPath(id): ApiPath<i64>) -> Result<Response, ApiError> {
    match st.store.run(id).await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
struct TimelineQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
    points: Option<usize>,
}

async fn timeline(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<TimelineQ>,
) -> Result<Response, ApiError> {
    if let (Some(f), Some(t)) = (q.from, q.to) {
        if t <= f {
            return Err(bad(format!("`to` ({t}) must be greater than `from` ({f})")));
        }
    }
    let points = q.points.unwrap_or(2000);
    if points == 0 || points > 100_000 {
        return Err(bad(format!("`points` must be 1..=100000, got {points}")));
    }
    match st
        .store
        .timeline(id, q.device.unwrap_or(0), q.from, q.to, points)
        .await?
    {
        Some(t) => Ok(Json(t).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
struct PeakQ {
    device: Option<i64>,
    top: Option<usize>,
}

async fn peak(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<PeakQ>,
) -> Result<Response, ApiError> {
    let device = q.device.unwrap_or(0);
    let top = q.top.unwrap_or(20).min(10_000);
    match st.store.peak(id, device, top).await? {
        Some(p) => {
            let mut doc = serde_json::to_value(p)
                .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            runtime::add_to_peak(&st.store, id, device, top, &mut doc).await?;
            Ok(Json(doc).into_response())
        }
        None => Err(not_found(format!("no peak for run {id} device {device}"))),
    }
}

/// A paged endpoint's `cursor` ("A:B", as its previous page's `next_cursor` gave it);
/// absent or empty: the first page. `form` names the two parts in the error.
fn page_cursor<B: std::str::FromStr>(
    c: Option<&str>,
    form: &str,
) -> Result<Option<(i64, B)>, ApiError> {
    match c {
        None | Some("") => Ok(None),
        Some(c) => c
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<B>().ok()?)))
            .map(Some)
            .ok_or_else(|| bad(format!("bad cursor {c:?} (expected {form})"))),
    }
}

#[derive(Deserialize)]
struct EventsQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn events(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<EventsQ>,
) -> Result<Response, ApiError> {
    let cursor = page_cursor::<usize>(q.cursor.as_deref(), "CHUNK:INDEX")?;
    let limit = q.limit.unwrap_or(1000);
    match st
        .store
        .events(id, q.device.unwrap_or(0), q.from, q.to, cursor, limit)
        .await?
    {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
struct AnnotationsQ {
    from: Option<u64>,
    to: Option<u64>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn annotations(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<AnnotationsQ>,
) -> Result<Response, ApiError> {
    let cursor = page_cursor::<i64>(q.cursor.as_deref(), "TS:ID")?;
    let limit = q.limit.unwrap_or(1000);
    match st
        .store
        .annotations_page(id, q.from, q.to, cursor, limit)
        .await?
    {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(not_found(format!("no run {id}"))),
    }
}

#[derive(Deserialize)]
struct IncidentsQ {
    run: Option<i64>,
    limit: Option<i64>,
}

async fn incidents(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<IncidentsQ>,
) -> ApiResult<serde_json::Value> {
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    Ok(Json(
        serde_json::json!({ "incidents": st.store.incidents(q.run, limit).await? }),
    ))
}

#[derive(Deserialize)]
struct IngestQ {
    node: String,
    run: Option<String>,
    stream: Option<u64>,
    seq: Option<u64>,
}

#[derive(Deserialize)]
struct PositionQ {
    node: String,
    stream: u64,
    run: Option<String>,
}

/// Where an ingest stream stands: its last committed batch number (0: none), and the
/// run `run` names on that node, if any. `memwatch import` resumes from it.
async fn ingest_position(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<PositionQ>,
) -> ApiResult<serde_json::Value> {
    if q.node.is_empty() {
        return Err(bad("`node` must not be empty"));
    }
    let last_seq = st.store.stream_last_seq(&q.node, q.stream).await?;
    let run_id = match q.run.as_deref() {
        Some(k) if !k.is_empty() => st.store.run_id_of(&q.node, k).await?,
        _ => None,
    };
    Ok(Json(serde_json::json!({
        "node": q.node,
        "stream": q.stream,
        "last_seq": last_seq,
        "run_id": run_id,
    })))
}

/// Body: a wire stream (16-byte preamble, then whole frames), e.g. a capture file.
async fn ingest(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<IngestQ>,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    if q.node.is_empty() {
        return Err(bad("`node` must not be empty"));
    }
    if body.len() < PREAMBLE_LEN {
        return Err(bad(format!(
            "body of {} bytes is shorter than the 16-byte wire preamble",
            body.len()
        )));
    }
    decode_preamble(&body[..PREAMBLE_LEN]).map_err(|e| bad(e.to_string()))?;
    let records = decode_frames_strict(&body[PREAMBLE_LEN..]).map_err(|e| bad(e.to_string()))?;
    Metrics::add(&st.metrics.frame_bytes_total, body.len() as u64);
    let (stream, seq) = match (q.stream, q.seq) {
        (Some(s), Some(n)) if n > 0 => (s, n),
        (None, None) => (0, 0),
        _ => return Err(bad("give both `stream` and `seq` (seq >= 1), or neither")),
    };
    let rx = st
        .writer
        .submit(Batch {
            node: q.node,
            stream,
            seq,
            run_key: q.run.unwrap_or_default(),
            records,
        })
        .await
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e))?;
    match rx.await {
        Ok(Ok(outcome)) => Ok(Json(outcome).into_response()),
        Ok(Err(e)) => Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Err(_) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the writer stopped".into(),
        )),
    }
}

async fn openapi_doc() -> Json<serde_json::Value> {
    Json(openapi::document())
}

async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let text = crate::metrics::render(&st.metrics, &st.store).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
