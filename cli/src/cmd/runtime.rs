//! `memwatch runtime`: the PJRT part of a capture (issue 9) through
//! `memwatch_analysis::runtime`: per device the framework allocator's own timeline, the
//! executable running at the runtime peak, co-resident buffers, OOMs inside execute, and
//! with `--xla-dump` the join to the executable's buffer assignment. Output only.

use super::fmt::{bytes, clip};
use super::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use memwatch_analysis::runtime::{self, RuntimeReport};
use std::path::PathBuf;

/// `memwatch runtime CAPTURE [--xla-dump DIR] [--top N] [--timeline] [--json]`
#[derive(Args)]
#[command(
    after_help = "Examples:\n  memwatch run --out run.mwcap -- python train.py\n  memwatch runtime run.mwcap\n  XLA_FLAGS=--xla_dump_to=/tmp/dump memwatch run --out run.mwcap -- python train.py\n  memwatch runtime run.mwcap --xla-dump /tmp/dump --top 5\n  memwatch runtime run.mwcap --json --timeline | jq '.processes[0].devices[0].peak'\n\nThe shim wraps the PJRT C API of XLA plugins (JAX's xla_cuda_plugin / xla_rocm_plugin):\nit samples the allocator's PJRT_Device_MemoryStats (bytes in use, peak, pool, limit;\nMEMWATCH_PJRT_SAMPLE_HZ, default 10, plus after each execute), records executables with\ntheir compiled memory statistics, executions and jax.Array buffers. The runtime peak is\nthe largest peak_bytes_in_use sampled; the executable running at it is the one whose\nexecution overlaps the window in which the peak was reached."
)]
pub struct RuntimeArgs {
    /// Capture file written by `memwatch run` (or MEMWATCH_SINK=file:...).
    capture: PathBuf,
    /// XLA dump directory of the same run (`--xla_dump_to`) to join executables to.
    #[arg(long)]
    xla_dump: Option<PathBuf>,
    /// How many HLO buffers / op_names to list per joined executable.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Include every memory-statistics sample (JSON) / a compact timeline (text).
    #[arg(long)]
    timeline: bool,
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// List every OOM inside execute (default: the first 20 of each process;
    /// `ooms_total` counts them all).
    #[arg(long)]
    all_ooms: bool,
}

/// Runs `memwatch runtime`.
pub fn run(a: RuntimeArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    let cap = runtime::load_capture(&a.capture).context("reading capture")?;
    let mut report = runtime::analyse(&cap, a.timeline);
    report.list_ooms(ooms_listed(a.all_ooms));
    if report.damaged_regions > 0 {
        // On stderr, like `memwatch report`'s (which reads the same capture and says it
        // there): stdout stays the report, or one JSON document (`damaged_regions`).
        eprintln!(
            "memwatch runtime: warning: {}: damaged capture, {} damaged region(s) skipped; \
             reporting what was readable",
            a.capture.display(),
            report.damaged_regions
        );
    }
    if let Some(d) = &a.xla_dump {
        let mods = super::xla::load(d)?;
        runtime::join_dump(&mut report, &mods, a.top);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report, a.timeline)?;
        for p in &report.processes {
            for c in &p.failed_compiles {
                outln!(
                    "process {}: a compile failed at t={} ns ({}) after {:.3} s: memory it asked \
                     for (autotuning scratch) is not in the figures above; `memwatch diagnose {} \
                     STDERR --xla-dump DIR` explains it",
                    p.pid,
                    c.ts_ns,
                    memwatch_analysis::doctor::failure::result_code_name(c.result),
                    c.duration_ns as f64 / 1e9,
                    a.capture.display()
                );
            }
        }
    }
    Ok(Outcome::Success)
}

/// The runtime section of `memwatch report`: `None` when the capture holds no PJRT
/// records (a program that is not an XLA/PJRT framework).
pub fn for_report(
    capture: &std::path::Path,
    xla_dump: Option<&std::path::Path>,
    top: usize,
    all_ooms: bool,
) -> Result<Option<RuntimeReport>> {
    let cap = runtime::load_capture(capture).context("reading capture")?;
    if cap.executables.is_empty() && cap.stats.is_empty() && cap.events.is_empty() {
        return Ok(None);
    }
    let mut report = runtime::analyse(&cap, false);
    report.list_ooms(ooms_listed(all_ooms));
    if let Some(d) = xla_dump {
        let mods = super::xla::load(d)?;
        runtime::join_dump(&mut report, &mods, top);
    }
    Ok(Some(report))
}

/// How many OOMs per process `--all-ooms` (or its absence) lists.
pub fn ooms_listed(all: bool) -> Option<usize> {
    (!all).then_some(runtime::OOMS_LISTED)
}

fn opt(b: Option<u64>) -> String {
    b.map(bytes).unwrap_or_else(|| "-".into())
}

