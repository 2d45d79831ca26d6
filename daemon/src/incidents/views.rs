//! Page models of the Incidents list and the Incident page (an attached log's OOM
//! diagnosis) (templates in `web/templates/`), every number already formatted. No I/O
//! here.

use askama::Template;

use crate::render::{Cells, Fact};

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

#[derive(Template)]
#[template(path = "incidents.html")]
pub struct IncidentsPage {
    pub rows: Vec<IncidentView>,
    /// Attached logs: (id, source, run, has dump, stored at).
    pub logs: Vec<(i64, String, Option<i64>, bool, String)>,
}

#[derive(Template)]
#[template(path = "incident.html")]
pub struct IncidentPage {
    pub id: i64,
    pub source: String,
    pub run_id: Option<i64>,
    pub dump_id: Option<i64>,
    pub dump_modules: Vec<(i64, String)>,
    pub devices: Vec<String>,
    pub lines: usize,
    pub ooms: Vec<OomView>,
    pub errors: Vec<String>,
    pub remat: Vec<String>,
}

pub struct OomView {
    pub n: usize,
    pub title: String,
    pub failed: Vec<Fact>,
    pub matched: String,
    pub live_rows: Vec<Cells>,
    pub chunk_svg: String,
    pub chunk_note: String,
    pub peak_rows: Vec<Cells>,
    pub temp_rows: Vec<Cells>,
    pub findings: Vec<String>,
    pub fraction: String,
}
