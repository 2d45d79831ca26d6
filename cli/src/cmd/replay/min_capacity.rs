//! `memwatch replay --find-min-capacity`: the smallest pool (and capacity / memory
//! fraction) with which the trace fits, for one allocator or every one, found exactly
//! from one run when the model can prove it, else by bisection.

use anyhow::{Context, Result};
use memwatch_analysis::alloc::replay;
use memwatch_analysis::alloc::trace::{Trace, MAX_POOL_BYTES};
use memwatch_analysis::alloc::AllocatorKind;
use serde_json::{json, Value};

use super::output::{dump_verdict, gaps_json, print_trace_notes};
use super::runner::{fraction_for, progress_bar, spec_for, Target};
use super::{human, Outcome, ReplayArgs};

/// Searches the smallest pool for allocator `kind` (every allocator when `None`) on
/// `target` and reports it.
pub(super) fn run(
    args: &ReplayArgs,
    trace: &Trace,
    target: &Target,
    kind: Option<AllocatorKind>,
    preallocate: bool,
) -> Result<Outcome> {
    let kinds: Vec<AllocatorKind> = match kind {
        Some(k) => vec![k],
        None => AllocatorKind::ALL.to_vec(),
    };
    let mut rows = Vec::new();
    for k in kinds {
        let fraction = fraction_for(args.mem_fraction, k, target);
        let pb = progress_bar(trace.len() as u64, &format!("min pool, {}", k.name()), true);
        let t2 = target.clone();
        let make = move |limit: u64| spec_for(k, limit, preallocate, &t2);
        // Up to 64 x the peak, never past the largest pool the models take.
        let max_limit = replay::peak_live_bytes(trace)
            .saturating_mul(64)
            .clamp(1 << 30, MAX_POOL_BYTES);
        let found = replay::find_min_limit(trace, &make, 1 << 20, max_limit, &mut |n, e| {
            pb.set_message(format!("min pool, {}, replay {n}", k.name()));
            pb.set_position(e as u64);
        })
        .context("allocator model failed its own consistency check (a memwatch bug)")?;
        pb.finish_and_clear();
        rows.push((k, fraction, found));
    }
    let base = if target.recorded {
        None
    } else {
        Some(target.capacity)
    };
    if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|(k, f, m)| {
                json!({
                    "allocator": k.name(),
                    "mem_fraction": f,
                    "min_pool_bytes": m.map(|m| m.min_pool_bytes),
                    "min_capacity_bytes": m.map(|m| (m.min_pool_bytes as f64 / f).ceil() as u64),
                    "min_mem_fraction": m.and_then(|m| base.map(|c| m.min_pool_bytes as f64 / c as f64)),
                    "resolution_bytes": m.map(|m| m.resolution),
                    "exact": m.map(|m| m.exact),
                    "replays": m.map(|m| m.replays),
                })
            })
            .collect();
        outln!(
            "{}",
            json!({
                "peak_live_bytes": replay::peak_live_bytes(trace),
                "trace_gaps": gaps_json(trace),
                "oom_dump": dump_verdict(trace).map(|v| v.json()),
                "min_capacity": list,
            })
        );
    } else {
        outln!(
            "trace {} ({} events, peak live {}); smallest pool that fits:",
            args.trace.display(),
            trace.len(),
            human(replay::peak_live_bytes(trace))
        );
        print_trace_notes(trace)?;
        outln!(
            "{:<9} {:>14} {:>6} {:>16} {:>14} {:>8}  how",
            "allocator",
            "min pool",
            "frac",
            "min capacity",
            "min fraction",
            "replays"
        );
        for (k, f, m) in &rows {
            match m {
                Some(m) => outln!(
                    "{:<9} {:>14} {:>6} {:>16} {:>14} {:>8}  {}",
                    k.name(),
                    human(m.min_pool_bytes),
                    f,
                    human((m.min_pool_bytes as f64 / f).ceil() as u64),
                    base.map_or("-".into(), |c| format!(
                        "{:.4}",
                        m.min_pool_bytes as f64 / c as f64
                    )),
                    m.replays,
                    if m.exact {
                        "exact (from one run, verified)".to_string()
                    } else {
                        format!("bisection to {}", human(m.resolution))
                    }
                ),
                None => outln!("{:<9} {:>14}", k.name(), "none found"),
            }
        }
    }
    Ok(Outcome::Success)
}
