//! What `memwatch replay` reports about one run: the JSON document, the human report
//! (statistics, the out-of-memory moment with its blocks, the steps), the lines about
//! the trace itself (lost data, and for a BFC OOM dump its verdict against the recorded
//! pool).

use std::path::Path;

use memwatch_analysis::alloc::replay;
use memwatch_analysis::alloc::trace::{self, Trace};
use memwatch_analysis::alloc::{AllocatorKind, BlockState};
use memwatch_analysis::doctor::need::{NeedVerdict, PoolNeed};
use serde_json::{json, Value};

use super::human;
use super::runner::Run;

pub(super) fn run_json(run: &Run) -> Value {
    let r = &run.result;
    let mut v = json!({
        "fits": r.fits,
        "oom_step": r.oom_step,
        "peak_bytes_in_use": r.peak_bytes_in_use,
        "pool_bytes": run.limit,
        "peak_pool_bytes": r.peak_pool_bytes,
        "allocator": run.kind.name(),
        "device": run.target.device.as_ref().map(|d| d.name.clone()),
        "device_source": run.target.device.as_ref().map(|d| d.source),
        "device_capacity_measured": run.target.device.as_ref().map(|d| d.measured),
        "framework_reserve": run.target.device.as_ref().map(|d| d.framework_reserve),
        "capacity_bytes": run.target.capacity,
        "mem_fraction": run.fraction,
        "preallocate": run.preallocate,
        "events": r.events,
        "failed_allocs": r.failed_allocs,
        "oom": r.oom.as_ref().map(|o| json!({
            "index": o.index,
            "id": o.id,
            "size": o.size,
            "tag": o.tag,
            "bytes_in_use": o.bytes_in_use,
            "pool_bytes": o.pool_bytes,
            "limit": o.limit,
            "free_in_pool_bytes": o.free_in_pool_bytes,
            "unallocated_bytes": o.unallocated_bytes,
            "largest_free_block_bytes": o.largest_free_block_bytes,
            "live": o.live,
            "blocks": o.blocks.iter().map(|b| json!({
                "addr": b.addr, "size": b.size, "requested": b.requested,
                "in_use": b.state == BlockState::InUse, "label": b.label,
            })).collect::<Vec<_>>(),
        })),
    });
    if let Some(steps) = &r.steps {
        v["steps"] = serde_json::to_value(steps).unwrap_or(Value::Null);
    }
    v
}

