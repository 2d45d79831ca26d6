//! Co-resident executables: the failing executable fits the pool alone (arguments +
//! temp), but another executable's outputs were still live and took the room.

use super::{exact, Ctx};
use crate::doctor::facts::Producer;
use crate::doctor::verdict::{Fix, Kind, Verdict, When};
use crate::size::format_bytes as b;
use std::collections::BTreeMap;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    if f.when != When::Execute {
        return None;
    }
    let exe = f.executable.as_deref()?;
    let (pid, dev) = ctx.at()?;
    let need = ctx.executable_bytes(Some(pid), exe)?;
    let (args, outputs, temp) = (need.arguments, need.outputs, need.temp);
    let pool = ctx.pool_state();
    let p = pool.pool.or(pool.limit)?;
    let alone = need.alone();
    if alone > p {
        return None;
    }
    let at = ctx.failure_rt();
    let mut groups: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    // Everything live when it ran; its arguments are among these buffers (an argument
    // is live while the call runs, whichever executable made it), so only what is live
    // beyond them took room from it.
    let mut live_total = 0u64;
    for buf in ctx.pjrt.live_at(pid, dev, at) {
        live_total = live_total.saturating_add(buf.size);
        if let Producer::Execution(i) = buf.producer {
            let x = &ctx.pjrt.executions[i];
            let name = ctx.pjrt.name(x.pid, x.handle);
            if name != exe {
                let g = groups.entry(name).or_default();
                g.0 += buf.size;
                g.1 += 1;
            }
        }
    }
    let (resident, (bytes, count)) = groups.into_iter().max_by_key(|g| g.1 .0)?;
    let beyond_arguments = live_total.saturating_sub(args);
    if alone.saturating_add(bytes.min(beyond_arguments)) <= p {
        return None;
    }
    let mut v = ctx.base(Kind::CoResident);
    v.who.resident_executable = Some(resident.clone());
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("resident_bytes".into(), bytes);
    v.figures.insert("pool_bytes".into(), p);
    v.figures.insert("temp_bytes".into(), temp);
    v.figures.insert("argument_bytes".into(), args);
    v.evidence.extend(pool.cites.clone());
    v.headline = format!(
        "{exe} fits the pool alone, but {resident}'s outputs ({}) were still live: together they need more than the {} pool.",
        b(bytes),
        b(p)
    );
    v.why = format!(
        "{exe} needs {} (arguments {} + outputs {} + temp {}), which fits the {} pool; {count} output buffer(s) of {resident} ({}) were live when it ran, and the two do not fit together.",
        b(alone),
        b(args),
        b(outputs),
        b(temp),
        exact(p),
        exact(bytes)
    );
    let sized = ctx.sized_pool(&[f.request.unwrap_or(temp)], true);
    let check = sized.as_ref().map(|sp| sp.check());
    let sized = sized
        .map(|sp| format!("; or give both room: {}", sp.advice()))
        .unwrap_or_default();
    v.fix = Fix {
        advice: format!(
            "Release {resident}'s outputs before calling {exe} (del them, or pass them with donate_argnums so XLA reuses their memory), or move them to the host while {exe} runs{sized}."
        ),
        check,
    };
    Some(v)
}
