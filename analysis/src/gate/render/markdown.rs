//! The Markdown report, ready to paste into (or post as) a pull-request comment: one row
//! per entry with Total, Output, Temp, Argument, Host Temp, Peak and the Δ vs baseline in
//! bytes and percent, then for each regressed entry the ops whose peak bytes grew most.

use super::{cell, deltas, incomplete_clause, rule_line, COLUMNS};
use crate::gate::compare::{GateReport, Status};
use crate::size::{format_bytes, format_signed_bytes};

/// Escapes text for a Markdown table cell.
fn esc(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn status(s: Status) -> &'static str {
    match s {
        Status::Regressed => "❌ regressed",
        Status::Improved => "✅ improved",
        Status::WithinThreshold => "✔️ within threshold",
        Status::Unchanged => "✔️ unchanged",
        Status::New => "🆕 new",
        Status::Missing => "⚠️ missing",
        Status::Incomplete => "⚠️ incomplete",
    }
}

pub fn render(r: &GateReport) -> String {
    let s = &r.summary;
    let mut out = format!(
        "### memwatch gate: {}\n\n{} regressed, {} improved, {} within threshold, {} unchanged, {} new, {} missing{} ({} entries).\n\n",
        if r.passed { "✅ passed" } else { "❌ memory regression" },
        s.regressed,
        s.improved,
        s.within_threshold,
        s.unchanged,
        s.new,
        s.missing,
        incomplete_clause(s),
        s.entries
    );
    out.push_str("| Module | Status |");
    for m in COLUMNS {
        out.push_str(&format!(" {} |", m.title()));
    }
    out.push_str(" Δ vs baseline |\n|---|---|");
    for _ in COLUMNS {
        out.push_str("---:|");
    }
    out.push_str("---|\n");
    for e in &r.entries {
        out.push_str(&format!("| `{}` | {} |", esc(&e.key), status(e.status)));
        for m in COLUMNS {
            out.push_str(&format!(" {} |", cell(e, m)));
        }
        let d = deltas(e, |s| format!("**{s}**"));
        out.push_str(&format!(
            " {} |\n",
            if d.is_empty() {
                "—".to_string()
            } else {
                esc(&d.join("<br>"))
            }
        ));
    }
    for e in r.entries.iter().filter(|e| e.status == Status::Regressed) {
        out.push_str(&format!(
            "\n#### `{}`: ops whose peak bytes grew most\n\n",
            esc(&e.key)
        ));
        if e.op_growth.is_empty() {
            out.push_str(
                "No per-op figures on both sides (they come from XLA dumps: `--xla-dump`).\n",
            );
            continue;
        }
        out.push_str("| Op | Baseline | Current | Δ |\n|---|---:|---:|---:|\n");
        for g in &e.op_growth {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                esc(&g.name),
                format_bytes(g.baseline_bytes),
                format_bytes(g.current_bytes),
                format_signed_bytes(i128::from(g.delta_bytes))
            ));
        }
    }
    out.push_str(&format!(
        "\n<sub>{}</sub>\n",
        rule_line(r.options.max_increase_percent, r.options.max_increase_bytes)
    ));
    out
}
