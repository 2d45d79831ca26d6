//! A leak: memory that grows step after step and is never released — the same
//! executable's outputs outliving their step (an XLA program's steps are its
//! executions), or the same group of allocations repeating in a framework allocator's
//! segments. Raising a limit only moves the crash; the fix is to release what each step
//! keeps.

use super::{exact, Ctx};
use crate::doctor::ledger::HolderKind;
use crate::doctor::steps::{self, AllocationGrowth};
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

/// A failure whose live set is mostly one executable's step outputs.
pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let (pid, dev) = ctx.at()?;
    let at = ctx.failure_rt();
    let l = steps::execution_leak(ctx.pjrt, pid, dev, at)?;
    let pool = ctx.pool_state();
    let in_use = pool
        .in_use
        .unwrap_or_else(|| ctx.pjrt.live_at(pid, dev, at).map(|b| b.size).sum());
    // The kept outputs explain the failure only when without them it would have fit,
    // and when they, not the request, are what filled the pool: kept outputs smaller
    // than the failing request (e.g. a model's parameters, made by one executable in a
    // loop and kept as the next one's arguments) leave the request as the cause.
    let req = ctx.failure.and_then(|f| f.request).unwrap_or(0);
    let without = in_use.saturating_sub(l.leaked_bytes).saturating_add(req);
    if l.leaked_bytes.saturating_mul(4) < in_use
        || l.leaked_bytes < req
        || pool.pool.or(pool.limit).is_some_and(|p| without > p)
    {
        return None;
    }
    let mut v = ctx.base(Kind::Leak);
    fill(&mut v, &l);
    if let Some(p) = pool.pool.or(pool.limit) {
        v.figures.insert("pool_bytes".into(), p);
    }
    v.figures.insert("in_use_bytes".into(), in_use);
    v.evidence.extend(pool.cites.clone());
    let cut = ctx.failure.is_some_and(|f| !f.seen_in_capture)
        && ctx
            .ev
            .capture
            .as_ref()
            .is_some_and(|c| !c.loaded.damage.is_empty());
    v.headline = if cut {
        format!(
            "A leak: {} left {} live after every step from step {} on ({} steps before the capture stops).",
            l.executable,
            b(l.growth_per_step),
            l.first_step,
            l.steps
        )
    } else {
        format!(
            "A leak: {} left {} live after every step from step {} on; after {} steps they filled the pool.",
            l.executable,
            b(l.growth_per_step),
            l.first_step,
            l.steps
        )
    };
    v.why = format!(
        "{} ran {} times; the outputs of its runs {}..{} are all still live ({} of {} in use at the failure, {} per step). The failing request{} is not the cause: any request would have failed once the kept outputs filled the pool.",
        l.executable,
        l.steps,
        l.first_step,
        l.steps.saturating_sub(2),
        exact(l.leaked_bytes),
        b(in_use),
        b(l.growth_per_step),
        v.what
            .request_bytes
            .map(|r| format!(" ({})", b(r)))
            .unwrap_or_default()
    );
    v.fix = Fix {
        advice: format!(
            "Stop keeping each step's output alive (a list of results, a history, a reference held across steps): keep host copies (np.asarray / .item()) or only the last one. A larger pool only moves the crash by {} per step.",
            b(l.growth_per_step)
        ),
        check: pool.pool.or(pool.limit).map(|p| Check {
            method: "recorded_figures".into(),
            passed: without <= p,
            detail: format!(
                "without the kept outputs the failing step needs {} of the {} pool",
                b(without),
                b(p)
            ),
        }),
    };
    Some(v)
}

fn fill(v: &mut Verdict, l: &steps::ExecutionLeak) {
    v.who.executable = Some(l.executable.clone());
    v.figures
        .insert("growth_per_step_bytes".into(), l.growth_per_step);
    v.figures.insert("first_step".into(), l.first_step as u64);
    v.figures.insert("steps".into(), l.steps as u64);
    v.figures.insert("leaked_bytes".into(), l.leaked_bytes);
}

/// A leak the failing process's driver allocations show by themselves: growth up to the
/// failure by the one growth rule (`steps::growth_until`).
pub fn ramp(ctx: &Ctx<'_>) -> Option<Verdict> {
    let (pid, dev) = ctx.at()?;
    let d = ctx.drivers.of(pid, dev)?;
    let g = steps::growth_until(&d.live_at_checkpoint, ctx.drivers.checkpoint_ts)?;
    let mut v = from_growth(ctx, &g, None);
    if let Some(r) = ctx.failure.and_then(|f| f.request) {
        v.figures.insert("request_bytes".into(), r);
    }
    Some(v)
}

