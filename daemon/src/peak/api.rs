//! `GET /api/runs/{id}/peak`: the live allocations at a device's peak, grouped, with the
//! PJRT runtime attribution added when the run has PJRT records for the device.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::state::AppState;

#[derive(Deserialize)]
pub(super) struct PeakQ {
    device: Option<i64>,
    top: Option<usize>,
}

pub(super) async fn peak(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<PeakQ>,
) -> Result<Response, AppError> {
    let device = q.device.unwrap_or(0);
    let top = q.top.unwrap_or(20).min(10_000);
    match st.store.peak(id, device, top).await? {
        Some(p) => {
            let mut doc = serde_json::to_value(p).map_err(|e| AppError::internal(e.to_string()))?;
            crate::runtime::add_to_peak(&st.store, id, device, top, &mut doc).await?;
            Ok(Json(doc).into_response())
        }
        None => Err(AppError::not_found(format!(
            "no peak for run {id} device {device}"
        ))),
    }
}
