//! Renders a [`GateReport`](super::compare::GateReport) for people and CI systems:
//! a terminal table ([`text`]), a PR-comment table ([`markdown`]), JUnit XML ([`junit`]).
//! (JSON is the report's serde form.) Renderers return strings; they never print.

pub mod junit;
pub mod markdown;
pub mod text;

use super::compare::{EntryReport, MetricDelta, Status, Summary};
use super::metric::Metric;
use super::units::format_percent;
use crate::size::{format_bytes, format_signed_bytes};

/// The figure columns every human report shows, in order.
pub const COLUMNS: [Metric; 6] = [
    Metric::Total,
    Metric::Output,
    Metric::Temp,
    Metric::Argument,
    Metric::HostTemp,
    Metric::Peak,
];

/// The current figure (the baseline's for a missing entry, `not measured` for a gated
/// metric the baseline has and this run lacks), or `—`.
pub fn cell(e: &EntryReport, m: Metric) -> String {
    let Some(d) = e.metric(m) else {
        return "—".to_string();
    };
    if d.unmeasured {
        return "not measured".to_string();
    }
    let shown = if e.status == Status::Missing {
        d.baseline_bytes
    } else {
        d.current_bytes
    };
    shown.map_or_else(|| "—".to_string(), format_bytes)
}

/// `Peak not measured (baseline 1.0 GiB)` for a gated metric this run lacks.
pub fn describe_unmeasured(d: &MetricDelta) -> Option<String> {
    d.unmeasured.then(|| {
        format!(
            "{} not measured (baseline {})",
            d.metric.title(),
            d.baseline_bytes
                .map_or_else(|| "—".to_string(), format_bytes)
        )
    })
}

/// `, 1 incomplete` when some entry lacks a gated metric; empty otherwise.
pub fn incomplete_clause(s: &Summary) -> String {
    if s.incomplete == 0 {
        String::new()
    } else {
        format!(", {} incomplete", s.incomplete)
    }
}

/// `Temp +512.0 KiB (+45.00%)` for one changed metric.
pub fn describe_delta(d: &MetricDelta) -> Option<String> {
    let delta = d.delta_bytes.filter(|&x| x != 0)?;
    Some(format!(
        "{} {} ({})",
        d.metric.title(),
        format_signed_bytes(i128::from(delta)),
        format_percent(d.delta_percent)
    ))
}

/// The gated metrics this run lacks, then the changed metrics of an entry, regressed
/// ones first, each marked by `mark`.
pub fn deltas(e: &EntryReport, mark: impl Fn(&str) -> String) -> Vec<String> {
    let mut changed: Vec<&MetricDelta> = e
        .metrics
        .iter()
        .filter(|d| d.delta_bytes.is_some_and(|x| x != 0))
        .collect();
    changed.sort_by_key(|d| !d.regressed);
    let mut lines: Vec<String> = e.doubt.iter().map(|d| format!("not judged: {d}")).collect();
    lines.extend(e.metrics.iter().filter_map(describe_unmeasured));
    lines.extend(
        changed
            .into_iter()
            .filter_map(|d| describe_delta(d).map(|s| if d.regressed { mark(&s) } else { s })),
    );
    lines
}

/// One line stating the thresholds and the rule.
pub fn rule_line(percent: f64, bytes: u64) -> String {
    format!(
        "A metric regresses when it grows by more than {} AND by more than {percent}% (per-entry thresholds in the baseline take precedence).",
        format_bytes(bytes)
    )
}