/// A leak seen as repeating driver allocations (a framework's segments); `limit`: the
/// limit it ran into (name, bytes).
pub fn from_growth(ctx: &Ctx<'_>, g: &AllocationGrowth, limit: Option<(&str, u64)>) -> Verdict {
    let mut v = ctx.base(Kind::Leak);
    v.figures
        .insert("growth_per_step_bytes".into(), g.per_group);
    v.figures.insert("repetitions".into(), g.repetitions as u64);
    v.figures.insert("leaked_bytes".into(), g.total);
    let start = ctx
        .ev
        .capture
        .as_ref()
        .map_or(0, |c| g.started_ts.saturating_sub(c.loaded.base_ns()));
    v.evidence.push(Cite {
        file: ctx.capture_path(),
        line: None,
        what: format!(
            "{} groups of {} allocations ({} each) from {:.3} s on, none released",
            g.repetitions,
            g.period,
            b(g.per_group),
            start as f64 / 1e9
        ),
    });
    let secs = g.ended_ts.saturating_sub(g.started_ts) as f64 / 1e9;
    let rate = if secs > 0.0 {
        format!(" ({}/s)", b((g.total as f64 / secs) as u64))
    } else {
        String::new()
    };
    v.headline = if g.period == 1 {
        format!(
            "A leak: {} allocations of {} one after another, none released, up to the failure{}{rate}.",
            g.repetitions,
            b(g.per_group),
            limit
                .map(|(n, l)| format!(" (the {} {n} refused more)", b(l)))
                .unwrap_or_default()
        )
    } else {
        format!(
            "A leak: memory grew by {} per repeating group of {} device allocations (one step of the program, or several), {} groups in a row, never released{}.",
            b(g.per_group),
            g.period,
            g.repetitions,
            limit
                .map(|(n, l)| format!(", until the {} {n} refused more", b(l)))
                .unwrap_or_default()
        )
    };
    v.why = if g.period == 1 {
        format!(
            "From {:.3} s to the failure the process allocated {} of {} each over {secs:.3} s and released none: {} kept, a straight ramp to the failure. Memory kept across iterations that the next iteration does not reuse.",
            start as f64 / 1e9,
            g.repetitions,
            exact(g.per_group),
            b(g.total)
        )
    } else {
        format!(
            "From {:.3} s on, the process allocated the same group of {} device allocations ({} in all per group) {} times and released none: {} kept in all. Each group is memory the program's next steps do not reuse (a group is what its allocator asks the driver for: one step, or several steps whose tensors share segments).",
            start as f64 / 1e9,
            g.period,
            exact(g.per_group),
            g.repetitions,
            b(g.total)
        )
    };
    let frame = v
        .who
        .python_frame
        .as_deref()
        .map(|f| format!(" The frame that allocates them: {f}."))
        .unwrap_or_default();
    v.fix = Fix {
        advice: format!(
            "Release what each iteration keeps. Possible causes: outputs kept with their autograd graph (store loss.item() / out.detach(), or run evaluation under torch.no_grad()), caches that only grow, lists of tensors appended every step.{frame} Raising the limit only moves the crash by {} per {}.",
            b(g.per_group),
            if g.period == 1 { "allocation" } else { "group" }
        ),
        check: None,
    };
    v
}

/// A leak the framework's own per-step figures show (`source`: where they came from);
/// `limit`: the limit it ran into, as a phrase ("the 3.96 GiB limit").
pub fn from_steps(
    ctx: &Ctx<'_>,
    g: &steps::StepGrowth,
    source: &str,
    limit: Option<String>,
) -> Verdict {
    let mut v = ctx.base(Kind::Leak);
    v.figures
        .insert("growth_per_step_bytes".into(), g.growth_per_step);
    v.figures.insert("first_step".into(), g.first_step as u64);
    v.figures.insert("steps".into(), g.steps as u64);
    v.figures.insert("leaked_bytes".into(), g.leaked_bytes);
    v.evidence.push(Cite {
        file: source.to_string(),
        line: None,
        what: format!(
            "allocated bytes after each of {} steps: +{} every step from step {}",
            g.steps, g.growth_per_step, g.first_step
        ),
    });
    v.headline = format!(
        "A leak: every step from step {} kept {} more allocated; after {} steps{}.",
        g.first_step,
        b(g.growth_per_step),
        g.steps,
        limit
            .map(|l| format!(" {l} refused more"))
            .unwrap_or_else(|| " the device was full".into())
    );
    v.why = format!(
        "The framework's allocated bytes grew by exactly {} per step from step {} on ({} in all) and never came back down: each step keeps memory the next does not reuse.",
        exact(g.growth_per_step),
        g.first_step,
        b(g.leaked_bytes)
    );
    v.fix = Fix {
        advice: format!(
            "Release what each step keeps (a loss kept with its graph: store loss.item() or loss.detach(); lists of outputs). Raising the limit only moves the crash by {} per step.",
            b(g.growth_per_step)
        ),
        check: None,
    };
    v
}

