//! Execute-time temp: an XLA executable's temp buffer (its scratch while it runs), with
//! its arguments, is larger than the pool. The compiled statistics (capture) or the
//! buffer assignment (dump) give the temp; the dump names what fills it.

use super::{exact, Ctx};
use crate::doctor::check;
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict, When};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    if f.when != When::Execute {
        return None;
    }
    let exe = f.executable.as_deref()?;
    let pool = ctx.pool_state();
    let p = pool.pool.or(pool.limit)?;
    let Some(need) = ctx.executable_bytes(f.pid, exe) else {
        return from_remat_warning(ctx, exe, p);
    };
    let (args, temp) = (need.arguments, need.temp);
    if need.alone() <= p && f.request.is_none_or(|r| r <= p) {
        return None;
    }
    if let Some(v) = super::missing_donation::verdict(ctx, exe, &need, p) {
        return Some(v);
    }
    let mut v = ctx.base(Kind::ExecuteTemp);
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("temp_bytes".into(), temp);
    v.figures.insert("argument_bytes".into(), args);
    v.figures.insert("output_bytes".into(), need.outputs);
    v.figures.insert("pool_bytes".into(), p);
    v.evidence.extend(pool.cites.clone());
    let module = ctx.dump.and_then(|d| {
        d.modules
            .iter()
            .filter(|m| m.name == exe)
            // The process's own compilation (a folder several processes dumped into holds
            // others' modules of the same name).
            .filter(|m| {
                (m.argument_bytes, m.output_bytes, m.temp_bytes) == (args, need.outputs, temp)
            })
            .max_by_key(|m| m.temp_bytes)
    });
    let mut biggest = String::new();
    if let Some(m) = module {
        v.evidence.push(Cite {
            file: m.file.clone(),
            line: None,
            what: format!("{exe}'s buffer assignment: temp {}", b(m.temp_bytes)),
        });
        if let Some(top) = m.top_temp_values.first() {
            v.who.hlo_instruction = Some(top.instruction.clone());
            v.who.op_name = top.op_name.clone();
            biggest = format!(
                " Its largest temp value is {} ({}, {}{}).",
                top.instruction,
                top.shape,
                b(top.bytes),
                top.op_name
                    .as_deref()
                    .map(|o| format!(", op_name {o}"))
                    .unwrap_or_default()
            );
        }
    }
    if let Some(r) = ctx.log.remat_warnings.last() {
        v.evidence.push(Cite {
            file: r.at.file.clone(),
            line: Some(r.at.line),
            what: format!(
                "XLA warned at compile time: rematerialization could not get below {} (reached {})",
                b(r.target_bytes),
                b(r.achieved_bytes)
            ),
        });
    }
    let outputs = need.outputs.saturating_sub(need.alias);
    let with_outputs = if outputs > 0 {
        format!(" and {} of outputs", b(outputs))
    } else {
        String::new()
    };
    v.headline = if temp > 0 {
        format!(
            "{exe} needs a {} temp buffer at execute time; with its {} of arguments{with_outputs} that is more than the {} pool.",
            b(temp),
            b(args),
            b(p)
        )
    } else {
        format!(
            "{exe}'s {} of arguments{with_outputs} are more than the {} pool on their own.",
            b(args),
            b(p)
        )
    };
    v.why = format!(
        "The compiled executable asks for its temp buffer ({}) when it runs; its arguments ({}) are already in the pool ({}){}, so it needs {} on its own and cannot fit whatever else is live.{biggest}",
        exact(temp),
        b(args),
        exact(p),
        if outputs > 0 {
            format!(" and its outputs ({}) are allocated with the temp", b(outputs))
        } else {
            String::new()
        },
        b(need.alone())
    );
    let req = f.request.unwrap_or(temp);
    let sized = ctx.sized_pool(&[req], true);
    let advice = match &sized {
        Some(sp) if sp.fraction.is_some() || ctx.device_total(f.pid, f.device).is_none() => {
            format!("Run with {}, or shrink the temp: ", sp.advice())
        }
        Some(sp) => format!(
            "No fraction fits (the replay needs {} of the device): shrink the temp: ",
            b(sp.min_pool)
        ),
        None => String::new(),
    };
    let check = sized.as_ref().map(|sp| sp.check());
    let shrink = if temp > 0 {
        "rematerialize (jax.checkpoint), a smaller batch or sequence, or shard the computation across devices."
    } else {
        "smaller arguments and outputs (a smaller batch or model, lower precision), or shard them across devices."
    };
    let advice = if temp > 0 {
        advice
    } else {
        advice
            .replace(", or shrink the temp: ", ", or ")
            .replace("shrink the temp: ", "")
    };
    v.fix = Fix {
        advice: format!("{advice}{shrink}"),
        check,
    };
    Some(v)
}

/// Without compiled statistics (a log alone): XLA's compile-time warning that
/// rematerialization could not bring the module below the pool, logged before the OOM.
fn from_remat_warning(ctx: &Ctx<'_>, exe: &str, pool: u64) -> Option<Verdict> {
    let oom = ctx.log.ooms.last()?;
    let w = ctx
        .log
        .remat_warnings
        .iter()
        .rfind(|w| w.at.file == oom.at.file && w.at.line < oom.at.line)?;
    if w.achieved_bytes <= pool {
        return None;
    }
    let mut v = ctx.base(Kind::ExecuteTemp);
    if let Some(r) = v.what.request_bytes {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("pool_bytes".into(), pool);
    v.figures
        .insert("module_peak_bytes".into(), w.achieved_bytes);
    v.evidence.push(Cite {
        file: w.at.file.clone(),
        line: Some(w.at.line),
        what: format!(
            "XLA warned at compile time: rematerialization could not get below {} (reached {})",
            b(w.target_bytes),
            b(w.achieved_bytes)
        ),
    });
    v.evidence.extend(ctx.pool_state().cites);
    v.headline = format!(
        "{exe} needs {} at its peak (XLA's own estimate at compile time), more than the {} pool.",
        b(w.achieved_bytes),
        b(pool)
    );
    v.why = format!(
        "At compile time XLA tried to rematerialize {exe} down to {} and reached only {}; the pool is {}, so its execution's buffers (temp and arguments) cannot fit. The log alone does not split that into temp and arguments (a capture or an XLA dump does).",
        exact(w.target_bytes),
        exact(w.achieved_bytes),
        exact(pool)
    );
    let total = ctx.device_total(v.what.pid, v.what.device);
    v.fix = Fix {
        advice: match total.and_then(|t| check::fraction_for(w.achieved_bytes, t)) {
            Some(f) => format!(
                "Give the pool at least {} (XLA_CLIENT_MEM_FRACTION={f:.2}), or shrink {exe}'s temp: jax.checkpoint, a smaller batch, or sharding.",
                b(w.achieved_bytes)
            ),
            None => format!(
                "Give the pool at least {} (a larger memory fraction), or shrink {exe}'s temp: jax.checkpoint, a smaller batch, or sharding.",
                b(w.achieved_bytes)
            ),
        },
        check: None,
    };
    Some(v)
}
