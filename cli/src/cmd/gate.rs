//! `memwatch gate`: fails a CI job when memory regresses against a reviewed baseline.
//! Thin: collects measurements through the analysis crate's adapters, compares, renders,
//! writes the baseline on `--update`/`--ratchet`, and maps the verdict to the exit code.

use super::gate_db::{self, GateDb};
use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use memwatch_analysis::gate::{
    self, render, source, Baseline, GateOptions, Measurements, Metric, UpdateMode,
};
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
Exit status: 0 within thresholds (or baseline written by --update), 1 a regression,
2 bad input: unreadable/invalid baseline or measurements, or a baseline entry or a gated
metric of the baseline that was not measured (unless --allow-missing or --update).

Rule: a metric regresses when it grows by more than --max-increase-bytes AND by more
than --max-increase percent of its baseline value. Per-entry `max_increase` /
`max_increase_bytes` in the baseline override both flags for that entry.

Examples:
  # record a baseline from memory_analysis() figures written by memwatch-jax
  memwatch gate --baseline memory-baseline.toml --memory-analysis mem.json --update

  # in CI: fail on > 2 % AND > 64 MiB growth of temp or peak; Markdown for the PR
  memwatch gate --baseline memory-baseline.toml --memory-analysis mem.json \\
      --metric temp,peak --markdown-out gate.md --junit-out gate.xml

  # gate XLA dumps (XLA_FLAGS=--xla_dump_to=dump --xla_dump_hlo_as_text), 1 % / 1 MiB
  memwatch gate --baseline memory-baseline.toml --xla-dump dump \\
      --max-increase 1% --max-increase-bytes 1MiB --format markdown

  # lower the baseline where memory shrank, keep failing on regressions
  memwatch gate --baseline memory-baseline.toml --memory-analysis mem.json --ratchet

  # gate runs kept in the daemon's store (memwatch run --db mw.db -- python train.py);
  # NAME= keeps the baseline keys stable across runs; results go to gate_results
  memwatch gate --baseline memory-baseline.toml --run train=42 --db mw.db

Metrics: total (= argument + output + temp - alias), output, temp, argument, host_temp,
alias, generated_code, peak. Default gated: total,output,temp,argument,host_temp,peak.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
    Junit,
}

/// Compare memory figures with a baseline; exit 1 on a regression.
///
/// Reads per-module figures (JAX `memory_analysis()` JSON written by the memwatch-jax
/// Python helper, or XLA dumps), compares every metric of every entry with the baseline
/// file (TOML, one table per entry) and reports regressions and improvements.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct GateArgs {
    /// Baseline file (TOML). Created or rewritten by --update / --ratchet.
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,
    /// JSON file written by memwatch-jax (`MemoryReport.write`): memory_analysis() per
    /// jitted function. Repeatable.
    #[arg(long = "memory-analysis", value_name = "FILE")]
    pub memory_analysis: Vec<PathBuf>,
    /// XLA dump directory (`XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text`), or one
    /// module's dump file: one entry per module, with per-op figures that name the grown
    /// ops of a regressed one. A module is measured by one source: the same module from
    /// --memory-analysis and --xla-dump is refused (exit 2). Repeatable.
    #[arg(long = "xla-dump", value_name = "DIR")]
    pub xla_dump: Vec<PathBuf>,
    /// Capture file (`memwatch run --out FILE.mwcap`): one entry per process and device
    /// (`<stem>/device<D>`, or `<stem>/proc<N>/device<D>` with several processes), metric
    /// `peak`. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub capture: Vec<PathBuf>,
    /// Run stored in --db (`memwatch run --db`, `memwatch import`, `memwatch serve`), as
    /// ID or NAME=ID: one entry per device (`<NAME>/device<D>`, NAME defaulting to the
    /// run's key, or the capture's stem for imported captures), metric `peak`. Repeatable.
    #[arg(long = "run", value_name = "[NAME=]ID", requires = "db", value_parser = parse_run_ref)]
    pub run: Vec<gate_db::RunRef>,
    /// The store (SQLite file or postgres://… URL) holding the --run runs. Gate results
    /// are recorded in its gate_results table (shown by `memwatch serve` under /gates).
    #[arg(long, value_name = "PATH|URL")]
    pub db: Option<String>,
    /// Relative growth allowed per metric, in percent of the baseline.
    #[arg(long, value_name = "PERCENT", default_value = "2%", value_parser = parse_percent)]
    pub max_increase: f64,
    /// Absolute growth allowed per metric (binary or decimal units: 64MiB, 1GB, 4096).
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_increase_bytes: u64,
    /// Metrics that can fail the gate (comma-separated); others are reported only.
    #[arg(long, value_name = "METRIC,...", value_delimiter = ',')]
    pub metric: Vec<Metric>,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Same as --format json: one JSON document, bytes as integers.
    #[arg(long)]
    pub json: bool,
    /// Write the baseline from what was measured now (accepting regressions, dropping
    /// entries no longer measured unless --allow-missing); exits 0. Figures that could
    /// not be judged (a damaged capture, dropped events) are refused (exit 2, nothing
    /// written) unless --allow-missing, which keeps their baseline figures.
    #[arg(long)]
    pub update: bool,
    /// Write the baseline keeping the lower of baseline and current figure per metric
    /// (improvements are locked in, regressions still fail); adds new entries and never
    /// drops one: what was not measured keeps its baseline figure.
    #[arg(long, conflicts_with = "update")]
    pub ratchet: bool,
    /// Report baseline entries (and gated metrics) that were not measured instead of
    /// failing with exit 2.
    #[arg(long)]
    pub allow_missing: bool,
    /// Grown ops listed per regressed entry (needs per-op figures: XLA dumps).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub top_ops: usize,
    /// Also write the Markdown report to FILE (e.g. for a PR comment).
    #[arg(long, value_name = "FILE")]
    pub markdown_out: Option<PathBuf>,
    /// Also write the JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit_out: Option<PathBuf>,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    gate::units::parse_percent(s).map_err(|e| e.to_string())
}

