//! CI gate history: `memwatch gate --db` records each gated entry's verdict (`sql`); the
//! Gate history page draws them over time (`pages`, `views`).

mod pages;
mod sql;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub use sql::{gate_results, GateResult, GateRow};

/// The gates feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/gates", get(pages::gates))
}
