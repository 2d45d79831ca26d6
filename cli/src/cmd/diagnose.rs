//! `memwatch diagnose CAPTURE|LOG|SNAPSHOT... [--xla-dump DIR] [--json]`: the OOM
//! doctor over saved files. Owns telling the inputs apart by their content (a capture by
//! its magic, nvidia-smi CSV by its first line, a PyTorch snapshot by the pickle header,
//! anything else a log), loading them into the doctor's evidence, and printing the
//! verdicts (text or one JSON document). `memwatch run` and `memwatch log` print the
//! same verdicts through [`render`].

use super::fmt::bytes;
use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_analysis::doctor::{
    self, evidence, CaptureEvidence, Diagnosis, Evidence, LogEvidence,
};
use std::io::Read;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
Examples:
  memwatch diagnose run.mwcap stderr.log --xla-dump /tmp/dump
  memwatch diagnose run.mwcap stderr.log --xla-dump dump/    # dump/rank0, dump/rank1 ...
  memwatch diagnose train.log                      # the log alone
  memwatch diagnose run.mwcap stderr.log nvsmi.csv --json | jq '.verdicts[0].kind'

Inputs are told apart by their content: a memwatch capture (.mwcap), nvidia-smi samples
(--query-gpu=[index,]timestamp,memory.used,memory.total --format=csv,noheader,nounits), a PyTorch
memory snapshot (torch.cuda.memory._dump_snapshot: the allocator's own steps, so a
leak's growth per step), and logs (the program's stderr:
XLA/TSL, PyTorch, CuPy, CUDA/HIP errors, Python tracebacks). One verdict per failure:
its kind (execute_temp, compile_scratch, leak, fragmentation, pool_limit_ignored,
co_resident, torch_fraction_limit, cupy_pool_limit, host_pinned, larger_than_device,
other_process, other_framework_pool, missing_donation, pool_too_small, unexplained; a run
that exited 0 after refusals gets a `recovered` warning), what/when/who/why with the
figures and the holder it blames, the fix and whether memwatch checked it, and the
evidence as file:line. Under the verdicts, the device ledger: every byte of the failing
device by holder (framework pools, driver allocations, context, other processes, free)
and whether it adds up to the device's total. Evidence that is missing is named with
what it would add; a log memwatch does not understand is said, not fatal.
--env gives the allocator settings the run had (memwatch run records them itself).";

/// Arguments of `memwatch diagnose`.
#[derive(Args)]
#[command(after_help = AFTER_HELP)]
pub struct DiagnoseArgs {
    /// Captures, logs, device samples (told apart by content).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The run's XLA dump (`--xla_dump_to`): names the HLO instruction, op_name and
    /// source line, and the temp buffer's make-up. Repeat it for the dumps of several
    /// workers, or give a folder of per-rank dumps (dump/rank0, dump/rank1 ...): the
    /// failing process's own dump is chosen by its executables' compiled sizes.
    #[arg(long, value_name = "DIR")]
    xla_dump: Vec<PathBuf>,
    /// An environment variable the run had (repeatable), e.g. --env
    /// XLA_PYTHON_CLIENT_ALLOCATOR=platform: the allocator settings the doctor checks.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// One JSON document on stdout (figures as integers, evidence as file:line).
    #[arg(long)]
    json: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not of the form NAME=VALUE")),
    }
}

/// What a file is, by its content.
enum Input {
    Capture,
    Samples,
    Snapshot,
    Log,
}

fn classify(path: &Path) -> Result<Input> {
    if path.is_dir() {
        bail!(
            "{}: is a directory; give files (a capture, logs), and an XLA dump with --xla-dump",
            path.display()
        );
    }
    let mut f =
        std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut head = [0u8; 512];
    let n = f
        .read(&mut head)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let head = &head[..n];
    if head.starts_with(&memwatch_wire::MAGIC) {
        return Ok(Input::Capture);
    }
    if memwatch_analysis::torch::looks_like_pickle(head) {
        return Ok(Input::Snapshot);
    }
    let first = String::from_utf8_lossy(head);
    if evidence::looks_like_nvsmi(first.lines().next().unwrap_or("")) {
        return Ok(Input::Samples);
    }
    Ok(Input::Log)
}

