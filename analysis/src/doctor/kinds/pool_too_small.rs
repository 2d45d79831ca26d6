//! The fallback: the live set plus the request exceed the pool, and none of the more
//! specific kinds explains why; or the evidence does not even show that (unexplained),
//! in which case the verdict says which evidence would.

use super::{exact, Ctx};
use crate::doctor::ledger::{Holder, HolderKind};
use crate::doctor::need::{NeedVerdict, PoolNeed};
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Verdict {
    let pool = ctx.pool_state();
    let req = ctx.failure.and_then(|f| f.request);
    let need = match (pool.in_use, req) {
        (Some(u), Some(r)) => Some(PoolNeed::new(u, r, pool.pool, pool.limit)),
        _ => None,
    };
    let by_need = matches!(
        need.map(|n| n.verdict()),
        Some(NeedVerdict::PoolTooSmall) | Some(NeedVerdict::PoolCouldNotGrow)
    );
    if !by_need {
        if let Some(v) = from_ledger(ctx, req) {
            return v;
        }
    }
    let mut v = ctx.base(if by_need {
        Kind::PoolTooSmall
    } else {
        Kind::Unexplained
    });
    v.evidence.extend(pool.cites.clone());
    if let Some(r) = req {
        v.figures.insert("request_bytes".into(), r);
    }
    if let Some(p) = pool.pool.or(pool.limit) {
        v.figures.insert("pool_bytes".into(), p);
    }
    if let Some(u) = pool.in_use {
        v.figures.insert("in_use_bytes".into(), u);
    }
    match (v.kind, need) {
        (Kind::PoolTooSmall, Some(n)) => {
            v.figures.insert("need_bytes".into(), n.need_bytes);
            v.headline = format!(
                "The pool is too small: {} live plus the {} request need {}, {} more than the {} pool.",
                b(n.live_bytes),
                b(n.request_bytes),
                b(n.need_bytes),
                b(n.short_by_bytes.unwrap_or(0)),
                b(n.pool_bytes.unwrap_or(0))
            );
            v.why = format!(
                "In use {} + request {} = {} > pool {}; the evidence shows no leak, no single oversized executable and no fragmentation.",
                exact(n.live_bytes),
                exact(n.request_bytes),
                exact(n.need_bytes),
                exact(n.pool_bytes.unwrap_or(0))
            );
            v.fix = Fix {
                advice: format!(
                    "Give the pool at least {} (a larger memory fraction), or reduce what is live at this point.",
                    b(n.need_bytes)
                ),
                check: None,
            };
        }
        _ => {
            v.headline = match req {
                Some(r) => format!(
                    "Out of memory on a {} request; the evidence does not show why.",
                    b(r)
                ),
                None => "Out of memory; the evidence does not show why.".into(),
            };
            let missing = ctx
                .ledger
                .filter(|l| !l.missing.is_empty())
                .map(|l| format!(" The device's ledger does not close: {}.", l.closing_line()))
                .unwrap_or_default();
            v.why = format!("The failure is reported, but what was live and how large the pool was are not both known (see the missing evidence).{missing}");
            v.fix = Fix {
                advice: if ctx.ev.capture.is_some() {
                    match ctx.ledger.and_then(|l| l.missing.first()) {
                        Some(m) => format!("Add what the ledger misses: {m}; for XLA, TF_CPP_MIN_LOG_LEVEL=0 prints the allocator's chunk dump."),
                        None => "Keep the run's stderr with the capture (the framework's own message names the request and its allocator); for XLA, TF_CPP_MIN_LOG_LEVEL=0 prints the allocator's chunk dump.".into(),
                    }
                } else {
                    "Record the run with `memwatch run` (a capture with the allocator's statistics) and keep its stderr; for XLA, TF_CPP_MIN_LOG_LEVEL=0 prints the allocator's chunk dump.".into()
                },
                check: None,
            };
        }
    }
    v
}

