//! Page models of the Peak page (templates in `web/templates/`), every number already
//! formatted. No I/O here.

use askama::Template;

use crate::runtime::RuntimePanel;

#[derive(Template)]
#[template(path = "peak.html")]
pub struct PeakPage {
    pub id: i64,
    pub device: i64,
    pub devices: Vec<i64>,
    pub missing: bool,
    pub peak: String,
    pub peak_at: String,
    pub zoom_from: u64,
    pub zoom_to: u64,
    pub live_allocations: u64,
    pub shown: u64,
    pub dims: Vec<DimView>,
    /// PJRT runtime attribution (`runtime::panel`), when the run has PJRT records.
    pub runtime: Option<RuntimePanel>,
    /// Set when the page shows an instant (`?at=NS`) instead of the peak.
    pub at: Option<u64>,
    /// Set when the instant asked for lies in time whose raw events retention deleted:
    /// the page shows the nearest exact instant before it and says so.
    pub moved_from: Option<String>,
}

pub struct DimView {
    pub title: &'static str,
    pub groups: Vec<GroupView>,
}

pub struct GroupView {
    pub key: String,
    pub bytes: String,
    pub count: u64,
    pub pct: String,
    pub pct_int: i64,
    pub allocs: Vec<AllocView>,
    pub more: u64,
}

pub struct AllocView {
    pub size: String,
    pub ptr: String,
    pub at: String,
    pub api: String,
    pub thread: String,
    pub note: String,
}
