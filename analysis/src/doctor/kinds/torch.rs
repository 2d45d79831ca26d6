//! PyTorch's caching allocator: its own message states allocated, reserved-but-unallocated
//! and (under `set_per_process_memory_fraction`) the allowed bytes. Reserved memory that
//! covers the request but is split is fragmentation (the `expandable_segments` advice
//! applies only then); a request past the fraction while the device has room is the
//! fraction limit; growth in repeating allocation groups, step after step, is a leak.

use super::{exact, leak, other_process, Ctx};
use crate::doctor::steps::AllocationGrowth;
use crate::doctor::verdict::{Check, Fix, Kind, Verdict};
use crate::log::TorchOom;
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>, i: usize) -> Option<Verdict> {
    let t = ctx.log.torch_ooms.get(i)?;
    let f = ctx.failure?;
    let req = f.request.or(t.request_approx_bytes)?;
    let alloc = t.allocated_approx_bytes;
    let unalloc = t.reserved_unallocated_approx_bytes;
    let fill = |v: &mut Verdict| {
        v.figures.insert("request_bytes".into(), req);
        if let Some(a) = alloc {
            v.figures.insert("allocated_bytes".into(), a);
        }
        if let Some(u) = unalloc {
            v.figures.insert("reserved_unallocated_bytes".into(), u);
        }
        if let Some(a) = t.allowed_approx_bytes {
            v.figures.insert("allowed_bytes".into(), a);
        }
        if let Some(fr) = t.free_approx_bytes {
            v.figures.insert("device_free_bytes".into(), fr);
        }
    };
    // Split reserved memory that covers the request is fragmentation, unless the memory
    // grew step after step without release: then the leak filled the cache and would fail
    // a step later without the split, so fragmentation is only an `also`.
    let split = unalloc.filter(|u| *u >= req);
    let with_split = |v: &mut Verdict| {
        if let Some(u) = split {
            v.also.push(Kind::Fragmentation);
            v.why.push_str(&format!(
                " PyTorch's cache also held {} reserved but unallocated, more than the request, in blocks too small for it: that split made this step fail rather than a later one, but the leak is what filled the memory.",
                b(u)
            ));
        }
    };
    // Steps the framework itself recorded (a snapshot source) say it exactly.
    let device = t.device.unwrap_or(0);
    if let Some((state, g)) = ctx
        .ev
        .framework_states
        .iter()
        .filter(|s| s.device == device)
        .find_map(|s| Some((s, crate::doctor::steps::step_growth(&s.allocated_per_step)?)))
    {
        let mut v = leak::from_steps(ctx, &g, &state.source, t.allowed_approx_bytes);
        fill(&mut v);
        if t.allowed_approx_bytes.is_some() {
            v.also.push(Kind::TorchFractionLimit);
        }
        with_split(&mut v);
        return Some(v);
    }
    let growth = ctx
        .at()
        .and_then(|(pid, dev)| ctx.drivers.of(pid, dev))
        .and_then(|d| crate::doctor::steps::allocation_growth(&d.live_at_checkpoint));
    let leak_growth = growth.as_ref().filter(|g| g.period >= 2);
    if let (Some(u), None) = (split, leak_growth) {
        return Some(fragmentation(ctx, t, req, u, fill));
    }
    if let Some(allowed) = t.allowed_approx_bytes {
        if let Some(g) = leak_growth {
            let mut v = leak::from_growth(ctx, g, Some(("fraction limit", allowed)));
            fill(&mut v);
            v.also.push(Kind::TorchFractionLimit);
            with_split(&mut v);
            return Some(v);
        }
        return Some(fraction_limit(ctx, t, req, allowed, growth.as_ref(), fill));
    }
    if let Some(v) = other_process::verdict(ctx) {
        return Some(v);
    }
    if let Some(g) = leak_growth {
        let mut v = leak::from_growth(ctx, g, None);
        fill(&mut v);
        with_split(&mut v);
        return Some(v);
    }
    None
}

