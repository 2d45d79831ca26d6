//! `memwatch replay --compare-devices`: the trace through one allocator on each device
//! named, side by side (fits or not, where it ran out, peaks).

use anyhow::Result;
use memwatch_analysis::alloc::device::DeviceProfile;
use memwatch_analysis::alloc::replay;
use memwatch_analysis::alloc::trace::Trace;
use memwatch_analysis::alloc::AllocatorKind;
use serde_json::json;

use super::output::{dump_verdict, gaps_json, print_trace_notes, run_json};
use super::runner::{fraction_for, run_one, Target};
use super::{human, Outcome, ReplayArgs};

/// Replays `trace` with allocator `kind` on every device of `devices` (each with the
/// spec it was named by) and reports them side by side.
pub(super) fn run(
    args: &ReplayArgs,
    trace: &Trace,
    devices: &[(String, DeviceProfile)],
    kind: AllocatorKind,
    preallocate: bool,
) -> Result<Outcome> {
    let mut runs = Vec::new();
    for (spec, d) in devices {
        // The spec as given: two strix-halo settings must be told apart.
        let t = Target {
            label: spec.clone(),
            ..Target::of_device(d)
        };
        runs.push(run_one(
            trace,
            &t,
            kind,
            fraction_for(args.mem_fraction, kind, &t),
            preallocate,
            false,
        )?);
    }
    let all_fit = runs.iter().all(|r| r.result.fits);
    if args.json {
        let doc = json!({
            "fits": all_fit,
            "trace_gaps": gaps_json(trace),
            "oom_dump": dump_verdict(trace).map(|v| v.json()),
            "devices": runs.iter().map(run_json).collect::<Vec<_>>(),
        });
        outln!("{doc}");
    } else {
        outln!(
            "trace {} ({} events, peak live {}), allocator {}",
            args.trace.display(),
            trace.len(),
            human(replay::peak_live_bytes(trace)),
            kind.name()
        );
        print_trace_notes(trace)?;
        outln!(
            "{:<22} {:>12} {:>6} {:>12} {:>6} {:>10} {:>12} {:>12}",
            "device",
            "capacity",
            "frac",
            "pool",
            "fits",
            "oom at",
            "peak in use",
            "peak held"
        );
        for r in &runs {
            outln!(
                "{:<22} {:>12} {:>6} {:>12} {:>6} {:>10} {:>12} {:>12}",
                r.target.label,
                human(r.target.capacity),
                r.fraction,
                human(r.limit),
                if r.result.fits { "yes" } else { "NO" },
                r.result.oom_step.map_or("-".to_string(), |s| s.to_string()),
                human(r.result.peak_bytes_in_use),
                human(r.result.peak_pool_bytes)
            );
        }
    }
    Ok(if args.fail_on_oom && !all_fit {
        Outcome::CheckFailed
    } else {
        Outcome::Success
    })
}
