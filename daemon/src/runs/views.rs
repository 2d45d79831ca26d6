//! Page models of the overview and run pages (templates in `web/templates/`), every
//! number already formatted. No I/O here.

use askama::Template;

use crate::incidents::IncidentView;

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

pub struct ProcessView {
    pub pid: i64,
    pub host: String,
    pub argv: String,
    pub exit: String,
    pub dropped: i64,
}
