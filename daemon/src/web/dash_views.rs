//! Page models of the Incident (OOM diagnosis), XLA module, XLA dump list and Gate
//! history pages (templates in `web/templates/`), every number already formatted.
//! No I/O here.

use askama::Template;

/// A label/value pair shown in a facts list.
pub struct Fact {
    pub label: &'static str,
    pub value: String,
}

/// A row of a simple table: cells already formatted.
pub struct Cells(pub Vec<String>);

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

#[derive(Template)]
#[template(path = "xla.html")]
pub struct XlaListPage {
    pub rows: Vec<XlaModuleView>,
    pub legacy: Vec<Cells>,
}

pub struct XlaModuleView {
    pub id: i64,
    pub dump_id: i64,
    pub run_id: Option<i64>,
    pub source: String,
    pub name: String,
    pub argument: String,
    pub output: String,
    pub temp: String,
    pub peak: String,
    pub total: String,
}

#[derive(Template)]
#[template(path = "xla_module.html")]
pub struct XlaModulePage {
    pub id: i64,
    pub name: String,
    pub source: String,
    pub dump_id: i64,
    pub run_id: Option<i64>,
    pub facts: Vec<Fact>,
    pub kind_svg: String,
    pub category_svg: String,
    pub op_svg: String,
    pub buffers: Vec<Cells>,
    pub temps: Vec<Cells>,
    pub others: Vec<(i64, String, bool)>,
    pub diff_with: Option<i64>,
    pub diff_title: String,
    pub diff_figures: Vec<Cells>,
    pub diff_ops: Vec<(String, String, String, String, &'static str)>,
    pub diff_note: String,
}

#[derive(Template)]
#[template(path = "gates.html")]
pub struct GateHistoryPage {
    pub entries: Vec<GateEntryView>,
}

pub struct GateEntryView {
    pub name: String,
    pub slug: String,
    pub svg: String,
    pub summary: String,
    pub rows: Vec<GateRowView>,
}

pub struct GateRowView {
    pub when: String,
    pub run: Option<i64>,
    pub passed: bool,
    pub measured: String,
    pub limit: String,
}
