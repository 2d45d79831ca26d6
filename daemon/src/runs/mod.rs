//! Runs: nodes and their devices, runs with their per-device counters, processes and
//! annotations (`sql`, `model`), the live-bytes timeline at any zoom (`timeline`), the
//! stored raw events and API-call lanes (`events`), device-memory samples (`samples`),
//! which node device a run's device is (`devices`: by identity);
//! the JSON API over them (`api`) and the overview and run pages (`overview`, `pages`,
//! `views`).

mod api;
mod devices;
mod events;
mod identity;
mod model;
mod outcome;
mod overview;
mod pages;
mod pre_attach;
mod samples;
mod sql;
mod timeline;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub(crate) use devices::StoredDevice;
pub use events::{EventRow, EventsPage};
pub(crate) use model::device_label;
pub use model::{
    AnnotationRow, AnnotationsPage, DeviceRow, NodeRow, ProcessRow, RunDetail, RunDevice, RunLite,
    RunRow, SampleRow,
};
pub(crate) use outcome::failure_tone;
pub(crate) use pages::{
    load_run, range, range_chart, run_end, RangeChart, RangeQ, CHART_H, CHART_W,
};
pub(crate) use pre_attach::line as pre_attach_line;
pub(crate) use pre_attach::of_run as pre_attach;
pub use sql::device_capacity;
pub use sql::run_lite;
pub use timeline::Timeline;

/// The runs feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/nodes", get(api::nodes))
        .route("/api/runs", get(api::runs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/timeline", get(api::timeline))
        .route("/api/runs/{id}/events", get(api::events))
        .route("/api/runs/{id}/annotations", get(api::annotations))
        .route("/", get(overview::overview))
        .route("/runs/{id}", get(pages::run))
        .route("/runs/{id}/chart.svg", get(pages::chart_svg))
        .route("/runs/{id}/lanes", get(pages::lanes_fragment))
        .route("/runs/{id}/live", get(pages::live))
}
