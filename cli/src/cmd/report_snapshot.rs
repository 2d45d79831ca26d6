//! `memwatch report SNAPSHOT.pickle [--compare OTHER.pickle]`: a PyTorch memory snapshot
//! (`torch.cuda.memory._dump_snapshot`) reported like a capture: allocated and reserved
//! bytes at the dump, at their peaks and over time, the blocks and Python lines holding
//! memory, every OOM with the allocator's state; or two snapshots side by side.
//!
//! Owns presentation only; the numbers come from `memwatch_analysis::torch`.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use memwatch_analysis::torch::report::{DeviceReport, OomReport, SnapshotReport};
use memwatch_analysis::torch::{self, Comparison, ReportOptions, Scan};

use super::fmt::{bytes, clip, delta};
use super::report::{duration, utc, ReportArgs};
use super::Outcome;

/// Whether `path` holds a pickle (a PyTorch snapshot) rather than a capture.
pub fn is_snapshot(path: &Path) -> Result<bool> {
    let mut head = [0u8; 2];
    let mut f =
        std::fs::File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let n = f
        .read(&mut head)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(torch::looks_like_pickle(&head[..n]))
}

/// Reads a snapshot, with a progress bar on stderr for large files on a terminal.
pub fn scan(path: &Path) -> Result<Scan> {
    let file =
        std::fs::File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = (len > 64 << 20).then(|| {
        let bar = indicatif::ProgressBar::new(len);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("reading {}", path.display()));
        bar
    });
    let reader: Box<dyn Read> = match &bar {
        Some(b) => Box::new(b.wrap_read(file)),
        None => Box::new(file),
    };
    let scan = torch::scan_reader(reader, path, len);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(scan?)
}

/// Runs `memwatch report` on a snapshot.
pub fn run(args: &ReportArgs) -> Result<Outcome> {
    if args.trace || args.xla_dump.is_some() {
        anyhow::bail!(
            "{}: a PyTorch memory snapshot: --trace and --xla-dump apply to captures",
            args.capture.display()
        );
    }
    let opts = ReportOptions {
        top: args.top,
        // Comparisons match lines across the two snapshots: keep them all.
        sites: if args.compare.is_some() {
            100_000
        } else {
            args.top.max(10)
        },
        ..ReportOptions::default()
    };
    let a = torch::report(&scan(&args.capture)?, &opts)?;
    let Some(other) = &args.compare else {
        if args.json {
            print_json(&a)?;
        } else {
            out!("{}", render(&a, args.top));
        }
        return Ok(Outcome::Success);
    };
    if !is_snapshot(other)? {
        anyhow::bail!(
            "--compare {}: not a PyTorch memory snapshot (comparing works on two snapshots)",
            other.display()
        );
    }
    let b = torch::report(&scan(other)?, &opts)?;
    let c = torch::compare(&a, &b, args.top);
    if args.json {
        print_json(&c)?;
    } else {
        out!("{}", render_comparison(&c));
    }
    Ok(Outcome::Success)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v).context("cannot write JSON to stdout")?;
    writeln!(out).context("cannot write JSON to stdout")?;
    Ok(())
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One character per group of buckets: the highest allocated level in it.
fn sparkline(d: &DeviceReport, width: usize) -> String {
    let top = d
        .timeline
        .iter()
        .map(|b| b.allocated_max)
        .max()
        .unwrap_or(0);
    if top == 0 || d.timeline.is_empty() {
        return String::new();
    }
    let per = d.timeline.len().div_ceil(width);
    d.timeline
        .chunks(per)
        .map(|c| {
            let m = c.iter().map(|b| b.allocated_max).max().unwrap_or(0);
            BARS[((m as u128 * 7) / top as u128) as usize]
        })
        .collect()
}

