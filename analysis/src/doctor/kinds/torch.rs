//! PyTorch's caching allocator. Its own message states allocated, reserved-but-unallocated
//! and (under `set_per_process_memory_fraction`) the allowed bytes; a memory snapshot
//! states them exactly, with the largest free block of the request's pool, the
//! allocator's settings and the loop's steps. Growth step after step is a leak (split
//! reserved memory beside it only an `also`); reserved memory that covers the request but
//! is split is fragmentation (the `expandable_segments` advice applies only then, and not
//! when it is already on); a request past the fraction while the device has room is the
//! fraction limit.

use super::{exact, leak, other_process, Ctx};
use crate::doctor::evidence::FrameworkState;
use crate::doctor::failure::Origin;
use crate::doctor::steps::AllocationGrowth;
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict};
use crate::log::TorchOom;
use crate::size::format_bytes as b;

/// What PyTorch recorded about the failure: its message, its snapshot, or both (the
/// snapshot's figures are exact, the message's rounded to two decimals).
struct Facts<'a> {
    request: u64,
    allocated: Option<u64>,
    unallocated: Option<u64>,
    /// `X allowed` (the message only: a snapshot does not record the fraction).
    allowed: Option<u64>,
    device_free: Option<u64>,
    total: Option<u64>,
    /// The largest free block of the request's pool (a snapshot only).
    largest_free: Option<u64>,
    snapshot: Option<&'a FrameworkState>,
}

impl Facts<'_> {
    fn reserved(&self) -> Option<u64> {
        Some(self.allocated?.saturating_add(self.unallocated?))
    }

    /// Split reserved memory that covers the request: the message's reserved-but-
    /// unallocated ≥ request, and, where a snapshot shows the pool, no free block of it
    /// large enough.
    fn split(&self) -> Option<u64> {
        let u = self.unallocated.filter(|u| *u >= self.request)?;
        self.largest_free
            .is_none_or(|l| l < self.request)
            .then_some(u)
    }
}

fn facts<'a>(ctx: &Ctx<'a>) -> Option<Facts<'a>> {
    let f = ctx.failure?;
    let msg: Option<&TorchOom> = match f.origin {
        Origin::Torch(i) => ctx.log.torch_ooms.get(i),
        _ => None,
    };
    let device = f.device.or(msg.and_then(|t| t.device)).unwrap_or(0);
    let snapshot = ctx
        .ev
        .framework_states
        .iter()
        .rev()
        .find(|s| s.device == device && s.oom.is_some());
    let so = snapshot.and_then(|s| s.oom.as_ref());
    Some(Facts {
        request: f
            .request
            .or(msg.and_then(|t| t.request_approx_bytes))
            .or(so.map(|o| o.request_bytes))?,
        allocated: so
            .map(|o| o.allocated_bytes)
            .or(msg.and_then(|t| t.allocated_approx_bytes)),
        unallocated: so
            .map(|o| o.reserved_unallocated_bytes)
            .or(msg.and_then(|t| t.reserved_unallocated_approx_bytes)),
        allowed: msg.and_then(|t| t.allowed_approx_bytes),
        device_free: so
            .map(|o| o.device_free_bytes)
            .or(msg.and_then(|t| t.free_approx_bytes)),
        total: msg.and_then(|t| t.total_approx_bytes),
        largest_free: so.map(|o| o.largest_free_block_bytes),
        snapshot,
    })
}

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let t = facts(ctx)?;
    let req = t.request;
    let fill = |v: &mut Verdict| {
        v.figures.insert("request_bytes".into(), req);
        if let Some(a) = t.allocated {
            v.figures.insert("allocated_bytes".into(), a);
        }
        if let Some(u) = t.unallocated {
            v.figures.insert("reserved_unallocated_bytes".into(), u);
        }
        if let Some(a) = t.allowed {
            v.figures.insert("allowed_bytes".into(), a);
        }
        if let Some(fr) = t.device_free {
            v.figures.insert("device_free_bytes".into(), fr);
        }
        if let Some(l) = t.largest_free {
            v.figures.insert("largest_free_block_bytes".into(), l);
        }
    };
    // Split reserved memory that covers the request is fragmentation, unless the memory
    // grew without release: then the growth filled the cache and would fail a step later
    // without the split, so fragmentation is only an `also`.
    let split = t.split();
    let with_split = |v: &mut Verdict| {
        if let Some(u) = split {
            v.also.push(Kind::Fragmentation);
            v.why.push_str(&format!(
                " PyTorch's cache also held {} reserved but unallocated, more than the request, in blocks too small for it: that split made this step fail rather than a later one, but memory that grew without release is what filled the cache.",
                b(u)
            ));
        }
    };
    // The cap that refused: the message's `X allowed`; from a snapshot alone, a request
    // refused while the device had room for it (only the fraction does that).
    let capped =
        t.allowed.is_some() || (t.snapshot.is_some() && t.device_free.is_some_and(|f| f >= req));
    let limit = t.allowed.map_or_else(
        || capped.then(|| "the per-process memory fraction".to_string()),
        |a| Some(format!("the {} limit", b(a))),
    );
    // Steps the framework itself recorded (a snapshot source) say it exactly.
    let device = ctx.failure.and_then(|f| f.device).unwrap_or(0);
    if let Some((state, g)) = ctx
        .ev
        .framework_states
        .iter()
        .filter(|s| s.device == device)
        .find_map(|s| Some((s, crate::doctor::steps::step_growth(&s.allocated_per_step)?)))
    {
        let mut v = leak::from_steps(ctx, &g, &state.source, limit);
        fill(&mut v);
        if capped {
            v.also.push(Kind::TorchFractionLimit);
        }
        with_split(&mut v);
        return Some(v);
    }
    let live = ctx.at().and_then(|(pid, dev)| ctx.drivers.of(pid, dev));
    let growth = live.and_then(|d| crate::doctor::steps::allocation_growth(&d.live_at_checkpoint));
    let ramp = live.and_then(|d| {
        crate::doctor::steps::growth_until(&d.live_at_checkpoint, ctx.drivers.checkpoint_ts)
    });
    let leak_growth = ramp.as_ref();
    // Allocations of one size kept one after another (not called a leak: loading data
    // looks the same) also outgrow a split cache when packing it would not hold even one
    // more of them.
    let outgrown = growth
        .as_ref()
        .zip(split)
        .is_some_and(|(g, u)| u - req < g.per_group);
    if let (Some(u), None, false) = (split, leak_growth, outgrown) {
        return Some(fragmentation(ctx, &t, u, fill));
    }
    if capped {
        if let Some(g) = leak_growth {
            let mut v = leak::from_growth(ctx, g, t.allowed.map(|a| ("fraction limit", a)));
            fill(&mut v);
            v.also.push(Kind::TorchFractionLimit);
            with_split(&mut v);
            return Some(v);
        }
        let mut v = fraction_limit(ctx, &t, growth.as_ref(), fill);
        with_split(&mut v);
        return Some(v);
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
/// the memory is there, its layout fails. `expandable_segments` is the advice only here,
/// and only when it is not on already.
fn fragmentation(ctx: &Ctx<'_>, t: &Facts<'_>, u: u64, fill: impl Fn(&mut Verdict)) -> Verdict {
    let req = t.request;
    let mut v = ctx.base(Kind::Fragmentation);
    fill(&mut v);
    let largest = t
        .largest_free
        .map(|l| format!(" (the largest is {})", exact(l)))
        .unwrap_or_default();
    v.headline = format!(
        "PyTorch's cache held {} reserved but unallocated, more than the {} request, in pieces too small for it: fragmentation.",
        b(u),
        b(req)
    );
    v.why = format!(
        "Of the memory PyTorch reserved, {} is allocated to tensors and {} is free inside its segments; the free part covers the request ({}) but no free block is large enough{largest}{}.",
        t.allocated.map_or("?".into(), b),
        b(u),
        exact(req),
        t.allowed
            .map(|a| format!(", and the {} fraction limit kept it from reserving a new segment", b(a)))
            .unwrap_or_default()
    );
    let expandable_on = t.snapshot.and_then(|s| s.expandable_segments) == Some(true);
    let advice = if expandable_on {
        "expandable_segments is already on (the snapshot's settings): free or reuse the blocks between the large tensors, allocate the large tensors first, or set max_split_size_mb so large cached blocks are not split for small requests.".into()
    } else {
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm): segments then grow in place instead of leaving split free blocks; or allocate the large tensors first.".to_string()
    };
    if let Some(s) = t.snapshot {
        v.evidence.push(Cite {
            file: s.source.clone(),
            line: None,
            what: format!(
                "the snapshot at the OOM: {} reserved but unallocated, largest free block {}",
                b(u),
                t.largest_free.map_or("?".into(), b)
            ),
        });
    }
    v.fix = Fix {
        advice,
        check: Some(Check {
            method: "recorded_figures".into(),
            passed: true,
            detail: format!(
                "reserved-but-unallocated {} >= request {}{}: the memory is already reserved, only its layout fails",
                b(u),
                b(req),
                t.largest_free
                    .map(|l| format!(" > largest free block {}", b(l)))
                    .unwrap_or_default()
            ),
        }),
    };
    v
}

