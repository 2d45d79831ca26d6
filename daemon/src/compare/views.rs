//! Page model of the Compare page (template `web/templates/compare.html`). No I/O here.

use askama::Template;

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
    /// The framework memory of both runs (PyTorch allocated or live PJRT buffers) on one
    /// chart, and its figures side by side; empty when neither run has any.
    pub fw_svg: String,
    pub fw_rows: Vec<CompareRow>,
    /// Two PyTorch snapshots' dumps side by side (when either run is a snapshot run).
    pub snap: Option<crate::snapshot::DumpCompare>,
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
