//! Page model of the Gate history page (template `web/templates/gates.html`). No I/O
//! here.

use askama::Template;

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