/// Loads every input into the doctor's evidence.
pub fn load_evidence(
    files: &[PathBuf],
    dumps: &[PathBuf],
    env: &[(String, String)],
) -> Result<Evidence> {
    let mut ev = Evidence::default();
    let mut logs = Vec::new();
    for f in files {
        match classify(f)? {
            Input::Capture => {
                if let Some(c) = &ev.capture {
                    bail!(
                        "{}: a second capture ({} was given first); diagnose one run at a time",
                        f.display(),
                        c.path()
                    );
                }
                ev.capture = Some(CaptureEvidence::read(f)?);
            }
            Input::Samples => ev.device_samples.extend(evidence::read_nvsmi_csv(f)?),
            Input::Snapshot => ev
                .framework_states
                .extend(doctor::snapshot::framework_states(f)?),
            Input::Log => logs.push(f.clone()),
        }
    }
    if !logs.is_empty() {
        ev.log = Some(LogEvidence::read(&logs)?);
    }
    evidence::add_capture_samples(&mut ev);
    for d in dumps {
        ev.dumps.extend(doctor::dumps::read_dumps(d)?);
    }
    apply_env(&mut ev, env);
    Ok(ev)
}

/// The run's environment: given on the command line, else what `memwatch run` recorded
/// in the capture (`env.NAME` tags; `env` marks that it recorded them).
pub fn apply_env(ev: &mut Evidence, env: &[(String, String)]) {
    if let Some(c) = &ev.capture {
        for (k, v) in &c.loaded.tags {
            if let Some(name) = k.strip_prefix("env.") {
                ev.run.env.insert(name.to_string(), v.clone());
            }
        }
        ev.env_known |= c.loaded.tags.contains_key("env");
        // How the command ended, as `memwatch run` recorded it; else the processes' own
        // exits (a capture of another tool, or of an older memwatch).
        let tag = |k: &str| c.loaded.tags.get(k).and_then(|v| v.parse::<i32>().ok());
        use memwatch_analysis::doctor::evidence::{COMMAND_EXIT_TAG, COMMAND_SIGNAL_TAG};
        if ev.run.exit_code.is_none() && ev.run.signal.is_none() {
            ev.run.exit_code = tag(COMMAND_EXIT_TAG);
            ev.run.signal = tag(COMMAND_SIGNAL_TAG);
        }
        if ev.run.exit_code.is_none() && ev.run.signal.is_none() {
            ev.run.exit_code = c
                .loaded
                .processes
                .values()
                .filter_map(|p| p.exit_code)
                .find(|c| *c != 0)
                .or_else(|| c.loaded.processes.values().find_map(|p| p.exit_code));
        }
    }
    for (k, v) in env {
        ev.run.env.insert(k.clone(), v.clone());
        ev.env_known = true;
    }
}

/// Runs `memwatch diagnose`.
pub fn run(a: DiagnoseArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    let ev = load_evidence(&a.files, &a.xla_dump, &a.env)?;
    let d = doctor::diagnose(&ev);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        out!("{}", render(&d));
    }
    Ok(Outcome::Success)
}

