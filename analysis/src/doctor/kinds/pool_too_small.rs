//! The fallback: the live set plus the request exceed the pool, and none of the more
//! specific kinds explains why; or the evidence does not even show that (unexplained),
//! in which case the verdict says which evidence would.

use super::{exact, Ctx};
use crate::doctor::need::{NeedVerdict, PoolNeed};
use crate::doctor::verdict::{Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Verdict {
    let pool = ctx.pool_state();
    let req = ctx.failure.and_then(|f| f.request);
    let need = match (pool.in_use, req) {
        (Some(u), Some(r)) => Some(PoolNeed::new(u, r, pool.pool, pool.limit)),
        _ => None,
    };
    let mut v = ctx.base(match need.map(|n| n.verdict()) {
        Some(NeedVerdict::PoolTooSmall) | Some(NeedVerdict::PoolCouldNotGrow) => Kind::PoolTooSmall,
        _ => Kind::Unexplained,
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
            v.why = "The failure is reported, but what was live and how large the pool was are not both known (see the missing evidence).".into();
            v.fix = Fix {
                advice: "Record the run with `memwatch run` (a capture with the allocator's statistics) and keep its stderr; for XLA, TF_CPP_MIN_LOG_LEVEL=0 prints the allocator's chunk dump.".into(),
                check: None,
            };
        }
    }
    v
}
