//! `memwatch log`: parses XLA/JAX/TSL (and PyTorch, CuPy) logs through
//! `memwatch_analysis::log`, optionally joins each BFC OOM to an XLA dump, prints the
//! findings, and ends with the OOM doctor's verdicts from the log alone: `memwatch
//! diagnose`'s log-only path (tables, or `--json` with a `doctor` document).

use super::fmt::{bytes, clip};
use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_analysis::doctor;
use memwatch_analysis::log::{self, diagnose, LogReport};
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

/// `memwatch log FILE… [--xla-dump DIR] [--json]`
#[derive(Args)]
#[command(
    after_help = "Examples:\n  memwatch log run.log\n  memwatch log run.log --xla-dump /tmp/dump --mem-fraction 0.025\n  memwatch log node*.log --json | jq '.log.ooms[0].chunks | length'\n\nEach out-of-memory report gets a diagnosis: needed vs. available memory, too small a pool\nor fragmentation, and (with --mem-fraction) the XLA_CLIENT_MEM_FRACTION that fits. With\n--xla-dump it is joined to the failing executable's buffer assignment: which buffer the\nrequest was, what else was live, what makes the module's peak and what to change.\n\nA chunk dump cut off before its end (the chunks do not cover the pool) gives no in-use\nfigure rather than a smaller one."
)]
pub struct LogArgs {
    /// Log files (stderr of a JAX/XLA/TensorFlow run).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// XLA dump directory of the same run (`--xla_dump_to`) to explain OOMs with.
    #[arg(long)]
    xla_dump: Option<PathBuf>,
    /// The run's XLA_CLIENT_MEM_FRACTION (turns the pool size into device memory so a
    /// fitting fraction can be computed).
    #[arg(long)]
    mem_fraction: Option<f64>,
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `memwatch log`.
pub fn run(a: LogArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    if let Some(f) = a.mem_fraction {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--mem-fraction {f}: must be in (0, 1]");
        }
    }
    let mut report = LogReport::default();
    for f in &a.files {
        if f.is_dir() {
            bail!(
                "{}: is a directory; give the log file(s) in it (the program's stderr, or \
                 TF_CPP_MIN_LOG_LEVEL=0 output)",
                f.display()
            );
        }
        let file = File::open(f).with_context(|| format!("{}: cannot open log", f.display()))?;
        log::parse_log(BufReader::with_capacity(1 << 16, file), f, &mut report)?;
    }
    let mods = match &a.xla_dump {
        Some(d) => super::xla::load(d)?,
        None => Vec::new(),
    };
    let diagnoses = diagnose::diagnose(&report, &mods, a.mem_fraction);
    // The doctor's verdicts from the log alone (with the dump when given).
    let mut ev = doctor::Evidence {
        log: Some(doctor::LogEvidence {
            report: report.clone(),
            not_understood: Vec::new(),
        }),
        ..Default::default()
    };
    if let Some(d) = &a.xla_dump {
        ev.dumps = doctor::dumps::read_dumps(d)?;
    }
    let verdicts = doctor::diagnose(&ev);
    if a.json {
        let v = serde_json::json!({ "log": report, "diagnoses": diagnoses, "doctor": verdicts });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Outcome::Success);
    }
    print_human(&report, &diagnoses, a.xla_dump.is_some())?;
    outln!("\n=== The OOM doctor (memwatch diagnose) ===");
    out!("{}", super::diagnose::render(&verdicts));
    Ok(Outcome::Success)
}