fn parse_run_ref(s: &str) -> Result<gate_db::RunRef, String> {
    gate_db::parse_run_ref(s)
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    gate::units::parse_bytes(s).map_err(|e| e.to_string())
}

/// Reads every measurement source named on the command line.
fn measure(args: &GateArgs, db: Option<&mut GateDb>) -> Result<Measurements> {
    let mut m = Measurements::new();
    for p in &args.memory_analysis {
        m.extend(source::memory_analysis::load(p)?)?;
    }
    for p in &args.xla_dump {
        m.extend(load_dump_with_progress(p)?)?;
    }
    for p in &args.capture {
        m.extend(source::capture::load(p)?)?;
    }
    if let Some(db) = db {
        for r in &args.run {
            m.extend(db.load_run(r)?)?;
        }
    }
    if m.is_empty() {
        if args.memory_analysis.is_empty()
            && args.xla_dump.is_empty()
            && args.capture.is_empty()
            && args.run.is_empty()
        {
            bail!(
                "nothing to gate: give --memory-analysis FILE, --xla-dump DIR, --capture FILE \
                 or --run ID --db PATH"
            );
        }
        bail!("no entries found in the given inputs ({})", inputs(args));
    }
    Ok(m)
}

/// Loads a dump directory; a progress bar on stderr (drawn only on a terminal) once a
/// dump has more than a few dozen modules.
fn load_dump_with_progress(path: &Path) -> Result<Vec<gate::GateEntry>> {
    let bar = indicatif::ProgressBar::hidden();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} modules ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(format!("reading {}", path.display()));
    let shown = std::sync::Once::new();
    let entries = source::xla::load_with_progress(path, &|done, total| {
        if total > 50 {
            shown.call_once(|| {
                bar.set_length(total as u64);
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            });
            bar.set_position(done as u64);
        }
    });
    bar.finish_and_clear();
    Ok(entries?)
}