/// The verdicts as text.
pub fn render(d: &Diagnosis) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "diagnosis: {}", d.headline);
    for (i, v) in d.verdicts.iter().enumerate() {
        let mut place = Vec::new();
        if let Some(p) = v.what.pid {
            place.push(format!("pid {p}"));
        }
        if let Some(dev) = v.what.device {
            place.push(format!("device {dev}"));
        }
        let _ = writeln!(
            s,
            "\n[{}] {} — {} ({}{}{})",
            i + 1,
            v.kind.name(),
            if v.failure { "failure" } else { "warning" },
            serde_json::to_value(v.when)
                .ok()
                .and_then(|x| x.as_str().map(str::to_string))
                .unwrap_or_default(),
            if place.is_empty() { "" } else { ", " },
            place.join(", ")
        );
        let _ = writeln!(s, "    {}", v.headline);
        let mut what = Vec::new();
        if let Some(r) = v.what.request_bytes {
            what.push(format!(
                "request {}{}",
                bytes(r),
                if v.what.request_exact {
                    format!(" ({r} B)")
                } else {
                    " (as printed)".into()
                }
            ));
        }
        if let Some(a) = &v.what.allocator {
            what.push(format!("allocator {a}"));
        }
        if let Some(r) = &v.what.result {
            what.push(r.clone());
        }
        if !what.is_empty() {
            let _ = writeln!(s, "    what:  {}", what.join(", "));
        }
        let mut who = Vec::new();
        if let Some(e) = &v.who.executable {
            who.push(e.clone());
        }
        if let Some(h) = &v.who.hlo_instruction {
            who.push(format!("HLO {h}"));
        }
        if let Some(o) = &v.who.op_name {
            who.push(format!("op_name {o}"));
        }
        if let Some(src) = &v.who.source {
            who.push(format!("source {src}"));
        }
        if let Some(p) = &v.who.python_frame {
            who.push(format!("Python {p}"));
        }
        if !who.is_empty() {
            let _ = writeln!(s, "    who:   {}", who.join("; "));
        }
        let _ = writeln!(s, "    why:   {}", v.why);
        if !v.figures.is_empty() {
            let f: Vec<String> = v.figures.iter().map(|(k, x)| format!("{k}={x}")).collect();
            let _ = writeln!(s, "    figures: {}", f.join(" "));
        }
        let _ = writeln!(s, "    fix:   {}", v.fix.advice);
        match &v.fix.check {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "           {} ({}): {}",
                    if c.passed { "checked" } else { "CHECK FAILED" },
                    c.method,
                    c.detail
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "           (not checked: memwatch cannot check this fix)"
                );
            }
        }
        if !v.also.is_empty() {
            let a: Vec<&str> = v.also.iter().map(|k| k.name()).collect();
            let _ = writeln!(s, "    also:  {}", a.join(", "));
        }
        for c in &v.evidence {
            let _ = writeln!(s, "      {}  {}", c.location(), c.what);
        }
    }
    if let Some(l) = &d.ledger {
        s.push_str(&render_ledger(l));
    }
    if d.devices.len() > 1 {
        let _ = writeln!(s, "\nper device (driver-level peaks):");
        for p in &d.devices {
            let _ = writeln!(
                s,
                "  pid {:<7} device {} {}: peak {} at {:.3} s",
                p.pid,
                p.device,
                p.device_name.as_deref().unwrap_or(""),
                bytes(p.peak_bytes),
                p.peak_ns as f64 / 1e9
            );
        }
    }
    if let Some(i) = &d.imbalance {
        let _ = writeln!(
            s,
            "\nsplit over the devices ({}, peak up to the failure; even share {}%):",
            i.measure.describe(),
            i.even_share_permille / 10
        );
        for x in &i.devices {
            let mut more = Vec::new();
            if let Some(a) = x.allocator_peak_bytes_in_use {
                more.push(format!("allocator peak_bytes_in_use {}", bytes(a)));
            }
            more.push(format!("driver-level peak {}", bytes(x.driver_peak_bytes)));
            let _ = writeln!(
                s,
                "  pid {:<7} device {}: {} ({:.1}%){}; {}",
                x.pid,
                x.device,
                bytes(x.bytes),
                x.share_permille as f64 / 10.0,
                if x.failed { " <- ran out" } else { "" },
                more.join(", ")
            );
        }
    }
    for src in d.sources.iter().filter(|s| s.note.is_some()) {
        let _ = writeln!(
            s,
            "\nnote: {} {}: {}",
            src.kind,
            src.path,
            src.note.as_deref().unwrap_or("")
        );
    }
    if !d.missing.is_empty() {
        let _ = writeln!(s, "\nmissing evidence (what it would add):");
        for m in &d.missing {
            let _ = writeln!(s, "  - {}: {}", m.evidence, m.would_add);
        }
    }
    s
}

/// The device ledger as a small table: holder, bytes, share of the device, trend; then
/// whether it closes.
pub fn render_ledger(l: &memwatch_analysis::doctor::ledger::Ledger) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let at = l
        .at_ns
        .map(|t| format!(" at {:.3} s", t as f64 / 1e9))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "\ndevice {} ledger ({}{at}{}):",
        l.device,
        if l.moment == "failure" {
            "at the failure"
        } else {
            "at the peak; the run did not fail"
        },
        l.total_bytes
            .map(|t| format!(", total {}", bytes(t)))
            .unwrap_or_default()
    );
    let share = |n: u64| match l.total_bytes.filter(|t| *t > 0) {
        Some(t) => format!("{:>5.1}%", n as f64 * 100.0 / t as f64),
        None => "    ?".into(),
    };
    for h in &l.holders {
        let mut inside = Vec::new();
        if let Some(u) = h.in_use_bytes {
            inside.push(format!("in use {}", bytes(u)));
        }
        if let Some(f) = h.free_inside_bytes {
            inside.push(format!("free inside {}", bytes(f)));
        }
        if let Some(f) = h.largest_free_block_bytes {
            inside.push(format!("largest free {}", bytes(f)));
        }
        let trend = h
            .trend
            .as_ref()
            .map(|t| {
                if t.steps > 0 {
                    format!(
                        "+{} per {} ({} steps)",
                        bytes(t.bytes_per_unit),
                        t.unit,
                        t.steps
                    )
                } else {
                    format!("+{} per {}", bytes(t.bytes_per_unit), t.unit)
                }
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {:<58} {:>11} {}{}{}",
            super::fmt::clip(&h.name, 58),
            bytes(h.bytes),
            share(h.bytes),
            if inside.is_empty() {
                String::new()
            } else {
                format!("  [{}]", inside.join(", "))
            },
            if trend.is_empty() {
                String::new()
            } else {
                format!("  {trend}")
            }
        );
    }
    let _ = writeln!(s, "  {}", l.closing_line());
    s
}
