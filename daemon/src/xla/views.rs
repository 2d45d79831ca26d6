//! Page models of the XLA dump list and XLA module pages (templates in
//! `web/templates/`), every number already formatted. No I/O here.

use askama::Template;

use crate::render::{Cells, Fact};

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