/// An OOM's lines; `timed`: the trace has times (else the OOM's is not recorded).
fn oom_lines(o: &mut String, oom: &OomReport, timed: bool) {
    o.push_str(&format!(
        "  OOM{}: asked for {} ({} pool)\n",
        if timed {
            format!(" at {}", duration(oom.at_ns))
        } else {
            String::new()
        },
        bytes(oom.requested_bytes),
        oom.pool
    ));
    o.push_str(&format!(
        "    allocated {}, reserved {} ({} reserved but unallocated; largest free block {}); \
         the device had {} free\n",
        bytes(oom.allocated_bytes),
        bytes(oom.reserved_bytes),
        bytes(oom.reserved_unallocated_bytes),
        bytes(oom.largest_free_block_bytes),
        bytes(oom.device_free_bytes)
    ));
    if let Some(site) = &oom.site {
        o.push_str(&format!("    from {site}\n"));
    }
    for f in oom.frames.iter().filter(|f| f.is_python()).take(4) {
        o.push_str(&format!("      {}\n", f.label()));
    }
    if oom.largest_free_block_bytes < oom.requested_bytes
        && oom.reserved_unallocated_bytes >= oom.requested_bytes
    {
        o.push_str(
            "    the cache holds enough free memory, but in pieces too small: fragmentation\n",
        );
    }
}

/// The human report.
pub fn render(r: &SnapshotReport, top: usize) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "PyTorch memory snapshot {} ({}){}\n",
        r.file,
        bytes(r.file_bytes),
        r.start_time_unix_us
            .map(|t| format!(", trace from {}", utc(u64::try_from(t).unwrap_or(0) * 1000)))
            .unwrap_or_default()
    ));
    // Older PyTorch versions wrote trace entries without `time_us`: no time is known.
    let timed = r.start_time_unix_us.is_some();
    let at = |ns: u64| {
        if timed {
            format!(" at {}", duration(ns))
        } else {
            String::new()
        }
    };
    let s = &r.allocator_settings;
    let mut settings = vec![format!(
        "expandable_segments={}",
        s.expandable_segments
            .map_or("unknown".to_string(), |e| e.to_string())
    )];
    settings.push(format!(
        "max_split_size={}",
        s.max_split_size.map_or("unlimited".to_string(), bytes)
    ));
    if let Some(c) = s.conf.as_ref().filter(|c| !c.is_empty()) {
        settings.push(format!("PYTORCH_CUDA_ALLOC_CONF={c:?}"));
    }
    o.push_str(&format!("allocator: {}\n", settings.join(", ")));
    for (name, n) in &r.unknown_actions {
        o.push_str(&format!(
            "note: {n} trace entries of unknown action {name:?} skipped\n"
        ));
    }
    for d in &r.devices {
        let actions: Vec<String> = d.actions.iter().map(|(a, n)| format!("{n} {a}")).collect();
        o.push_str(&format!(
            "\ndevice {}: {} trace entries {}{}\n",
            d.device,
            d.trace_entries,
            if timed || d.trace_entries == 0 {
                format!("over {}", duration(d.duration_ns))
            } else {
                "(no times recorded: the snapshot's trace entries have no time_us)".to_string()
            },
            if actions.is_empty() {
                String::new()
            } else {
                format!(" ({})", actions.join(", "))
            }
        ));
        o.push_str(&format!(
            "  at the dump      allocated {}, reserved {} in {} segments, active {}\n",
            bytes(d.allocated_bytes),
            bytes(d.reserved_bytes),
            d.segments,
            bytes(d.active_bytes)
        ));
        o.push_str(&format!(
            "  peak allocated   {}{}\n  peak reserved    {}{}\n",
            bytes(d.peak_allocated.bytes),
            at(d.peak_allocated.at_ns),
            bytes(d.peak_reserved.bytes),
            at(d.peak_reserved.at_ns)
        ));
        let line = sparkline(d, 60);
        if !line.is_empty() && timed {
            o.push_str(&format!("  allocated        {line}\n"));
        }
        if d.before_trace.blocks + d.before_trace.segments > 0 {
            o.push_str(&format!(
                "  before the trace's first entry (earlier entries were dropped): {} allocated in {} blocks, {} reserved\n",
                bytes(d.before_trace.allocated_bytes),
                d.before_trace.blocks,
                bytes(d.before_trace.reserved_bytes)
            ));
        }
        if !d.at_peak.by_site.is_empty() {
            o.push_str("  at the allocated peak, by line:\n");
            for s in d.at_peak.by_site.iter().take(top) {
                o.push_str(&format!(
                    "    {:>11}  {:>5} block{}  {}\n",
                    bytes(s.bytes),
                    s.blocks,
                    if s.blocks == 1 { " " } else { "s" },
                    s.site
                ));
            }
        }
        if !d.at_peak.blocks.is_empty() {
            o.push_str("  largest blocks at the allocated peak:\n");
            for b in d.at_peak.blocks.iter().take(top) {
                o.push_str(&format!(
                    "    {:>11}  {}  {}\n",
                    bytes(b.size),
                    b.allocated_at_ns
                        .map_or("before the trace".to_string(), |t| format!(
                            "allocated{}",
                            if timed {
                                at(t)
                            } else {
                                " in the trace".to_string()
                            }
                        )),
                    clip(b.site.as_deref().unwrap_or("(no Python frame)"), 80)
                ));
            }
        }
        for oom in &d.ooms {
            oom_lines(&mut o, oom, timed);
        }
        if d.ooms_total > d.ooms.len() as u64 {
            o.push_str(&format!(
                "  … and {} more OOMs (--json lists the first {})\n",
                d.ooms_total - d.ooms.len() as u64,
                d.ooms.len()
            ));
        }
        let c = &d.end_check;
        if c.consistent() {
            o.push_str(&format!(
                "  replay: ends on the dump's {} blocks exactly\n",
                c.blocks
            ));
        } else {
            o.push_str(&format!(
                "  replay: differs from the dump ({} size, {} state mismatches, {} missing, {} extra blocks; allocated {} vs {}, reserved {} vs {})\n",
                c.size_mismatches,
                c.state_mismatches,
                c.missing,
                c.extra,
                bytes(c.replayed_allocated),
                bytes(c.dump_allocated),
                bytes(c.replayed_reserved),
                bytes(c.dump_reserved)
            ));
            for e in &c.examples {
                o.push_str(&format!("    {e}\n"));
            }
        }
    }
    o
}