/// What the capture could not deliver, for JSON (`null` when nothing was lost).
pub(super) fn gaps_json(trace: &Trace) -> Value {
    if trace.meta.gaps.any() {
        serde_json::to_value(&trace.meta.gaps).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

/// What an OOM dump's live set says about the recorded failure, whatever pool this replay
/// used: the live buffers plus the failed request against the pool the log states (the
/// doctor's one rule, [`PoolNeed`]).
pub(super) struct DumpVerdict {
    live_buffers: usize,
    need: PoolNeed,
}

impl DumpVerdict {
    pub(super) fn json(&self) -> Value {
        let n = &self.need;
        json!({
            "live_buffers": self.live_buffers,
            "live_bytes": n.live_bytes,
            "request_bytes": n.request_bytes,
            "need_bytes": n.need_bytes,
            "recorded_pool_bytes": n.pool_bytes,
            "short_by_bytes": n.short_by_bytes,
            "stated_limit_bytes": n.stated_limit_bytes,
            "verdict": n.verdict().name(),
        })
    }
}

pub(super) fn dump_verdict(trace: &Trace) -> Option<DumpVerdict> {
    if trace.meta.format != "bfc_oom_dump" {
        return None;
    }
    let need = replay::peak_live_bytes(trace);
    let request = match trace.ops.last() {
        Some(trace::TraceOp::Alloc { size, .. }) => *size,
        _ => 0,
    };
    Some(DumpVerdict {
        live_buffers: trace.buffers().saturating_sub(1),
        need: PoolNeed::new(
            need.saturating_sub(request),
            request,
            trace.meta.bytes_limit,
            trace.meta.stated_limit,
        ),
    })
}

/// The trace's warning (lost data) and, for an OOM dump, its verdict against the
/// recorded pool: lines every text report shows.
pub(super) fn print_trace_notes(trace: &Trace) -> anyhow::Result<()> {
    if let Some(g) = trace.meta.gaps.describe() {
        outln!("warning    {g}");
    }
    if let Some(d) = dump_verdict(trace) {
        let n = &d.need;
        outln!(
            "source     the log's OOM dump: {} live buffers ({}) + the failed request ({}) need {}",
            d.live_buffers,
            human(n.live_bytes),
            human(n.request_bytes),
            human(n.need_bytes)
        );
        let pool = n.pool_bytes.unwrap_or_default();
        match n.verdict() {
            NeedVerdict::PoolCouldNotGrow => outln!(
                "verdict    the pool had grown to {} of its {} limit and could not grow by the \
                 request: the device had no room for a new region (other processes, or memory \
                 the framework holds outside the pool), not a limit too small",
                human(pool),
                human(n.stated_limit_bytes.unwrap_or_default())
            ),
            NeedVerdict::PoolTooSmall => outln!(
                "verdict    the recorded pool of {} is short by at least {} (before any fragmentation)",
                human(pool),
                human(n.short_by_bytes.unwrap_or_default())
            ),
            NeedVerdict::Fragmentation => outln!(
                "verdict    packed without holes they fit in the recorded pool of {}: the real \
                 failure came from fragmentation",
                human(pool)
            ),
            NeedVerdict::PoolUnknown => outln!("verdict    the log does not state the pool's size"),
        }
    }
    Ok(())
}

pub(super) fn print_run(run: &Run, trace: &Trace, path: &Path) -> anyhow::Result<()> {
    let r = &run.result;
    outln!(
        "trace      {} ({} format, {} events, {} buffers, peak live {})",
        path.display(),
        trace.meta.format,
        trace.len(),
        trace.buffers(),
        human(replay::peak_live_bytes(trace))
    );
    let mode = match run.kind {
        AllocatorKind::Bfc if run.preallocate => "XLA TSL BFC, preallocated, spatially partitioned",
        AllocatorKind::Bfc => "XLA TSL BFC, growing pool",
        AllocatorKind::Platform => "one driver allocation per buffer",
        AllocatorKind::Async => "stream-ordered pool (cudaMallocAsync / hipMallocAsync)",
        AllocatorKind::Torch => "PyTorch CUDA caching allocator",
    };
    outln!("allocator  {} ({mode})", run.kind.name());
    match &run.target.device {
        Some(d) => {
            outln!(
                "device     {} ({}): capacity {} x {} = pool {}",
                d.name,
                d.display,
                human(run.target.capacity),
                run.fraction,
                human(run.limit)
            );
            outln!("source     {}", d.source);
        }
        None => outln!(
            "capacity   {}{} x {} = pool {}",
            human(run.target.capacity),
            if run.target.recorded {
                " (recorded bytes_limit)"
            } else {
                ""
            },
            run.fraction,
            human(run.limit)
        ),
    }
    outln!(
        "peak       in use {}, reserved {}",
        human(r.peak_bytes_in_use),
        human(r.peak_pool_bytes)
    );
    print_trace_notes(trace)?;
    if dump_verdict(trace).is_some_and(|d| d.need.pool_bytes != Some(run.limit)) {
        outln!(
            "replayed   on a pool of {} instead (see result)",
            human(run.limit)
        );
    }
    match &r.oom {
        None => outln!("result     FITS"),
        Some(o) => {
            outln!(
                "result     OUT OF MEMORY at event {} ({} failed allocation{} in all)",
                o.index,
                r.failed_allocs,
                if r.failed_allocs == 1 { "" } else { "s" }
            );
            outln!(
                "failing    alloc id {} of {} ({} B){}",
                o.id,
                human(o.size),
                o.size,
                o.tag
                    .as_ref()
                    .map(|t| format!(", tag {t}"))
                    .unwrap_or_default()
            );
            let frag = if o.free_in_pool_bytes > 0 {
                100.0 * (1.0 - o.largest_free_block_bytes as f64 / o.free_in_pool_bytes as f64)
            } else {
                0.0
            };
            outln!(
                "memory     in use {} of pool {} (limit {}); free in pool {}, largest free block {} \
                 (fragmentation {frag:.0}%), not yet taken from the device {}",
                human(o.bytes_in_use),
                human(o.pool_bytes),
                human(o.limit),
                human(o.free_in_pool_bytes),
                human(o.largest_free_block_bytes),
                human(o.unallocated_bytes)
            );
            outln!("live set   {} buffers, largest first:", o.live.len());
            outln!(
                "  {:>12}  {:>12}  {:>14}  tag",
                "id",
                "allocated",
                "requested B"
            );
            for b in o.live.iter().take(15) {
                outln!(
                    "  {:>12}  {:>12}  {:>14}  {}",
                    b.id,
                    human(b.allocated),
                    b.size,
                    b.tag.as_deref().unwrap_or("-")
                );
            }
            if o.live.len() > 15 {
                let rest: u64 = o.live[15..].iter().map(|b| b.allocated).sum();
                outln!("  ... {} more, {}", o.live.len() - 15, human(rest));
            }
            if !o.blocks.is_empty() && o.blocks.len() <= 64 {
                outln!("layout     (address order, like the allocator's own dump)");
                let base = o.blocks[0].addr;
                for b in &o.blocks {
                    outln!(
                        "  {} at +{:#012x} of size {:>12} ({:>10}) {}",
                        if b.state == BlockState::InUse {
                            "InUse"
                        } else {
                            "Free "
                        },
                        b.addr - base,
                        b.size,
                        human(b.size),
                        b.label
                    );
                }
            }
        }
    }
    if let Some(steps) = &r.steps {
        outln!();
        outln!(
            "{:>8}  {:>5}  {:>14}  {:>14}  {:>14}",
            "step",
            "op",
            "size B",
            "in use B",
            "largest free B"
        );
        for (i, (s, op)) in steps.iter().zip(&trace.ops).enumerate() {
            let (name, size) = match *op {
                trace::TraceOp::Alloc { size, .. } => ("alloc", size.to_string()),
                trace::TraceOp::Free { .. } => ("free", String::new()),
            };
            outln!(
                "{i:>8}  {name:>5}  {size:>14}  {:>14}  {:>14}",
                s.bytes_in_use,
                s.largest_free_block_bytes
            );
        }
    }
    Ok(())
}
