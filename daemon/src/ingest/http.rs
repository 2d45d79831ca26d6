//! The HTTP ingest endpoints: `POST /api/ingest` (a wire stream as the body, e.g. a
//! capture file; idempotent with `stream`/`seq`) and `GET /api/ingest` (where a stream
//! stands, so `memwatch import` resumes after what is stored). Batches go through the
//! same writer and the same memory budget as the agents' TCP ingest: the body (at most
//! one batch's size) is charged before it is read, its decoded size before it is decoded,
//! to the shares of the request's peer (`peer`), and its batch waits in the writer in a
//! lane of that peer's.

use std::time::Duration;

use axum::body::Body as AxumBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use memwatch_wire::frame::decode_preamble;
use memwatch_wire::ingest::decode_frames_strict;
use memwatch_wire::PREAMBLE_LEN;
use serde::Deserialize;

use futures_util::StreamExt;

use super::budget::{decoded_bound, Charge, PeerBudget};
use super::peer::Peer;
use super::writer::NotStored;
use super::{Batch, Sequencing};
use crate::app::error::AppError;
use crate::app::extract::Query;
use crate::app::state::AppState;
use crate::app::BodyLimit;
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

/// How long the body may send nothing before the request fails.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the request body (at most `limit` bytes, charged to the budget's raw pool first:
/// its `Content-Length`, or `limit` when it has none).
async fn read_body(
    budget: &PeerBudget,
    headers: &HeaderMap,
    body: AxumBody,
    limit: usize,
) -> Result<(Vec<u8>, Charge), AppError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let too_big = |n: usize| {
        AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "an ingest body of {n} bytes is over the {limit} byte limit of one batch; \
                 `memwatch import --daemon` sends a capture in batches"
            ),
        )
    };
    if let Some(n) = declared.filter(|&n| n > limit) {
        return Err(too_big(n));
    }
    let want = declared.unwrap_or(limit);
    let charge = budget
        .raw_within_limit("an ingest body", want)
        .await
        .map_err(|e| AppError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let mut out = Vec::with_capacity(want.min(1 << 20));
    let mut stream = body.into_data_stream();
    loop {
        let next = tokio::time::timeout(BODY_READ_TIMEOUT, stream.next())
            .await
            .map_err(|_| AppError::bad("the request body stalled"))?;
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| AppError::bad(format!("reading the body: {e}")))?;
        if out.len() + chunk.len() > want {
            return Err(too_big(out.len() + chunk.len()));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, charge))
}

/// Body: a wire stream (16-byte preamble, then whole frames), e.g. a capture file, at
/// most the request body limit (`--max-body-mib`; `memwatch import` sends batches).
async fn ingest(
    State(st): State<AppState>,
    Query(q): Query<IngestQ>,
    Extension(body_limit): Extension<BodyLimit>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: AxumBody,
) -> Result<Response, AppError> {
    let peer = peer.map_or(Peer::LOCAL, |Extension(p)| p);
    let budget = st.writer.budget().peer(peer);
    if q.node.is_empty() {
        return Err(AppError::bad("`node` must not be empty"));
    }
    let (stream, seq) = match (q.stream, q.seq) {
        (Some(s), Some(n)) if n > 0 => (s, n),
        (None, None) => (0, 0),
        _ => {
            return Err(AppError::bad(
                "give both `stream` and `seq` (seq >= 1), or neither",
            ))
        }
    };
    let limit = st.writer.budget().limits().raw_bytes.min(body_limit.0);
    let (body, raw) = read_body(&budget, &headers, body, limit).await?;
    if body.len() < PREAMBLE_LEN {
        return Err(AppError::bad(format!(
            "body of {} bytes is shorter than the 16-byte wire preamble",
            body.len()
        )));
    }
    decode_preamble(&body[..PREAMBLE_LEN]).map_err(|e| AppError::bad(e.to_string()))?;
    let frames = &body[PREAMBLE_LEN..];
    let decoded = budget
        .decoded(decoded_bound(frames))
        .await
        .map_err(|e| AppError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()))?;
    let records = decode_frames_strict(frames).map_err(|e| AppError::bad(e.to_string()))?;
    Metrics::add(&st.metrics.frame_bytes_total, body.len() as u64);
    drop(body);
    drop(raw);
    let rx = st
        .writer
        .lane(peer)
        .submit(
            Batch {
                node: q.node,
                stream,
                seq,
                run_key: q.run.unwrap_or_default(),
                records,
            },
            Sequencing::Increasing,
            decoded,
        )
        .map_err(|e| AppError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    match rx.await {
        Ok(Ok(outcome)) => Ok(Json(outcome).into_response()),
        Ok(Err(NotStored::Refused(why))) => Err(AppError::new(StatusCode::CONFLICT, why)),
        Ok(Err(NotStored::Stopped)) | Err(_) => Err(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the writer stopped",
        )),
        Ok(Err(e)) => Err(AppError::internal(e.to_string())),
    }
}
