//! Page models: one askama template struct per page (templates in `web/templates/`),
//! with every number already formatted for humans. No I/O here.

use askama::Template;

#[derive(Template)]
#[template(path = "overview.html")]
pub struct Overview {
    pub db_hint: String,
    pub nodes: Vec<NodeView>,
    pub runs: Vec<RunListRow>,
    /// Running processes: (run id, run key, pid, command, node).
    pub running: Vec<(i64, String, i64, String, String)>,
}

pub struct NodeView {
    pub name: String,
    pub last_seen: String,
    pub devices: Vec<DeviceView>,
}

pub struct DeviceView {
    pub ordinal: i64,
    pub name: String,
    pub vendor: String,
    pub total: String,
    pub mems: Vec<MemView>,
}

pub struct MemView {
    pub label: &'static str,
    pub used: String,
    pub total: String,
    pub pct_int: i64,
    pub source: String,
    /// Sparkline SVG of the last hour of samples (empty with fewer than two).
    pub spark: String,
    pub spark_note: String,
}

pub struct RunListRow {
    pub id: i64,
    pub key: String,
    pub node: String,
    pub started: String,
    pub duration: String,
    pub events: i64,
    pub peak: String,
    pub peak_device: String,
    pub failures: i64,
    pub oom: bool,
    pub active: bool,
    pub dropped: i64,
}

#[derive(Template)]
#[template(path = "run.html")]
pub struct RunPage {
    pub id: i64,
    pub key: String,
    pub node: String,
    pub started: String,
    pub duration: String,
    pub events: i64,
    pub dropped: i64,
    pub failures: i64,
    pub oom: bool,
    pub active: bool,
    pub from: u64,
    pub to: u64,
    pub end: u64,
    pub range_label: String,
    pub first_device: i64,
    pub chart_width: u32,
    pub devices: Vec<RunDeviceView>,
    pub lanes_svg: String,
    pub lanes_note: String,
    pub lanes_left: i32,
    pub lanes_right: i32,
    pub incidents: Vec<IncidentView>,
    pub processes: Vec<ProcessView>,
    pub annotations: Vec<(String, String)>,
}

pub struct RunDeviceView {
    pub device: i64,
    pub peak: String,
    pub peak_at: String,
    pub live: String,
    pub allocs: i64,
    pub frees: i64,
    pub failed: i64,
    pub svg: String,
    pub plot_left: i32,
    pub plot_right: i32,
}

pub struct IncidentView {
    pub id: i64,
    pub run_id: i64,
    pub node: String,
    pub at: String,
    pub zoom_from: u64,
    pub zoom_to: u64,
    pub device: i64,
    pub api: String,
    pub size: String,
    pub live: String,
    pub result: i64,
    pub pid: i64,
    pub tid: i64,
}

pub struct ProcessView {
    pub pid: i64,
    pub host: String,
    pub argv: String,
    pub exit: String,
    pub dropped: i64,
}

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
    /// PJRT runtime attribution (web::runtime), when the run has PJRT records.
    pub runtime: Option<super::runtime::RuntimePanel>,
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

#[derive(Template)]
#[template(path = "compare.html")]
pub struct ComparePage {
    pub choices: Vec<Choice>,
    pub da: i64,
    pub db: i64,
    pub message: String,
    pub svg: String,
    pub a_label: String,
    pub b_label: String,
    pub a_peak: String,
    pub b_peak: String,
    pub peak_delta: String,
    pub rows: Vec<CompareRow>,
    /// `start` or `marker:NAME` as asked, and the caption's wording of it.
    pub align: String,
    pub align_label: String,
}

pub struct Choice {
    pub id: i64,
    pub label: String,
    pub sel_a: bool,
    pub sel_b: bool,
}

pub struct CompareRow {
    pub header: bool,
    pub key: String,
    pub a: String,
    pub b: String,
    pub delta: String,
    pub cls: &'static str,
}

#[derive(Template)]
#[template(path = "incidents.html")]
pub struct IncidentsPage {
    pub rows: Vec<IncidentView>,
    /// Attached logs: (id, source, run, has dump, stored at).
    pub logs: Vec<(i64, String, Option<i64>, bool, String)>,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub title: String,
    pub message: String,
}
