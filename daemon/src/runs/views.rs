//! Page models of the overview and run pages (templates in `web/templates/`), every
//! number already formatted. No I/O here.

use askama::Template;

use crate::incidents::{IncidentView, VerdictView};

#[derive(Template)]
#[template(path = "overview.html")]
pub struct Overview {
    pub db_hint: String,
    pub nodes: Vec<NodeView>,
    pub runs: Vec<RunListRow>,
    /// Runs started together by one launcher.
    pub jobs: Vec<JobView>,
    /// Running processes: (run id, run key, pid, command, node).
    pub running: Vec<(i64, String, i64, String, String)>,
    /// How often a node agent samples its devices by default ("100 ms").
    pub sample_every: String,
}

pub struct NodeView {
    pub name: String,
    pub last_seen: String,
    pub devices: Vec<DeviceView>,
}

pub struct DeviceView {
    pub ordinal: i64,
    pub name: String,
    /// UUID and bus id as the driver said them ("" when not known).
    pub identity: String,
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

/// Runs of one job (`identity::jobs`).
pub struct JobView {
    /// Its number on the page.
    pub n: usize,
    pub node: String,
    pub ppid: i64,
    /// The first run's title.
    pub title: String,
    /// (run id, its devices' peaks).
    pub members: Vec<(i64, String)>,
}

pub struct RunListRow {
    pub id: i64,
    /// "growing" badge text (slope and executable) when framework memory keeps
    /// accumulating; empty otherwise.
    pub growing: String,
    pub title: String,
    /// The key or command beside the title.
    pub subtitle: String,
    /// The job it belongs to (its number among `Overview::jobs`), 0 for none.
    pub job: usize,
    /// The stored verdict's kind and headline (empty: none).
    pub verdict: String,
    pub verdict_headline: String,
    pub node: String,
    pub started: String,
    pub duration: String,
    pub events: i64,
    pub peak: String,
    pub peak_device: String,
    pub failures: i64,
    /// How it ended (`outcome`): badge class, text and tooltip.
    pub status: (&'static str, String, String),
    /// How its verdict and refused requests read (`outcome::tone`).
    pub tone: &'static str,
    pub dropped: i64,
}

#[derive(Template)]
#[template(path = "run.html")]
pub struct RunPage {
    pub id: i64,
    /// The framework view per device with framework records (leads the page).
    pub framework: Vec<crate::framework::FrameworkSection>,
    /// The run's title and the key or command beside it (`identity`).
    pub title: String,
    pub subtitle: String,
    /// Other runs of the same job: (id, their devices' peaks).
    pub job: Vec<(i64, String)>,
    pub launcher_pid: i64,
    /// The stored OOM verdict.
    pub verdict: Option<VerdictView>,
    pub node: String,
    /// A run stored from a PyTorch snapshot: its devices and where it was taken, shown
    /// instead of the node (the node an import is stored under is no machine of it).
    pub snapshot: Option<crate::snapshot::SnapshotFacts>,
    pub started: String,
    /// "Started", or "Stored" when no process recorded its start.
    pub started_label: &'static str,
    pub duration: String,
    pub events: i64,
    pub dropped: i64,
    /// Failed allocations and executes (incidents).
    pub failures: i64,
    pub active: bool,
    /// How it ended (`outcome`): badge class, text and tooltip.
    pub status: (&'static str, String, String),
    /// How its verdict and refused requests read (`outcome::tone`).
    pub tone: &'static str,
    /// For a crash: the exit and the error line of its log (empty: none).
    pub crash: String,
    /// Every process exited 0 after refused requests.
    pub recovered: bool,
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
    /// The newest incidents (at most [`INCIDENTS_LISTED`](super::pages)), of `failures`.
    pub incidents: Vec<IncidentView>,
    pub processes: Vec<ProcessView>,
    pub annotations: Vec<(String, String)>,
}

pub struct RunDeviceView {
    pub device: i64,
    /// "GPU N" or "no device".
    pub label: String,
    /// The GPU it was, as the node described it ("NVIDIA H200 (the node's GPU 1)" when
    /// the process saw it under another ordinal); empty when not known.
    pub gpu: String,
    pub peak: String,
    pub peak_at: String,
    pub live: String,
    pub allocs: i64,
    pub frees: i64,
    pub failed: i64,
    /// "+X/s" when its raw live bytes keep growing (`framework::driver_growing`; only
    /// where no framework view says more), else empty.
    pub growing: String,
    /// Said instead of a flat 0 B chart: no allocation was recorded on the device.
    pub note: String,
    /// What the device held before an attach (`pre_attach`), or empty.
    pub held_before: String,
    pub svg: String,
    pub plot_left: i32,
    pub plot_right: i32,
}

pub struct ProcessView {
    pub pid: i64,
    pub ppid: i64,
    pub host: String,
    pub argv: String,
    pub exit: String,
    pub dropped: i64,
}
