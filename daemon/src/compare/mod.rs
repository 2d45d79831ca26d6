//! Comparing two runs (`/compare`): their timelines on one chart and their peaks side
//! by side (`pages`, `views`). Reads through the `runs` and `peak` features.

mod pages;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

/// The compare feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/compare", get(pages::compare))
}