/// Reserved-but-unallocated memory that covers the request while no free block holds it:
/// the memory is there, its layout fails (the only case for `expandable_segments`).
fn fragmentation(
    ctx: &Ctx<'_>,
    t: &TorchOom,
    req: u64,
    u: u64,
    fill: impl Fn(&mut Verdict),
) -> Verdict {
    let alloc = t.allocated_approx_bytes;
    let mut v = ctx.base(Kind::Fragmentation);
    fill(&mut v);
    v.headline = format!(
        "PyTorch's cache held {} reserved but unallocated, more than the {} request, in pieces too small for it: fragmentation.",
        b(u),
        b(req)
    );
    v.why = format!(
        "Of the memory PyTorch reserved, {} is allocated to tensors and {} is free inside its segments; the free part covers the request ({}) but no free block is large enough{}.",
        alloc.map_or("?".into(), b),
        b(u),
        exact(req),
        t.allowed_approx_bytes
            .map(|a| format!(", and the {} fraction limit kept it from reserving a new segment", b(a)))
            .unwrap_or_default()
    );
    v.fix = Fix {
        advice: "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm): segments then grow in place instead of leaving split free blocks; or allocate the large tensors first.".into(),
        check: Some(Check {
            method: "recorded_figures".into(),
            passed: true,
            detail: format!(
                "reserved-but-unallocated {} >= request {}: the memory is already reserved, only its layout fails",
                b(u),
                b(req)
            ),
        }),
    };
    v
}

fn fraction_limit(
    ctx: &Ctx<'_>,
    t: &TorchOom,
    req: u64,
    allowed: u64,
    growth: Option<&AllocationGrowth>,
    fill: impl Fn(&mut Verdict),
) -> Verdict {
    let mut v = ctx.base(Kind::TorchFractionLimit);
    fill(&mut v);
    let reserved = t.reserved().unwrap_or(allowed);
    let need = reserved.saturating_add(req);
    if let Some(g) = growth {
        v.figures
            .insert("growth_per_step_bytes".into(), g.per_group);
        v.figures.insert("repetitions".into(), g.repetitions as u64);
    }
    v.headline = format!(
        "PyTorch's per-process memory fraction ({} allowed) refused {} while the device had {} free.",
        b(allowed),
        b(req),
        t.free_approx_bytes.map_or("room".into(), b)
    );
    v.why = format!(
        "torch.cuda.set_per_process_memory_fraction capped this process at {}; PyTorch held {} ({} allocated to tensors) and the request of {} would pass the cap{}.{}",
        exact(allowed),
        b(reserved),
        t.allocated_approx_bytes.map_or("?".into(), b),
        b(req),
        t.free_approx_bytes
            .map(|f| format!(", although the device still had {} free", b(f)))
            .unwrap_or_default(),
        growth
            .map(|g| format!(
                " The process had allocated {} of {} in a row, never released (if they are not meant to stay, that is a leak).",
                g.repetitions,
                b(g.per_group)
            ))
            .unwrap_or_default()
    );
    let total = t
        .total_approx_bytes
        .or_else(|| ctx.device_total(v.what.pid, v.what.device));
    let frac = total.map(|tot| ((need as f64 / tot as f64) * 100.0).ceil() / 100.0);
    let check = match (t.free_approx_bytes, total) {
        (Some(free), Some(_)) => Some(Check {
            method: "device_free".into(),
            passed: need.saturating_sub(reserved) <= free,
            detail: format!(
                "the cap must reach {} (held {} + request {}); the device had {} free beyond what the process held",
                b(need),
                b(reserved),
                b(req),
                b(free)
            ),
        }),
        _ => None,
    };
    v.fix = Fix {
        advice: match frac {
            Some(fr) if fr <= 1.0 => format!(
                "Raise the fraction to at least {fr:.2} (torch.cuda.set_per_process_memory_fraction({fr:.2})), or hold less: free tensors you no longer need."
            ),
            _ => "Hold less memory: free tensors you no longer need; the cap cannot go above the device.".into(),
        },
        check,
    };
    v
}
