//! Incidents: failed allocations and executes recorded at ingest, the OOM doctor's
//! diagnosis stored with a run (`diagnosis`), and allocator logs attached with `memwatch
//! import --log` (diagnosed against an attached XLA dump when the page is read). `sql`
//! holds the rows, `marks` their counts and a chart's marks of them, `api` `/api/incidents` and `/api/runs/{id}/diagnosis`, `pages` the
//! Incidents list and the Incident page of a log, `views` their page models.

mod api;
mod diagnosis;
mod ledger;
mod marks;
mod pages;
mod sql;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub(crate) use diagnosis::verdict_view;
pub use diagnosis::{BadDiagnosis, DiagnosisRow};
pub(crate) use marks::FailureMarks;
pub(crate) use pages::{incident_view, is_oom};
pub use sql::{IncidentLogRow, IncidentRow};
pub(crate) use views::{IncidentView, VerdictView};

/// The incidents feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/incidents", get(api::incidents))
        .route(
            "/api/runs/{id}/diagnosis",
            get(api::diagnosis).post(api::store_diagnosis),
        )
        .route("/incidents", get(pages::incidents))
        .route("/incidents/logs/{id}", get(pages::incident_log))
}
