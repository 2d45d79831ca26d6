//! `memwatch xla report|diff`: loads XLA dumps through `memwatch_analysis::xla` and prints
//! the per-module memory report or the comparison of two dumps (tables, or `--json`).

use super::fmt::{bytes, clip, delta, pct};
use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use memwatch_analysis::xla::{self, diff, ModuleReport};
use std::path::{Path, PathBuf};

/// `memwatch xla …`
#[derive(Subcommand)]
pub enum XlaCmd {
    /// Memory report per module of an XLA dump: memory_analysis() figures, the buffers
    /// live at the peak and what they are.
    #[command(
        after_help = "Examples:\n  XLA_FLAGS='--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text' python train.py\n  memwatch xla report /tmp/dump\n  memwatch xla report /tmp/dump --module jit_train_step --top 20\n  memwatch xla report /tmp/dump/module_0042.jit_f.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt --json"
    )]
    Report {
        /// Dump directory (`--xla_dump_to`), or any one file of a module.
        path: PathBuf,
        /// Only modules with this normalised name (`jit_f`).
        #[arg(long)]
        module: Option<String>,
        /// Rows per table. With --json it cuts the long lists (peak_buffers,
        /// top_temp_values, by_op_name); the groups (by_category, by_allocation_kind) stay
        /// whole, so their shares add up.
        #[arg(long, default_value_t = 15)]
        top: usize,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Compare two dumps (before/after a change): per module Δ of every figure and of the
    /// peak, the op categories that changed most, modules added/removed.
    #[command(
        after_help = "Examples:\n  memwatch xla diff /tmp/dump-before /tmp/dump-after\n  memwatch xla diff base/ new/ --json | jq '.modules[].figures.temp_bytes'"
    )]
    Diff {
        /// Dump before the change.
        base: PathBuf,
        /// Dump after the change.
        new: PathBuf,
        /// Rows of op changes per module.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Loads a dump path with an error naming it.
pub fn load(path: &Path) -> Result<Vec<ModuleReport>> {
    xla::load_path(path).with_context(|| format!("reading XLA dump {}", path.display()))
}

/// Runs `memwatch xla …`.
pub fn run(cmd: XlaCmd) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    match cmd {
        XlaCmd::Report {
            path,
            module,
            top,
            json,
        } => {
            let mut mods = load(&path)?;
            if let Some(name) = &module {
                mods.retain(|m| &m.name == name);
                if mods.is_empty() {
                    bail!("{}: no module named {name:?} in this dump", path.display());
                }
            }
            if json {
                let mut v = serde_json::json!({ "modules": mods });
                if let Some(arr) = v["modules"].as_array_mut() {
                    for m in arr {
                        // Groups stay complete; the long per-buffer lists follow --top.
                        for k in ["peak_buffers", "top_temp_values", "by_op_name"] {
                            if let Some(a) = m[k].as_array_mut() {
                                a.truncate(top);
                            }
                        }
                    }
                }
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for m in &mods {
                    print_module(m, top)?;
                }
            }
            Ok(Outcome::Success)
        }
        XlaCmd::Diff {
            base,
            new,
            top,
            json,
        } => {
            let (b, n) = (load(&base)?, load(&new)?);
            let d = diff::diff_reports(&b, &n);
            if json {
                outln!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print_diff(&d, top)?;
            }
            Ok(Outcome::Success)
        }
    }
}

