//! `POST /api/runs/{id}/xla`: attaches an XLA dump's module reports (what `memwatch xla
//! report DUMP --json` prints) to a run.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memwatch_analysis::xla::ModuleReport;
use serde::Deserialize;

use crate::app::error::AppError;
use crate::app::extract::{Body, Path};
use crate::app::state::AppState;

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
    Path(id): Path<i64>,
    Body(body): Body,
) -> Result<Response, AppError> {
    let doc: XlaDoc = serde_json::from_slice(&body).map_err(|e| {
        AppError::bad(format!(
            "body is not a `memwatch xla report --json` document: {e}"
        ))
    })?;
    if doc.modules.is_empty() {
        return Err(AppError::bad("the document lists no modules"));
    }
    let source = doc.source.as_deref().unwrap_or("POST /api/runs/{id}/xla");
    match st
        .store
        .attach_xla_modules(id, source, &doc.modules)
        .await?
    {
        Some(n) => Ok(Json(serde_json::json!({ "run_id": id, "modules": n })).into_response()),
        None => Err(AppError::not_found(format!("no run {id}"))),
    }
}
