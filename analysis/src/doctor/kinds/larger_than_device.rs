//! A single request larger than the whole device: no pool setting can satisfy it.

use super::{exact, Ctx};
use crate::doctor::verdict::{Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    if f.host {
        return None;
    }
    let req = f.request?;
    let total = ctx.device_total(f.pid, f.device)?;
    if req <= total {
        return None;
    }
    let mut v = ctx.base(Kind::LargerThanDevice);
    v.figures.insert("request_bytes".into(), req);
    v.figures.insert("device_total_bytes".into(), total);
    let who = f
        .executable
        .as_deref()
        .map(|e| format!(" by {e}"))
        .unwrap_or_default();
    v.headline = format!(
        "One request{who} for {} is larger than the whole {} device.",
        b(req),
        b(total)
    );
    v.why = format!(
        "The request alone ({}) exceeds the device's total memory ({}); no memory fraction, allocator or pool setting can hold it.",
        exact(req),
        exact(total)
    );
    if let Some(a) = ctx.log.arguments_over_limit.last() {
        v.evidence.push(crate::doctor::verdict::Cite {
            file: a.at.file.clone(),
            line: Some(a.at.line),
            what: format!(
                "XLA warned at compile time: arguments of {} exceed the limit of {}",
                b(a.argument_bytes),
                b(a.limit_bytes)
            ),
        });
    }
    v.fix = Fix {
        advice: "Split the array: shard it across devices (jax.sharding / torch.distributed), process it in chunks, or use a smaller dtype.".into(),
        check: None,
    };
    Some(v)
}
