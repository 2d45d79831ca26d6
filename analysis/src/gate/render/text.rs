//! The terminal report: one table row per entry, then the grown ops of regressed entries
//! and a one-line verdict.

use super::{cell, deltas, incomplete_clause, rule_line, COLUMNS};
use crate::gate::compare::{GateReport, Status};
use crate::size::{format_bytes, format_signed_bytes};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

pub fn render(r: &GateReport) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["Entry".to_string(), "Status".to_string()];
    header.extend(COLUMNS.iter().map(|m| m.title().to_string()));
    header.push("Δ vs baseline".to_string());
    t.set_header(header);
    for e in &r.entries {
        let mut row = vec![e.key.clone(), e.status.label().to_string()];
        row.extend(COLUMNS.iter().map(|&m| cell(e, m)));
        row.push(deltas(e, |s| format!("{s} !")).join("\n"));
        t.add_row(row);
    }
    for i in 2..2 + COLUMNS.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = t.to_string();
    out.push('\n');
    for e in r.entries.iter().filter(|e| e.status == Status::Regressed) {
        if e.op_growth.is_empty() {
            continue;
        }
        out.push_str(&format!("\n{}: ops whose peak bytes grew most\n", e.key));
        let mut ops = Table::new();
        ops.load_preset(UTF8_FULL_CONDENSED);
        ops.set_header(vec!["Op", "Baseline", "Current", "Δ"]);
        for g in &e.op_growth {
            ops.add_row(vec![
                g.name.clone(),
                format_bytes(g.baseline_bytes),
                format_bytes(g.current_bytes),
                format_signed_bytes(i128::from(g.delta_bytes)),
            ]);
        }
        out.push_str(&ops.to_string());
        out.push('\n');
    }
    let s = &r.summary;
    out.push_str(&format!(
        "\n{}: {} regressed, {} improved, {} within threshold, {} unchanged, {} new, {} missing{} ({} entries).\n",
        if r.passed { "PASS" } else { "FAIL" },
        s.regressed,
        s.improved,
        s.within_threshold,
        s.unchanged,
        s.new,
        s.missing,
        incomplete_clause(s),
        s.entries
    ));
    out.push_str(&rule_line(
        r.options.max_increase_percent,
        r.options.max_increase_bytes,
    ));
    out.push('\n');
    out
}