fn inputs(args: &GateArgs) -> String {
    args.memory_analysis
        .iter()
        .chain(&args.xla_dump)
        .chain(&args.capture)
        .map(|p| p.display().to_string())
        .chain(args.run.iter().map(|r| format!("run {}", r.id)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn load_baseline(path: &Path, writing: bool) -> Result<Baseline> {
    match path.try_exists() {
        Ok(true) => Ok(Baseline::load(path)?),
        Ok(false) if writing => Ok(Baseline::default()),
        Ok(false) => bail!(
            "{}: baseline file does not exist (create it with --update)",
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("{}: cannot check baseline file", path.display())),
    }
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("{}: cannot write report", path.display()))
}

/// Exit 2 when the baseline has an entry, or a gated metric of a measured entry, that this
/// run did not measure: passing would vouch for figures nobody looked at.
fn refuse_unmeasured(baseline: &Path, report: &gate::GateReport) -> Result<()> {
    let missing: Vec<&str> = report
        .entries
        .iter()
        .filter(|e| e.status == gate::Status::Missing)
        .map(|e| e.key.as_str())
        .collect();
    let unmeasured: Vec<String> = report
        .entries
        .iter()
        .flat_map(|e| {
            e.metrics
                .iter()
                .filter(|d| d.unmeasured)
                .map(move |d| format!("{} of {}", d.metric.name(), e.key))
        })
        .collect();
    let doubted: Vec<String> = report
        .entries
        .iter()
        .filter(|e| e.status == gate::Status::Incomplete)
        .filter_map(|e| e.doubt.as_ref().map(|d| format!("{} ({d})", e.key)))
        .collect();
    let mut problems = Vec::new();
    if !doubted.is_empty() {
        problems.push(format!(
            "{} entr{} could not be judged: {}",
            doubted.len(),
            if doubted.len() == 1 { "y" } else { "ies" },
            doubted.join("; ")
        ));
    }
    if !missing.is_empty() {
        problems.push(format!(
            "{} baseline entr{} not measured: {}",
            missing.len(),
            if missing.len() == 1 {
                "y was"
            } else {
                "ies were"
            },
            missing.join(", ")
        ));
    }
    if !unmeasured.is_empty() {
        problems.push(format!(
            "{} gated metric{} of the baseline {} not measured: {}",
            unmeasured.len(),
            if unmeasured.len() == 1 { "" } else { "s" },
            if unmeasured.len() == 1 { "was" } else { "were" },
            unmeasured.join(", ")
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let them = if missing.len() + unmeasured.len() + doubted.len() == 1 {
        "it"
    } else {
        "them"
    };
    bail!(
        "{}: {} (pass --allow-missing to report {them} without failing{}{})",
        baseline.display(),
        problems.join("; "),
        if missing.is_empty() && unmeasured.is_empty() {
            String::new()
        } else {
            format!(", --update to drop {them}")
        },
        if unmeasured.is_empty() {
            ""
        } else {
            ", or --metric to gate only what these inputs measure"
        },
    )
}

/// `--update` with figures that could not be judged (a damaged capture, dropped events):
/// writing them would make the next healthy run look like a regression (or hide one), so
/// nothing is written.
fn refuse_doubted_update(baseline: &Path, report: &gate::GateReport) -> Result<()> {
    let doubted: Vec<String> = report
        .entries
        .iter()
        .filter_map(|e| e.doubt.as_ref().map(|d| format!("{} ({d})", e.key)))
        .collect();
    if doubted.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: not updated: {} entr{} could not be judged: {}; pass --allow-missing to keep \
         {} baseline figures and update the rest",
        baseline.display(),
        doubted.len(),
        if doubted.len() == 1 { "y" } else { "ies" },
        doubted.join("; "),
        if doubted.len() == 1 { "its" } else { "their" }
    )
}

pub fn run(args: GateArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    let writing = args.update || args.ratchet;
    let mut db = args.db.as_deref().map(GateDb::open).transpose()?;
    let measured = measure(&args, db.as_mut())?;
    let baseline = load_baseline(&args.baseline, writing)?;
    let opts = GateOptions {
        metrics: if args.metric.is_empty() {
            Metric::DEFAULT_GATED.to_vec()
        } else {
            args.metric.clone()
        },
        max_increase_percent: args.max_increase,
        max_increase_bytes: args.max_increase_bytes,
        top_ops: args.top_ops,
    };
    let report = gate::compare(&baseline, &measured, &opts);
    if !args.allow_missing && !args.update {
        refuse_unmeasured(&args.baseline, &report)?;
    }
    if args.update && !args.allow_missing {
        refuse_doubted_update(&args.baseline, &report)?;
    }
    if let Some(db) = db {
        let n = db.record(&report)?;
        db.close()?;
        eprintln!(
            "memwatch gate: recorded {n} result{} in {}",
            if n == 1 { "" } else { "s" },
            memwatch_daemon::redact(args.db.as_deref().unwrap_or_default())
        );
    }
    let format = if args.json { Format::Json } else { args.format };
    let stdout = match format {
        Format::Text => render::text::render(&report),
        Format::Markdown => render::markdown::render(&report),
        Format::Junit => render::junit::render(&report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&report).context("serialising the report")?;
            s.push('\n');
            s
        }
    };
    out!("{stdout}");
    if let Some(p) = &args.markdown_out {
        write_file(p, &render::markdown::render(&report))?;
    }
    if let Some(p) = &args.junit_out {
        write_file(p, &render::junit::render(&report))?;
    }
    if writing {
        for e in report.entries.iter().filter(|e| e.doubt.is_some()) {
            eprintln!(
                "memwatch gate: warning: {}: {}; the baseline keeps its figures",
                e.key,
                e.doubt.as_deref().unwrap_or_default(),
            );
        }
        let mode = if args.update {
            UpdateMode::Accept
        } else {
            UpdateMode::Ratchet
        };
        let new = gate::updated_baseline(&baseline, &measured, mode, args.allow_missing);
        new.save(&args.baseline)?;
        eprintln!(
            "memwatch gate: wrote {} ({} entries, {})",
            args.baseline.display(),
            new.entries.len(),
            if args.update {
                "current figures"
            } else {
                "ratcheted: lower figures kept"
            }
        );
        if args.update {
            return Ok(Outcome::Success);
        }
    }
    Ok(if report.passed {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