fn delta_row(o: &mut String, what: &str, d: &torch::compare::Delta) {
    o.push_str(&format!(
        "  {what:<18} {:>12} {:>12} {:>12}\n",
        bytes(d.a),
        bytes(d.b),
        delta(d.delta)
    ));
}

/// The human comparison.
pub fn render_comparison(c: &Comparison) -> String {
    let mut o = format!("A: {}\nB: {}\n", c.a.file, c.b.file);
    for d in &c.devices {
        o.push_str(&format!(
            "\ndevice {}{}\n  {:<18} {:>12} {:>12} {:>12}\n",
            d.device,
            match (d.in_a, d.in_b) {
                (true, false) => " (only in A)",
                (false, true) => " (only in B)",
                _ => "",
            },
            "",
            "A",
            "B",
            "B - A"
        ));
        delta_row(&mut o, "allocated at dump", &d.allocated_bytes);
        delta_row(&mut o, "reserved at dump", &d.reserved_bytes);
        delta_row(&mut o, "peak allocated", &d.peak_allocated_bytes);
        delta_row(&mut o, "peak reserved", &d.peak_reserved_bytes);
        o.push_str(&format!(
            "  {:<18} {:>12} {:>12} {:>12}\n",
            "OOMs",
            d.ooms.a,
            d.ooms.b,
            format!("{:+}", d.ooms.delta)
        ));
        if !d.sites_at_peak.is_empty() {
            o.push_str("  at the allocated peak, by line (largest change first):\n");
            for s in &d.sites_at_peak {
                o.push_str(&format!(
                    "    {:>12} {:>12} {:>12}  {}\n",
                    bytes(s.a),
                    bytes(s.b),
                    delta(s.delta),
                    s.site
                ));
            }
        }
    }
    o
}