fn print_human(r: &LogReport, ds: &[diagnose::Diagnosis], had_dump: bool) -> anyhow::Result<()> {
    outln!("Read {} line(s) from {} file(s).", r.lines, r.files.len());
    for d in &r.devices {
        outln!("Device: {d}");
    }
    for p in &r.pool_allocations {
        outln!(
            "Allocator pool: {} ({} B) on device {}",
            bytes(p.bytes),
            p.bytes,
            p.device
                .map(|d| d.to_string())
                .unwrap_or_else(|| "?".into())
        );
    }
    if !r.remat_warnings.is_empty() {
        outln!("\nRematerialization warnings (compile time):");
        outln!(
            "  {:>12} {:>12} {:>12}  where",
            "target",
            "achieved",
            "original"
        );
        for w in &r.remat_warnings {
            outln!(
                "  {:>12} {:>12} {:>12}  {}:{}",
                bytes(w.target_bytes),
                bytes(w.achieved_bytes),
                bytes(w.original_bytes),
                w.at.file,
                w.at.line
            );
        }
    }
    for (i, o) in r.ooms.iter().enumerate() {
        outln!(
            "\nOut of memory #{} ({}:{}): allocator {} could not allocate {} (rounded to {} B){}",
            i + 1,
            o.at.file,
            o.at.line,
            o.allocator,
            bytes(o.rounded_bytes),
            o.rounded_bytes,
            o.end
                .as_deref()
                .map(|e| format!(" from the {e} end"))
                .unwrap_or_default()
        );
        let pool = o
            .pool_bytes()
            .map(|p| format!("{} ({p} B)", bytes(p)))
            .unwrap_or_else(|| "?".into());
        match (o.in_use_bytes(), o.chunk_dump_gap()) {
            (Some(u), _) => outln!("  pool {pool}; in use {} ({u} B)", bytes(u)),
            (None, Some((covered, _))) => outln!(
                "  pool {pool}; in use unknown (the chunk dump is cut off: its chunks cover {})",
                bytes(covered)
            ),
            (None, None) => outln!("  pool {pool}; in use unknown (no chunk dump in the log)"),
        }
        if let Some(f) = o.largest_free_chunk() {
            outln!("  largest free chunk {} ({f} B)", bytes(f));
        }
        if !o.chunks.is_empty() && !o.chunk_dump_complete() {
            outln!(
                "  {} chunk line(s) of an incomplete dump (not counted)",
                o.chunks.len()
            );
        } else if !o.chunks.is_empty() {
            outln!(
                "  {} chunk(s): {} in use, {} free",
                o.chunks.len(),
                o.chunks.iter().filter(|c| c.in_use).count(),
                o.chunks.iter().filter(|c| !c.in_use).count()
            );
            for (e, b, n) in o.in_use_by_executable() {
                outln!("    {:>12} in {n:>3} chunk(s)  {}", bytes(b), clip(&e, 60));
            }
        } else if !o.in_use_by_size.is_empty() {
            for (n, s) in &o.in_use_by_size {
                outln!("    {n:>4} chunk(s) of {}", bytes(*s));
            }
        }
    }
    if !r.scratch_refusals.is_empty() {
        let shown: Vec<String> = r
            .scratch_refusals
            .iter()
            .take(5)
            .map(|x| {
                format!(
                    "{} ({}:{})",
                    x.requested_approx_bytes.map_or("?".into(), bytes),
                    x.at.file,
                    x.at.line
                )
            })
            .collect();
        outln!(
            "\nAutotuner scratch requests the pool declined (the caller tries another config; not failures): {} — {}{}",
            r.scratch_refusals.len(),
            shown.join(", "),
            if r.scratch_refusals.len() > 5 { ", …" } else { "" }
        );
    }
    for f in &r.autotune_failures {
        outln!(
            "\nAutotuning failed ({}:{}) for {}{}{}: {}{}",
            f.at.file,
            f.at.line,
            f.instruction.as_deref().unwrap_or("an instruction"),
            f.shape
                .as_deref()
                .map(|s| format!(" {s}"))
                .unwrap_or_default(),
            f.op_name
                .as_deref()
                .map(|o| format!(" (op_name {o})"))
                .unwrap_or_default(),
            f.status_code.as_deref().unwrap_or("no status"),
            f.request_approx_bytes
                .map(|b| format!(", request {}", bytes(b)))
                .unwrap_or_default()
        );
    }
    for t in &r.torch_ooms {
        let f = |v: Option<u64>| v.map_or("?".to_string(), bytes);
        outln!(
            "\nPyTorch {} out of memory ({}:{}): request {}, device total {}, free {}, allocated {}, reserved but unallocated {}{}",
            t.backend,
            t.at.file,
            t.at.line,
            f(t.request_approx_bytes),
            f(t.total_approx_bytes),
            f(t.free_approx_bytes),
            f(t.allocated_approx_bytes),
            f(t.reserved_unallocated_approx_bytes),
            t.allowed_approx_bytes
                .map(|a| format!(", fraction limit {}", bytes(a)))
                .unwrap_or_default()
        );
    }
    for c in &r.cupy_ooms {
        outln!(
            "\nCuPy out of memory ({}:{}): request {} B, allocated {}{}",
            c.at.file,
            c.at.line,
            c.request_bytes,
            c.allocated_bytes.map_or("?".into(), |b| format!("{b} B")),
            c.limit_bytes
                .map(|l| format!(", pool limit {l} B"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = r.device_alloc_failures.first() {
        outln!(
            "\nFailed device allocations: {} (the first {} B, {}:{}: {})",
            r.device_alloc_failures.len(),
            f.bytes,
            f.at.file,
            f.at.line,
            f.error
        );
    }
    for d in &r.driver_errors {
        outln!("\nDriver error {} ({}:{})", d.name, d.at.file, d.at.line);
    }
    for e in &r.resource_exhausted {
        outln!(
            "\nRESOURCE_EXHAUSTED ({}:{}){}: {}",
            e.at.file,
            e.at.line,
            e.executable
                .as_deref()
                .map(|x| format!(" in {x}"))
                .unwrap_or_default(),
            clip(&e.message, 160)
        );
    }
    for s in &r.allocator_stats {
        let label = s.label.clone().unwrap_or_else(|| s.variant.clone());
        let f = |k: &str| s.get(k).map(bytes).unwrap_or_else(|| "?".into());
        outln!("\nAllocator stats {label} ({}:{}): in use {}, peak {}, limit {}, largest free block {}", s.at.file, s.at.line, f("bytes_in_use"), f("peak_bytes_in_use"), f("bytes_limit"), f("largest_free_block_bytes"));
    }
    if r.ooms.is_empty()
        && r.remat_warnings.is_empty()
        && r.resource_exhausted.is_empty()
        && r.torch_ooms.is_empty()
        && r.cupy_ooms.is_empty()
        && r.driver_errors.is_empty()
        && r.autotune_failures.is_empty()
    {
        outln!("\nNo out-of-memory or rematerialization messages found.");
    }
    if !had_dump && !r.ooms.is_empty() {
        outln!("\nTip: add --xla-dump DIR (the run's --xla_dump_to) to learn which buffer failed and why.");
    }
    for (i, d) in ds.iter().enumerate() {
        outln!("\n=== Diagnosis of out of memory #{} ===", i + 1);
        for f in &d.findings {
            outln!("  * {f}");
        }
        if !d.module_peak_buffers.is_empty() {
            outln!("\n  The module's peak (XLA live ranges), largest buffers:");
            for b in &d.module_peak_buffers {
                outln!(
                    "    {:>11}  {:<12} {:<26} {:<22} {}",
                    bytes(b.bytes),
                    clip(&b.allocation_kind, 12),
                    clip(&b.instruction, 26),
                    clip(&b.category, 22),
                    clip(b.op_name.as_deref().unwrap_or("-"), 60)
                );
            }
        }
        if !d.module_top_temp_values.is_empty() {
            outln!("\n  Largest values placed in the temp buffer:");
            for b in d.module_top_temp_values.iter().take(5) {
                outln!(
                    "    {:>11}  {:<26} {:<28} {}",
                    bytes(b.bytes),
                    clip(&b.instruction, 26),
                    clip(&b.shape, 28),
                    clip(b.op_name.as_deref().unwrap_or("-"), 60)
                );
            }
        }
    }
    Ok(())
}