/// A run that did not fail but whose step outputs pile up: a warning.
pub fn warning(ctx: &Ctx<'_>) -> Option<Verdict> {
    let cap = ctx.ev.capture.as_ref()?;
    let mut best: Option<(steps::ExecutionLeak, u32, i32, u64)> = None;
    for ((k, dev), d) in &ctx.drivers.per {
        let at = cap.runtime_ts_of(d.peak_ts);
        if let Some(l) = steps::execution_leak(ctx.pjrt, k.pid, *dev, at) {
            if l.leaked_steps >= 8
                && l.leaked_bytes.saturating_mul(2) >= d.peak_bytes
                && best
                    .as_ref()
                    .is_none_or(|b| l.leaked_bytes > b.0.leaked_bytes)
            {
                best = Some((l, k.pid, *dev, d.peak_bytes));
            }
        }
    }
    let (l, pid, dev, peak) = best?;
    let mut v = ctx.base(Kind::Leak);
    v.failure = false;
    v.what.pid = Some(pid);
    v.what.device = Some(dev);
    fill(&mut v, &l);
    v.figures.insert("peak_bytes".into(), peak);
    v.headline = format!(
        "No failure, but a leak: {} left {} live after every step from step {} on ({} at the peak).",
        l.executable,
        b(l.growth_per_step),
        l.first_step,
        b(l.leaked_bytes)
    );
    v.why = format!(
        "At the device's peak ({}) the outputs of {}'s runs {}..{} were all still live.",
        b(peak),
        l.executable,
        l.first_step,
        l.steps.saturating_sub(2)
    );
    v.fix = Fix {
        advice: "Stop keeping each step's output alive; with a longer run this fills any pool."
            .into(),
        check: None,
    };
    Some(v)
}

/// A leak the device's ledger shows: when it closes at the failure, the failing process's
/// framework pool holds most of the device, and the pool's own trend is an unbroken run
/// of at least `steps::MIN_RAMP_REPETITIONS` steps that adds up to most of what it holds
/// — memory kept step after step up to the failure, whatever the framework did between
/// its last step and the error it raised (CuPy frees its cache and retries first).
pub fn from_ledger_trend(ctx: &Ctx<'_>) -> Option<Verdict> {
    let l = ctx.ledger.filter(|l| l.closes && l.moment == "failure")?;
    let total = l.total_bytes?;
    let h = l
        .holders
        .iter()
        .filter(|h| h.pid.is_some() && h.pid == l.pid)
        .filter(|h| {
            matches!(
                h.kind,
                HolderKind::CupyPool | HolderKind::TorchCaching | HolderKind::XlaBfcPool
            )
        })
        .max_by_key(|h| h.bytes)?;
    let t = h.trend.as_ref()?;
    let grown = t.bytes_per_unit.saturating_mul(t.steps);
    if t.steps < steps::MIN_RAMP_REPETITIONS as u64
        || t.bytes_per_unit == 0
        || grown.saturating_mul(2) < h.bytes
        || h.bytes.saturating_mul(2) < total
    {
        return None;
    }
    let mut v = ctx.base(Kind::Leak);
    v.figures
        .insert("growth_per_step_bytes".into(), t.bytes_per_unit);
    v.figures.insert("repetitions".into(), t.steps);
    v.figures.insert("leaked_bytes".into(), grown);
    if let Some(r) = ctx.failure.and_then(|f| f.request) {
        v.figures.insert("request_bytes".into(), r);
    }
    v.evidence.push(Cite {
        file: h.source.clone(),
        line: None,
        what: format!("the device's ledger at the failure: {}", l.closing_line()),
    });
    v.headline = format!(
        "A leak: {} grew by {} per {} for {} steps in a row up to the failure and held {} of the device's {}.",
        h.name,
        b(t.bytes_per_unit),
        t.unit,
        t.steps,
        b(h.bytes),
        b(total)
    );
    v.why = format!(
        "The device's ledger at the failure closes; {} held {} ({:.0}% of the device), {} of it added {} at a time over {} steps without a release: memory kept across iterations that the next iteration does not reuse.",
        h.name,
        exact(h.bytes),
        h.bytes as f64 * 100.0 / total as f64,
        b(grown),
        exact(t.bytes_per_unit),
        t.steps
    );
    v.fix = Fix {
        advice: "Release what each step keeps (a list or dict of results, a cache, outputs kept with their autograd graph); a larger limit only moves the failure.".into(),
        check: None,
    };
    Some(v)
}