fn print_module(m: &ModuleReport, top: usize) -> anyhow::Result<()> {
    let id = m.id.map(|i| format!(" (module {i})")).unwrap_or_default();
    outln!(
        "== {}{id}  [{}]",
        m.name,
        if m.platform.is_empty() {
            "?"
        } else {
            &m.platform
        }
    );
    outln!("  memory_analysis():");
    let total = m.total_allocation_bytes;
    for (k, v) in [
        ("argument", m.argument_bytes),
        ("output", m.output_bytes),
        ("temp", m.temp_bytes),
        ("alias", m.alias_bytes),
        ("total allocation", m.total_allocation_bytes),
    ] {
        outln!(
            "    {k:<17} {:>12}  {:>15} B  {:>6}",
            bytes(v),
            v,
            pct(v, total)
        );
    }
    for (k, v) in [
        ("host argument", m.totals.host_argument_bytes),
        ("host output", m.totals.host_output_bytes),
        ("host temp", m.totals.host_temp_bytes),
    ] {
        if v > 0 {
            outln!("    {k:<17} {:>12}  {v:>15} B", bytes(v));
        }
    }
    if let (Some(l), Some(f)) = (m.temp_live_peak_bytes, m.temp_fragmentation_bytes) {
        outln!(
            "  temp buffer: at most {} live at once; {} ({}) never live together (fragmentation/padding)",
            bytes(l),
            bytes(f),
            pct(f, m.temp_bytes)
        );
    }
    let Some(peak) = m.peak_bytes else {
        outln!("  peak: unknown (no *-live-range.txt in the dump)\n");
        return Ok(());
    };
    outln!(
        "  peak: {} ({peak} B) at schedule step {}, {} buffers live",
        bytes(peak),
        m.peak_time
            .map(|t| t.to_string())
            .unwrap_or_else(|| "?".into()),
        m.peak_buffers.len()
    );
    outln!("\n  Peak by allocation kind:");
    for g in &m.by_allocation_kind {
        outln!(
            "    {:<18} {:>12} {:>6}  {:>4} buffers",
            g.key,
            bytes(g.bytes),
            pct(g.bytes, peak),
            g.count
        );
    }
    outln!("\n  Top ops at peak (by category; the largest buffer's framework op):");
    outln!(
        "    {:<28} {:>12} {:>6} {:>5}  {:<22} op_name",
        "category",
        "bytes",
        "share",
        "count",
        "largest instruction"
    );
    for g in m.by_category.iter().take(top) {
        // peak_buffers is sorted largest first: the first of this category is its largest.
        let largest = m.peak_buffers.iter().find(|b| b.category == g.key);
        outln!(
            "    {:<28} {:>12} {:>6} {:>5}  {:<22} {}",
            clip(&g.key, 28),
            bytes(g.bytes),
            pct(g.bytes, peak),
            g.count,
            clip(largest.map(|b| b.instruction.as_str()).unwrap_or("-"), 22),
            clip(
                largest.and_then(|b| b.op_name.as_deref()).unwrap_or("-"),
                60
            )
        );
    }
    outln!("\n  Peak by framework op_name:");
    for g in m.by_op_name.iter().take(top) {
        outln!(
            "    {:>12} {:>6}  {}",
            bytes(g.bytes),
            pct(g.bytes, peak),
            clip(&g.key, 90)
        );
    }
    outln!("\n  Buffers live at peak (largest first):");
    outln!(
        "    {:<30} {:<20} {:>11} {:<16} {:<28} op_name",
        "instruction",
        "category",
        "size",
        "allocation",
        "shape"
    );
    for b in m.peak_buffers.iter().take(top) {
        outln!(
            "    {:<30} {:<20} {:>11} {:<16} {:<28} {}",
            clip(
                &format!(
                    "{}{}",
                    b.instruction,
                    if b.index == "{}" { "" } else { &b.index }
                ),
                30
            ),
            clip(&b.category, 20),
            bytes(b.bytes),
            clip(&b.allocation_kind, 16),
            clip(&b.shape, 28),
            clip(b.op_name.as_deref().unwrap_or("-"), 70)
        );
    }
    if m.peak_buffers.len() > top {
        outln!("    … {} more (use --top N)", m.peak_buffers.len() - top);
    }
    outln!();
    Ok(())
}

fn print_diff(d: &diff::DumpDiff, top: usize) -> anyhow::Result<()> {
    for m in &d.modules {
        match m.paired_by {
            "order" => outln!(
                "== {} (compiled several times; no NEW module with the same argument and \
                 output sizes: paired in compilation order, may be another program)",
                m.name
            ),
            "name+io" => outln!("== {} (paired by argument and output sizes)", m.name),
            _ => outln!("== {}", m.name),
        }
        for u in &m.unknown {
            outln!("    {u}: not compared");
        }
        for (k, (b, n, dd)) in &m.figures {
            let mark = if *dd != 0 { " *" } else { "" };
            outln!(
                "    {k:<24} {:>12} -> {:>12}  {:>13}{mark}",
                bytes(*b),
                bytes(*n),
                delta(*dd)
            );
        }
        if !m.ops.is_empty() {
            outln!("  peak bytes by op category, largest change first:");
            for o in m.ops.iter().take(top) {
                outln!(
                    "    {:<32} {:>12} -> {:>12}  {:>13}",
                    clip(&o.key, 32),
                    bytes(o.base_bytes),
                    bytes(o.new_bytes),
                    delta(o.delta_bytes)
                );
            }
        }
    }
    for a in &d.added {
        outln!("+ module {a} (only in NEW)");
    }
    for r in &d.removed {
        outln!("- module {r} (only in BASE)");
    }
    if d.modules.is_empty() && d.added.is_empty() && d.removed.is_empty() {
        outln!("no modules");
    }
    Ok(())
}
