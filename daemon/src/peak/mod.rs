//! What was live: a device's live allocations at its peak (the snapshot ingest stores)
//! or at any instant (`replay` of the stored events from the nearest `checkpoints`
//! entry, which the background `checkpointer` keeps current), grouped (`group`) by size
//! class, memory kind, thread and annotation (`sql`, `model`); the `/peak` API (`api`)
//! and the Peak page (`pages`, `views`).

mod api;
mod checkpointer;
mod checkpoints;
mod group;
mod model;
mod pages;
mod replay;
mod sql;
mod views;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub use checkpointer::{spawn_checkpointer, CheckpointSettings, Progress};
pub use checkpoints::{CHECKPOINT_EVENTS, CHECKPOINT_PER_LIVE};
pub use model::{Group, Peak, PeakAlloc};
pub(crate) use pages::{size_class_label, DeviceQ};

/// The peak feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/runs/{id}/peak", get(api::peak))
        .route("/runs/{id}/peak", get(pages::peak))
}