/// Prints the report as text.
pub fn print_human(r: &RuntimeReport, timeline: bool) -> anyhow::Result<()> {
    if r.processes.is_empty() {
        outln!("no PJRT records in this capture (was the program an XLA/PJRT framework, and MEMWATCH_PJRT not 0?)");
    }
    for p in &r.processes {
        outln!("process {}", p.pid);
        outln!(
            "  {:<28} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11}",
            "executable",
            "runs",
            "failed",
            "argument",
            "output",
            "temp",
            "code"
        );
        for x in &p.executables {
            outln!(
                "  {:<28} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11}",
                clip(&x.name, 28),
                x.executions,
                x.failed_executions,
                opt(x.argument_bytes),
                opt(x.output_bytes),
                opt(x.temp_bytes),
                opt(x.generated_code_bytes)
            );
        }
        if p.devices.is_empty() {
            // Without samples there is no runtime peak to attribute; say why that can be.
            outln!(
                "  no allocator samples: the allocator reported no memory statistics \
                 (XLA's platform allocator keeps none), or MEMWATCH_PJRT_SAMPLE_HZ=0 \
                 and no execute completed"
            );
        }
        for d in &p.devices {
            outln!(
                "  device {}: {} allocator samples, pool up to {}, limit {}",
                d.device,
                d.samples,
                opt(d.max_pool_bytes),
                opt(d.last.as_ref().and_then(|s| s.bytes_limit))
            );
            if timeline {
                for s in &d.timeline {
                    outln!(
                        "    t={:>14} ns in use {:>11} peak {:>11} pool {:>11}",
                        s.ts_ns,
                        bytes(s.bytes_in_use),
                        opt(s.peak_bytes_in_use),
                        opt(s.pool_bytes)
                    );
                }
            }
            let Some(pk) = &d.peak else { continue };
            outln!(
                "    runtime peak {} (reached between t={} and t={} ns)",
                bytes(pk.peak_bytes_in_use),
                pk.window_start_ns,
                pk.ts_ns
            );
            outln!(
                "    running: {}",
                pk.executable
                    .as_deref()
                    .unwrap_or("(no execution recorded)")
            );
            for g in &pk.co_resident {
                outln!(
                    "      live {:>11} in {:>4} buffer(s) from {}",
                    bytes(g.bytes),
                    g.count,
                    g.producer
                );
            }
            outln!(
                "      + temp {:>10} of {}",
                bytes(pk.running_temp_bytes),
                pk.executable.as_deref().unwrap_or("-")
            );
            outln!(
                "      = {} explained, {} not covered (allocator rounding, non-PJRT buffers)",
                bytes(pk.explained_bytes),
                bytes(pk.unexplained_bytes)
            );
            if let Some(j) = &pk.xla {
                print_join(j)?;
            }
        }
        for o in &p.ooms {
            outln!(
                "  OOM in execute of {} on device {} at t={} ns: requested {}, compiled temp {}",
                o.executable,
                o.device,
                o.ts_ns,
                opt(o.requested_bytes),
                opt(o.compiled_temp_bytes)
            );
            if let Some(exact) = o.exact_request_bytes {
                outln!(
                    "    the failed request is {}'s temp buffer: {} B compiled, {exact} B after BFC's 256-byte rounding",
                    o.executable,
                    o.compiled_temp_bytes.unwrap_or(exact)
                );
            }
            if let Some(s) = &o.last_stats {
                outln!(
                    "    last allocator stats: in use {}, largest free block {}, limit {}",
                    bytes(s.bytes_in_use),
                    opt(s.largest_free_block_bytes),
                    opt(s.bytes_limit)
                );
            }
            for g in &o.co_resident {
                outln!("    live {:>11} from {}", bytes(g.bytes), g.producer);
            }
            if let Some(j) = &o.xla {
                print_join(j)?;
            }
        }
        let more = p.ooms_total.saturating_sub(p.ooms.len() as u64);
        if more > 0 {
            outln!(
                "  ... {more} more OOMs in execute ({} in all; --all-ooms lists them)",
                p.ooms_total
            );
        }
    }
    Ok(())
}

fn print_join(j: &runtime::DumpJoin) -> anyhow::Result<()> {
    outln!(
        "      XLA module {} (matched by {}): argument {}, output {}, temp {}",
        j.module,
        j.matched_by,
        bytes(j.argument_bytes),
        bytes(j.output_bytes),
        bytes(j.temp_bytes)
    );
    for b in &j.peak_buffers {
        outln!(
            "        {:>11} {:<9} {:<34} {}",
            bytes(b.bytes),
            clip(&b.category, 9),
            clip(&b.instruction, 34),
            b.op_name.as_deref().unwrap_or("")
        );
    }
    for g in &j.by_op_name {
        outln!(
            "        op {:>11} x{:<4} {}",
            bytes(g.bytes),
            g.count,
            clip(&g.key, 80)
        );
    }
    Ok(())
}
