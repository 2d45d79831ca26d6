//! Incidents: failed allocations and executes recorded at ingest, and allocator logs
//! attached with `memwatch import --log` (diagnosed against an attached XLA dump when the
//! page is read). `sql` holds the rows, `api` `/api/incidents`, `pages` the Incidents
//! list and the Incident page of a log, `views` their page models.

mod api;
mod pages;
mod sql;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub(crate) use pages::{incident_view, is_oom};
pub use sql::{IncidentLogRow, IncidentRow};
pub(crate) use views::IncidentView;

/// The incidents feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/incidents", get(api::incidents))
        .route("/incidents", get(pages::incidents))
        .route("/incidents/logs/{id}", get(pages::incident_log))
}
