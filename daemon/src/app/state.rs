//! [`AppState`]: what every handler can reach. A leaf module: features name it in their
//! routers without importing the router assembly (`app`).

use std::sync::Arc;

use crate::db::Store;
use crate::ingest::WriterHandle;
use crate::metrics::Metrics;

/// Everything a handler needs.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub writer: WriterHandle,
    pub metrics: Arc<Metrics>,
    pub token: Option<String>,
}
