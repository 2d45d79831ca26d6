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
    /// The result as its API names it (`RESOURCE_EXHAUSTED`, `CUDA_ERROR_OUT_OF_MEMORY`).
    pub result: String,
    pub oom: bool,
    /// The executable whose execute failed (PJRT), else empty.
    pub executable: String,
    /// The run's stored verdict (its kind and headline), when it has one.
    pub verdict: String,
    pub verdict_headline: String,
    pub pid: i64,
    pub tid: i64,
}

#[derive(Template)]
#[template(path = "incidents.html")]
pub struct IncidentsPage {
    pub rows: Vec<IncidentView>,
    /// Stored verdicts: (run, failure, kind, executable, error, headline).
    pub verdicts: Vec<(i64, bool, String, String, String, String)>,
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

/// A run's stored verdict as the run page shows it (badge, one-sentence headline, the
/// evidence).
pub struct VerdictView {
    /// The lead verdict's kind (`leak`, `execute_temp`, ...), the badge.
    pub kind: String,
    /// A failure of the run (false: a warning).
    pub failure: bool,
    pub headline: String,
    /// (label, text): what, when, who, why, fix, check.
    pub facts: Vec<(&'static str, String)>,
    /// (name, value) of the figures that prove it.
    pub figures: Vec<(String, String)>,
    /// (file:line, what).
    pub evidence: Vec<(String, String)>,
    /// Other verdicts of the run: (kind, headline).
    pub others: Vec<(String, String)>,
    /// (evidence, what it would add).
    pub missing: Vec<(String, String)>,
    /// What computed it and when it was stored.
    pub source: String,
    /// The device ledger at the failure (or peak), where the doctor made one.
    pub ledger: Option<super::ledger::LedgerView>,
}
