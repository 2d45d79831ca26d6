//! The HTTP ingest endpoints: `POST /api/ingest` (a wire stream as the body, e.g. a
//! capture file; idempotent with `stream`/`seq`) and `GET /api/ingest` (where a stream
//! stands, so `memwatch import` resumes after what is stored). Batches go through the
//! same writer as the agents' TCP ingest.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use memwatch_wire::frame::decode_preamble;
use memwatch_wire::ingest::decode_frames_strict;
use memwatch_wire::PREAMBLE_LEN;
use serde::Deserialize;

use super::Batch;
use crate::app::error::AppError;
use crate::app::extract::{Body, Query};
use crate::app::state::AppState;
use crate::metrics::Metrics;

/// The ingest routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/api/ingest", post(ingest).get(ingest_position))
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
    Query(q): Query<PositionQ>,
) -> Result<Json<serde_json::Value>, AppError> {
    if q.node.is_empty() {
        return Err(AppError::bad("`node` must not be empty"));
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
    Query(q): Query<IngestQ>,
    Body(body): Body,
) -> Result<Response, AppError> {
    if q.node.is_empty() {
        return Err(AppError::bad("`node` must not be empty"));
    }
    if body.len() < PREAMBLE_LEN {
        return Err(AppError::bad(format!(
            "body of {} bytes is shorter than the 16-byte wire preamble",
            body.len()
        )));
    }
    decode_preamble(&body[..PREAMBLE_LEN]).map_err(|e| AppError::bad(e.to_string()))?;
    let records =
        decode_frames_strict(&body[PREAMBLE_LEN..]).map_err(|e| AppError::bad(e.to_string()))?;
    Metrics::add(&st.metrics.frame_bytes_total, body.len() as u64);
    let (stream, seq) = match (q.stream, q.seq) {
        (Some(s), Some(n)) if n > 0 => (s, n),
        (None, None) => (0, 0),
        _ => {
            return Err(AppError::bad(
                "give both `stream` and `seq` (seq >= 1), or neither",
            ))
        }
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
        .map_err(|e| AppError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
    match rx.await {
        Ok(Ok(outcome)) => Ok(Json(outcome).into_response()),
        Ok(Err(e)) => Err(AppError::internal(e)),
        Err(_) => Err(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the writer stopped",
        )),
    }
}
