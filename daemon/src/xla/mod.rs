//! XLA dumps: the modules of dumps attached to runs or stored on their own (`sql`), the
//! endpoint that attaches one to a run (`api`), and the dump list and module pages
//! (`pages`, `views`). The `runtime` feature joins a run's modules to its PJRT
//! executables; the `incidents` feature diagnoses logs against them.

mod api;
mod pages;
mod sql;
mod views;

use axum::routing::{get, post};
use axum::Router;

use crate::app::state::AppState;

pub(crate) use pages::{buffer_row, dump_reports};
pub use sql::{DumpModuleRow, NewModule};

/// The XLA feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/runs/{id}/xla", post(api::attach_xla))
        .route("/xla", get(pages::xla_list))
        .route("/xla/modules/{id}", get(pages::xla_module))
}