/// A failure no kind explains, on a ledger that closes: the ledger itself says where the
/// device's memory was — the device had less free than the request, or the holder that
/// served the request had less free inside it.
fn from_ledger(ctx: &Ctx<'_>, req: Option<u64>) -> Option<Verdict> {
    let l = ctx.ledger.filter(|l| l.closes && l.moment == "failure")?;
    let req = req.filter(|r| *r > 0)?;
    let free = l.free()?;
    let total = l.total_bytes?;
    let mut v = ctx.base(Kind::PoolTooSmall);
    v.figures.insert("request_bytes".into(), req);
    v.figures.insert("device_free_bytes".into(), free);
    v.figures.insert("device_total_bytes".into(), total);
    let held: Vec<&Holder> = l
        .holders
        .iter()
        .filter(|h| !matches!(h.kind, HolderKind::Free) && h.bytes > 0)
        .take(3)
        .collect();
    let list = held
        .iter()
        .map(|h| {
            format!(
                "{} {} ({:.0}%){}",
                h.name,
                b(h.bytes),
                h.bytes as f64 * 100.0 / total as f64,
                h.in_use_bytes
                    .map(|u| format!(", {} in use", b(u)))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    // This process's holders (from a framework's message alone they carry no pid).
    let mine: u64 = l
        .holders
        .iter()
        .filter(|h| h.pid == l.pid)
        .filter(|h| {
            !matches!(
                h.kind,
                HolderKind::OtherProcess
                    | HolderKind::OtherProcessUnrecorded
                    | HolderKind::Free
                    | HolderKind::Unattributed
            )
        })
        .map(|h| h.bytes)
        .sum();
    v.figures.insert("process_bytes".into(), mine);
    v.evidence.push(Cite {
        file: held.first().map(|h| h.source.clone()).unwrap_or_default(),
        line: None,
        what: format!("the device's ledger at the failure: {}", l.closing_line()),
    });
    if free < req {
        v.headline = format!(
            "Device {} was full: {} free, less than the {} request; {list}.",
            l.device,
            b(free),
            b(req)
        );
        v.why = format!(
            "The device's ledger at the failure closes ({}): this process held {}, and {} was free, less than the request of {}. The largest holders: {list}.",
            l.closing_line(),
            exact(mine),
            exact(free),
            exact(req)
        );
        v.fix = Fix {
            advice: format!(
                "This process needs {} more than the device had free: shrink what its largest holder keeps ({}), or use a device with more memory.",
                b(req - free),
                held.first().map_or("?".into(), |h| h.name.clone())
            ),
            check: Some(crate::doctor::verdict::Check {
                method: "recorded_figures".into(),
                passed: true,
                detail: format!(
                    "the ledger closes within {}; free {} < request {}",
                    b(l.tolerance_bytes),
                    b(free),
                    b(req)
                ),
            }),
        };
    } else {
        let pool = l
            .holders
            .iter()
            .filter(|h| h.pid == l.pid && h.free_inside_bytes.is_some_and(|f| f < req))
            .max_by_key(|h| h.bytes)?;
        v.figures.insert("pool_bytes".into(), pool.bytes);
        if let Some(u) = pool.in_use_bytes {
            v.figures.insert("in_use_bytes".into(), u);
        }
        v.headline = format!(
            "The {} ({}) had {} free inside, less than the {} request, while the device had {} free.",
            pool.name,
            b(pool.bytes),
            b(pool.free_inside_bytes.unwrap_or(0)),
            b(req),
            b(free)
        );
        v.why = format!(
            "The request is served from {}: {} of it in use, {} free inside; the device outside it had {} free. Its limit, not the device, refused.",
            pool.name,
            pool.in_use_bytes.map_or("?".into(), b),
            b(pool.free_inside_bytes.unwrap_or(0)),
            b(free)
        );
        v.fix = Fix {
            advice: format!(
                "Give {} at least {} more (a larger memory fraction), or keep less live in it.",
                pool.name,
                b(req.saturating_sub(pool.free_inside_bytes.unwrap_or(0)))
            ),
            check: None,
        };
    }
    Some(v)
}
