//! What `memwatch run` prints when CMD has ended: the short summary on stderr, the
//! doctor's verdicts after it, and the `--json` / `--json-out` document.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use memwatch_agent::ReceiverStats;
use serde::Serialize;

use super::report::bytes;
use super::run::{PostExit, RunArgs};
use super::run_child::ChildEnd;

#[derive(Serialize)]
pub struct ConnJson {
    pid: Option<u32>,
    command: Option<String>,
    frames: u64,
    bytes: u64,
    closed: String,
    clean: bool,
}

#[derive(Serialize)]
pub struct RunJson {
    capture: String,
    command: Vec<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    connections: Vec<ConnJson>,
    /// None when the capture went somewhere it cannot be read back from (/dev/null).
    report: Option<memwatch_analysis::capture::CaptureReport>,
    /// The copy of the command's stderr, when kept.
    stderr_log: Option<String>,
    /// The OOM doctor's diagnosis of the run (what a store keeps with the run).
    diagnosis: Option<memwatch_analysis::doctor::Diagnosis>,
}

/// The doctor's verdicts after the summary, when there are any.
pub fn print_verdicts(d: &memwatch_analysis::doctor::Diagnosis) {
    if !d.verdicts.is_empty() {
        eprint!("\n{}", super::diagnose::render(d));
    }
}

/// `--json` / `--json-out`: the run's JSON document, on stdout or into the file.
pub fn emit_json(
    args: &RunArgs,
    out: &Path,
    end: &ChildEnd,
    stats: &ReceiverStats,
    report: Option<memwatch_analysis::capture::CaptureReport>,
    post: &PostExit<'_>,
    diagnosis: Option<memwatch_analysis::doctor::Diagnosis>,
) -> Result<()> {
    let doc = RunJson {
        capture: out.display().to_string(),
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        exit_code: end.exit_code,
        signal: end.signal,
        connections: conn_json(stats),
        report,
        stderr_log: (!post.stderr_temporary).then(|| post.stderr_path.display().to_string()),
        diagnosis,
    };
    let text = serde_json::to_string(&doc).context("cannot encode the JSON report")?;
    match &args.json_out {
        Some(path) => memwatch_agent::out_pipe::open(path, true)
            .and_then(|mut f| std::io::Write::write_all(&mut f, (text + "\n").as_bytes()))
            .with_context(|| format!("--json-out {}: cannot write", path.display())),
        None => {
            outln!("{text}");
            Ok(())
        }
    }
}

pub fn conn_json(stats: &ReceiverStats) -> Vec<ConnJson> {
    stats
        .connections
        .iter()
        .map(|c| ConnJson {
            pid: c.pid,
            command: c.command.clone(),
            frames: c.frames,
            bytes: c.bytes,
            closed: c
                .reason
                .as_ref()
                .map_or_else(|| "open".into(), ToString::to_string),
            clean: c.reason.as_ref().is_some_and(|r| r.is_clean()),
        })
        .collect()
}

pub fn summary(
    out: &Path,
    end: &ChildEnd,
    took: Duration,
    stats: &ReceiverStats,
    events: u64,
    report: &memwatch_analysis::capture::CaptureReport,
) -> String {
    let mut s = String::from("\nmemwatch: ");
    match (end.exit_code, end.signal) {
        (Some(c), _) => s.push_str(&format!("command exited with status {c}")),
        (_, Some(sig)) => s.push_str(&format!("command killed by signal {sig}")),
        _ => s.push_str("command ended"),
    }
    s.push_str(&format!(
        " after {:.1} s; {} process(es), {} events\n",
        took.as_secs_f64(),
        report.processes.len(),
        events
    ));
    for p in &report.processes {
        let allocs: u64 = p.devices.iter().map(|d| d.alloc_count).sum();
        let failed: u64 = p.devices.iter().map(|d| d.failed_count).sum();
        let leaked: u64 = p.devices.iter().map(|d| d.live_bytes_at_exit).sum();
        let devs = p.devices.iter().filter(|d| d.alloc_count > 0).count();
        s.push_str(&format!(
            "  pid {:<7} {:<28} peak {:>10} on {} device(s), {} allocs, {} failed, {} live at exit",
            p.pid,
            p.command.first().map_or("?", |c| c.as_str()),
            bytes(p.peak_bytes),
            devs,
            allocs,
            failed,
            bytes(leaked)
        ));
        if p.dropped_events > 0 {
            s.push_str(&format!(", {} DROPPED events", p.dropped_events));
        }
        s.push('\n');
    }
    let mut names: Vec<&str> = report
        .failures
        .iter()
        .filter_map(|f| f.result_name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    if report.failures_total > 0 {
        s.push_str(&format!(
            "  {} failed call(s): {}\n",
            report.failures_total,
            names.join(", ")
        ));
    }
    for c in stats.failed() {
        s.push_str(&format!(
            "  connection {} (pid {}): {}\n",
            c.id,
            c.pid.map_or("?".into(), |p| p.to_string()),
            c.reason
                .as_ref()
                .map_or_else(|| "open".into(), ToString::to_string)
        ));
    }
    s.push_str(&format!(
        "  capture: {}  (memwatch report {} for details)\n",
        out.display(),
        out.display()
    ));
    s
}
