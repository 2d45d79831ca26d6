//! Drawing and formatting for the dashboard, with no store access: SVG charts with
//! plotters (`chart`: timelines and API-span lanes, on `axis`'s binary byte ticks, under
//! `legend`'s wrapped colour legend, folded by `columns` to the chart's pixels; `page_charts`: composition bars, the
//! BFC chunk map, gate history, sparklines), PNG rasterising (`png`), human formatting of
//! bytes, durations and times (`fmt`), and the plain data they draw ([`Point`],
//! [`Cells`], [`Fact`]). Features gather the numbers and call these.

pub(crate) mod axis;
pub(crate) mod chart;
pub(crate) mod columns;
pub(crate) mod fmt;
pub(crate) mod legend;
pub(crate) mod page_charts;
pub(crate) mod png;
pub(crate) mod stack;

use serde::Serialize;

/// One bucket of a live-bytes series: the value over `[t_ns, t_ns + bucket)` (relative
/// to the run's start) as its minimum, maximum and last value. Timelines are made of
/// these, in the API as on the charts.
#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub t_ns: u64,
    pub min: i64,
    pub max: i64,
    pub last: i64,
}

/// A row of a simple table: cells already formatted.
pub(crate) struct Cells(pub Vec<String>);

/// A label/value pair shown in a facts list.
pub(crate) struct Fact {
    pub label: &'static str,
    pub value: String,
}
