//! A limit the configuration states but the allocator does not enforce: XLA's
//! `cuda_async` allocator reports a `bytes_limit` from the memory fraction and grows past
//! it; the `platform` allocator takes each buffer from the driver and ignores the
//! fraction altogether. The run may not fail, but the memory it leaves the device is not
//! what the user set.

use super::{exact, Ctx};
use crate::doctor::steps;
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict, When};
use crate::size::format_bytes as b;

/// Warnings for every (process, device) that ran past its stated limit.
pub fn warnings(ctx: &Ctx<'_>) -> Vec<Verdict> {
    let mut out = Vec::new();
    let Some(cap) = &ctx.ev.capture else {
        return out;
    };
    let Some(report) = &ctx.pjrt.report else {
        return out;
    };
    for p in &report.processes {
        for d in &p.devices {
            let limit = d.timeline.iter().filter_map(|s| s.bytes_limit).max();
            let peak = d.timeline.iter().map(|s| s.bytes_in_use).max();
            let (Some(limit), Some(peak)) = (limit, peak) else {
                continue;
            };
            if peak <= limit + limit / 100 {
                continue;
            }
            let at = d
                .timeline
                .iter()
                .find(|s| s.bytes_in_use == peak)
                .map_or(u64::MAX, |s| s.ts_ns);
            let allocator = ctx
                .ev
                .run
                .xla_allocator()
                .map(str::to_string)
                .unwrap_or_else(|| "the XLA allocator (not BFC: it reports no pool)".into());
            let mut v = base(ctx, p.pid, d.device, &allocator);
            v.figures.insert("limit_bytes".into(), limit);
            v.figures.insert("peak_in_use_bytes".into(), peak);
            v.evidence.push(Cite {
                file: cap.path(),
                line: None,
                what: format!(
                    "allocator statistics of pid {} device {}: bytes_limit {}, bytes_in_use up to {}",
                    p.pid,
                    d.device,
                    limit,
                    peak
                ),
            });
            add_leak(ctx, &mut v, p.pid, d.device, at);
            v.headline = format!(
                "{allocator} ran past its limit: {} in use against a stated {} limit{}.",
                b(peak),
                b(limit),
                if v.figures.contains_key("growth_per_step_bytes") {
                    ", growing step after step"
                } else {
                    ""
                }
            );
            v.why = format!(
                "The allocator reports bytes_limit {} (the memory fraction applied to the device) but its bytes in use reached {}: it does not enforce the limit, so the memory the run leaves to others is not what the fraction says.",
                exact(limit),
                exact(peak)
            );
            out.push(v);
        }
    }
    // The platform allocator keeps no statistics: the fraction from the environment,
    // the process's driver-level peak from the capture.
    if ctx.ev.run.xla_allocator() == Some("platform") {
        if let Some(frac) = ctx.ev.run.xla_fraction() {
            for ((k, dev), d) in &ctx.drivers.per {
                let Some(total) = ctx.device_total(Some(k.pid), Some(*dev)) else {
                    continue;
                };
                let has_pjrt = ctx.pjrt.executions.iter().any(|x| x.pid == k.pid);
                let limit = (frac * total as f64) as u64;
                if !has_pjrt || d.peak_bytes <= limit {
                    continue;
                }
                let mut v = base(ctx, k.pid, *dev, "platform");
                v.figures.insert("fraction_limit_bytes".into(), limit);
                v.figures.insert("peak_in_use_bytes".into(), d.peak_bytes);
                v.evidence.push(Cite {
                    file: cap.path(),
                    line: None,
                    what: format!(
                        "driver-level peak of pid {} on device {dev}: {}",
                        k.pid, d.peak_bytes
                    ),
                });
                add_leak(ctx, &mut v, k.pid, *dev, cap.runtime_ts_of(d.peak_ts));
                v.headline = format!(
                    "The platform allocator ignored the memory fraction {frac}: the process held {} of device memory, past the {} the fraction names.",
                    b(d.peak_bytes),
                    b(limit)
                );
                v.why = format!(
                    "XLA_PYTHON_CLIENT_ALLOCATOR=platform takes every buffer from the driver and ignores XLA_CLIENT_MEM_FRACTION={frac}; {frac} of the {} device is {}, and the process reached {}.",
                    b(total),
                    exact(limit),
                    exact(d.peak_bytes)
                );
                out.push(v);
            }
        }
    }
    out
}

fn base(ctx: &Ctx<'_>, pid: u32, dev: i32, allocator: &str) -> Verdict {
    let mut v = ctx.base(Kind::PoolLimitIgnored);
    v.failure = false;
    v.when = When::Run;
    v.what = Default::default();
    v.what.pid = Some(pid);
    v.what.device = Some(dev);
    v.what.allocator = Some(allocator.to_string());
    v.who = Default::default();
    v.evidence.clear();
    v.fix = Fix {
        advice: "To have the fraction enforced, use XLA's default BFC allocator (unset XLA_PYTHON_CLIENT_ALLOCATOR); with cuda_async or platform, budget the device yourself.".into(),
        check: None,
    };
    v
}

fn add_leak(ctx: &Ctx<'_>, v: &mut Verdict, pid: u32, dev: i32, at: u64) {
    if let Some(l) = steps::execution_leak(ctx.pjrt, pid, dev, at) {
        v.figures
            .insert("growth_per_step_bytes".into(), l.growth_per_step);
        v.figures.insert("steps".into(), l.steps as u64);
        v.figures.insert("first_step".into(), l.first_step as u64);
        v.who.executable = Some(l.executable.clone());
        v.also.push(Kind::Leak);
        v.fix.advice.push_str(&format!(
            " And stop keeping {}'s outputs: {} more every step from step {}.",
            l.executable,
            b(l.growth_per_step),
            l.first_step
        ));
    }
}
