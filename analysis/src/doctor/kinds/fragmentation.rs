//! Fragmentation in XLA's BFC pool: the free total covered the request but no free
//! block was large enough. Exact from the allocator's statistics (its largest free
//! block) or a whole chunk dump; the fix is checked by replaying the run's own
//! allocation order through the BFC model.

use super::{exact, Ctx};
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    let req = f.request?;
    let pool = ctx.pool_state();
    let p = pool.pool.or(pool.limit)?;
    let in_use = pool.in_use?;
    let free = p.saturating_sub(in_use);
    let largest = pool.largest_free?;
    if free < req || largest >= req {
        return None;
    }
    let mut v = ctx.base(Kind::Fragmentation);
    v.figures.insert("request_bytes".into(), req);
    v.figures.insert("largest_free_block_bytes".into(), largest);
    v.figures.insert("pool_bytes".into(), p);
    v.figures.insert("bytes_in_use".into(), in_use);
    v.figures.insert("free_bytes".into(), free);
    v.evidence.extend(pool.cites.clone());
    if let Some(m) = ctx.log.ooms.last().and_then(|o| o.memory_map.as_ref()) {
        v.evidence.push(Cite {
            file: m.at.file.clone(),
            line: Some(m.at.line),
            what: format!(
                "the allocator's map shows {} free cells between used ones (one cell per 1% of the pool)",
                m.holes()
            ),
        });
    }
    v.headline = format!(
        "Fragmentation: the pool had {} free, more than the {} request, but its largest free block was {}.",
        b(free),
        b(req),
        b(largest)
    );
    v.why = format!(
        "{} of the {} pool was in use, leaving {} free in total; the request ({}) needs one contiguous block and the largest was {}. Not a pool too small for the live data: packed without holes it would fit.",
        b(in_use),
        exact(p),
        exact(free),
        exact(req),
        exact(largest)
    );
    let sized = ctx.sized_pool(&[req], false);
    let check = sized.as_ref().map(|sp| sp.check());
    let sized = sized
        .map(|sp| {
            format!(
                " A pool that holds the request with the same allocation order: {}.",
                sp.advice()
            )
        })
        .unwrap_or_default();
    v.fix = Fix {
        advice: format!(
            "Allocate the large arrays first (or before the many that are freed in between), reuse buffers of one size, or delete arrays in the reverse order of their creation.{sized}"
        ),
        check,
    };
    Some(v)
}
