//! Execute-time temp: an XLA executable's temp buffer (its scratch while it runs), with
//! its arguments, is larger than the pool. The compiled statistics (capture) or the
//! buffer assignment (dump) give the temp; the dump names what fills it.

use super::{exact, Ctx};
use crate::doctor::check;
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict, When};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    if f.when != When::Execute {
        return None;
    }
    let exe = f.executable.as_deref()?;
    let (args, _out, temp) = ctx.executable_bytes(f.pid, exe)?;
    let pool = ctx.pool_state();
    let p = pool.pool.or(pool.limit)?;
    if temp.saturating_add(args) <= p && f.request.is_none_or(|r| r <= p) {
        return None;
    }
    let mut v = ctx.base(Kind::ExecuteTemp);
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("temp_bytes".into(), temp);
    v.figures.insert("argument_bytes".into(), args);
    v.figures.insert("pool_bytes".into(), p);
    v.evidence.extend(pool.cites.clone());
    let module = ctx.ev.dump.as_ref().and_then(|d| {
        d.modules
            .iter()
            .filter(|m| m.name == exe)
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
    v.headline = format!(
        "{exe} needs a {} temp buffer at execute time; with its {} of arguments that is more than the {} pool.",
        b(temp),
        b(args),
        b(p)
    );
    v.why = format!(
        "The compiled executable asks for its temp buffer ({}) when it runs; its arguments ({}) are already in the pool ({}), so temp + arguments = {} cannot fit whatever else is live.{biggest}",
        exact(temp),
        b(args),
        exact(p),
        b(temp + args)
    );
    let total = ctx.device_total(f.pid, f.device);
    let mut check = None;
    let mut advice = String::new();
    if let (Some((pid, dev)), Some(total)) = (ctx.at(), total) {
        let req = f.request.unwrap_or(temp);
        if let Some(t) = check::run_trace(ctx.pjrt, pid, dev, ctx.failure_rt(), Some(req)) {
            match check::min_pool(&t, total) {
                Some(min) => match check::fraction_for(min, total) {
                    Some(frac) => {
                        let pool = check::pool_of_fraction(frac, total);
                        let ok = check::fits(&t, pool);
                        advice = format!(
                            "Run with XLA_CLIENT_MEM_FRACTION={frac:.2} (a {} pool), or shrink the temp: ",
                            b(pool)
                        );
                        check = Some(Check {
                            method: "bfc_replay".into(),
                            passed: ok,
                            detail: format!(
                                "the run's {} buffers and temps and this {} request replayed through the BFC model: the smallest pool that fits is {}; a {} pool fits",
                                t.buffers,
                                b(req),
                                b(min),
                                b(pool)
                            ),
                        });
                    }
                    None => {
                        advice = format!(
                            "No fraction fits (the replay needs {} of the {} device): shrink the temp: ",
                            b(min),
                            b(total)
                        );
                    }
                },
                None => {
                    advice = format!(
                        "It does not fit the {} device at all: shrink the temp: ",
                        b(total)
                    );
                }
            }
        }
    }
    v.fix = Fix {
        advice: format!(
            "{advice}rematerialize (jax.checkpoint), a smaller batch or sequence, or shard the computation across devices."
        ),
        check,
    };
    Some(v)
}
