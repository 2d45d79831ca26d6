//! Exports of a run: the JSON-lines trace (`trace`), the Perfetto / Chrome trace-event
//! document (`perfetto`), and the run chart as SVG or PNG, served as downloads (`pages`).

mod pages;
mod perfetto;
mod trace;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

/// The export routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/runs/{id}/export/chart.svg", get(pages::export_svg))
        .route("/runs/{id}/export/chart.png", get(pages::export_png))
        .route("/runs/{id}/export/trace.jsonl", get(pages::export_jsonl))
        .route(
            "/runs/{id}/export/perfetto.json",
            get(pages::export_perfetto),
        )
}
