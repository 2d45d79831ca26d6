//! The PJRT runtime view of a run: its stored PJRT records rebuilt as a
//! `memwatch_analysis::runtime::RuntimeCapture` (`capture`) and analysed by the same code
//! as `memwatch runtime`; per device the allocator timeline, executions and OOMs
//! (`view`), the attribution of the peak to executables, buffers, XLA modules and HLO ops
//! (`peak`), the `/runtime` API and the `runtime` member of `/peak` (`api`), and the Peak
//! page's panel (`panel`).

mod api;
mod capture;
mod panel;
mod peak;
mod view;

use axum::routing::get;
use axum::Router;

use crate::app::state::AppState;

pub(crate) use api::add_to_peak;
pub(crate) use capture::{executables, live_steps_at};
pub(crate) use panel::{panel, RuntimePanel};
pub use peak::{peak_runtime, ModuleShare, PeakRuntime};
pub use view::{ExecutionSpan, RuntimeView};

/// The runtime feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/api/runs/{id}/runtime", get(api::runtime))
}
