//! CuPy's memory pool under a limit (`MemoryPool.set_limit`, `CUPY_GPU_MEMORY_LIMIT`):
//! the pool refuses a request that would pass the limit, whatever the device has free.

use super::{exact, leak, Ctx};
use crate::doctor::verdict::{Check, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>, i: usize) -> Option<Verdict> {
    let c = ctx.log.cupy_ooms.get(i)?;
    let limit = c.limit_bytes?;
    let held = c.allocated_bytes.unwrap_or(limit);
    if held.saturating_add(c.request_bytes) <= limit {
        return None;
    }
    let live = ctx.at().and_then(|(pid, dev)| ctx.drivers.of(pid, dev));
    let growth = live.and_then(|d| crate::doctor::steps::allocation_growth(&d.live_at_checkpoint));
    let ramp = live.and_then(|d| {
        crate::doctor::steps::growth_until(&d.live_at_checkpoint, ctx.drivers.checkpoint_ts)
    });
    let fill = |v: &mut Verdict| {
        v.figures.insert("request_bytes".into(), c.request_bytes);
        v.figures.insert("limit_bytes".into(), limit);
        v.figures.insert("allocated_bytes".into(), held);
    };
    if let Some(g) = &ramp {
        let mut v = leak::from_growth(ctx, g, Some(("pool limit", limit)));
        fill(&mut v);
        v.also.push(Kind::CupyPoolLimit);
        return Some(v);
    }
    let mut v = ctx.base(Kind::CupyPoolLimit);
    fill(&mut v);
    if let Some(g) = &growth {
        v.figures
            .insert("growth_per_step_bytes".into(), g.per_group);
        v.figures.insert("repetitions".into(), g.repetitions as u64);
    }
    v.headline = format!(
        "CuPy's memory-pool limit ({}) refused {}: the pool already held {}.",
        b(limit),
        b(c.request_bytes),
        b(held)
    );
    v.why = format!(
        "The pool's limit is {}; it held {} and the request of {} would pass it{}.",
        exact(limit),
        exact(held),
        exact(c.request_bytes),
        growth
            .as_ref()
            .map(|g| format!(
                "; the program allocated {} of {} in a row and released none (if they are not meant to stay, that is a leak)",
                g.repetitions,
                b(g.per_group)
            ))
            .unwrap_or_default()
    );
    let need = held.saturating_add(c.request_bytes);
    let room = ctx.at().and_then(|(pid, dev)| {
        let total = ctx.device_total(Some(pid), Some(dev))?;
        let ours = ctx.drivers.of(pid, dev).map_or(0, |d| d.at_checkpoint);
        let others: u64 = ctx.drivers.others_on(dev, pid).iter().map(|o| o.1).sum();
        Some(total.saturating_sub(ours).saturating_sub(others))
    });
    v.fix = Fix {
        advice: format!(
            "Raise the limit to at least {} (cupy.get_default_memory_pool().set_limit(size={need})), or free arrays you no longer need (del, then pool.free_all_blocks()).",
            b(need)
        ),
        check: room.map(|r| Check {
            method: "device_free".into(),
            passed: c.request_bytes <= r,
            detail: format!(
                "the device had {} free outside the pool at the failure (its total less every captured process's memory)",
                b(r)
            ),
        }),
    };
    Some(v)
}
