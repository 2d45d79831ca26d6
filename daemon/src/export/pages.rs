//! The export endpoints of the run page: the chart as SVG or PNG, the JSON-lines trace
//! and the Perfetto document, as downloads.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};

use super::{perfetto, trace};
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::png_response;
use crate::app::state::AppState;
use crate::peak::DeviceQ;
use crate::runs::{load_run, range_chart, RangeChart, RangeQ};

pub(super) async fn export_svg(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RangeQ>,
) -> Result<Response, AppError> {
    let RangeChart {
        device, chart: c, ..
    } = range_chart(&st, id, &q).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"memwatch-run{id}-gpu{device}.svg\""),
            ),
        ],
        c.svg,
    )
        .into_response())
}

pub(super) async fn export_png(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RangeQ>,
) -> Result<Response, AppError> {
    let RangeChart {
        device, chart: c, ..
    } = range_chart(&st, id, &q).await?;
    png_response(&c.svg, &format!("memwatch-run{id}-gpu{device}"))
}

pub(super) async fn export_jsonl(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<DeviceQ>,
) -> Result<Response, AppError> {
    let run = load_run(&st, id).await?;
    let device = q.device.unwrap_or(0);
    let lines = trace::JsonLines::new(st.store.clone(), id, device, run.t0.max(0) as u64);
    let body = stream::unfold(lines, |mut l| async move {
        match l.next_chunk().await {
            Ok(Some(s)) => Some((Ok::<_, std::io::Error>(s), l)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), l)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"memwatch-run{id}-gpu{device}.jsonl\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

pub(super) async fn export_perfetto(
    State(st): State<AppState>,
    Path(id): Path<i64>,
) -> Result<Response, AppError> {
    let (doc, head) = perfetto::Perfetto::start(st.store.clone(), id)
        .await?
        .ok_or_else(|| AppError::not_found(format!("There is no run #{id}.")))?;
    let first = stream::once(async move { Ok::<_, std::io::Error>(head) });
    let rest = stream::unfold(doc, |mut d| async move {
        match d.next_chunk().await {
            Ok(Some(s)) => Some((Ok::<_, std::io::Error>(s), d)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), d)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"memwatch-run{id}.perfetto.json\""),
            ),
        ],
        Body::from_stream(first.chain(rest)),
    )
        .into_response())
}