fn fraction_limit(
    ctx: &Ctx<'_>,
    t: &Facts<'_>,
    growth: Option<&AllocationGrowth>,
    fill: impl Fn(&mut Verdict),
) -> Verdict {
    let req = t.request;
    let mut v = ctx.base(Kind::TorchFractionLimit);
    fill(&mut v);
    let reserved = t.reserved().or(t.allowed).unwrap_or(0);
    let need = reserved.saturating_add(req);
    if let Some(g) = growth {
        v.figures
            .insert("growth_per_step_bytes".into(), g.per_group);
        v.figures.insert("repetitions".into(), g.repetitions as u64);
    }
    let cap = t.allowed.map_or_else(
        || "a cap the snapshot does not record".to_string(),
        |a| format!("{} allowed", b(a)),
    );
    v.headline = format!(
        "PyTorch's per-process memory fraction ({cap}) refused {} while the device had {} free.",
        b(req),
        t.device_free.map_or("room".into(), b)
    );
    v.why = format!(
        "{}; PyTorch held {} ({} allocated to tensors) and the request of {} would pass the cap{}.{}",
        t.allowed.map_or_else(
            || "The device had room for the request, so the caching allocator's own cap refused it: only torch.cuda.set_per_process_memory_fraction does that (a snapshot does not record the fraction)".to_string(),
            |a| format!("torch.cuda.set_per_process_memory_fraction capped this process at {}", exact(a)),
        ),
        b(reserved),
        t.allocated.map_or("?".into(), b),
        b(req),
        t.device_free
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
        .total
        .or_else(|| ctx.device_total(v.what.pid, v.what.device));
    let frac = total.map(|tot| ((need as f64 / tot as f64) * 100.0).ceil() / 100.0);
    let check = match (t.device_free, total) {
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
            Some(_) => "Hold less memory: free tensors you no longer need; the cap cannot go above the device.".into(),
            None => "Raise the per-process fraction (torch.cuda.set_per_process_memory_fraction), or hold less: free tensors you no longer need.".into(),
        },
        check,
    };
    v
}
