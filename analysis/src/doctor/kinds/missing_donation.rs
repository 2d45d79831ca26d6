//! An update without donation: an executable's outputs are allocated beside its
//! arguments although they could reuse them (same sizes, the arguments not used after
//! the call: `donate_argnums`), and without those outputs the execution fits. Read from
//! the compiled statistics (no aliasing, outputs no larger than the arguments) and the
//! run's live buffers (an argument of the failing request's size is live); the saving is
//! checked by replaying the run's own trace through the BFC model without the outputs.

use super::{exact, Ctx, ExecutableBytes};
use crate::doctor::check;
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

/// The verdict when `need` (of `exe`, failing in a pool of `pool` bytes) fits once its
/// outputs reuse its arguments.
pub fn verdict(ctx: &Ctx<'_>, exe: &str, need: &ExecutableBytes, pool: u64) -> Option<Verdict> {
    let f = ctx.failure?;
    if need.alias > 0 || need.outputs == 0 || need.outputs > need.arguments {
        return None;
    }
    let donated = need.alone().saturating_sub(need.outputs);
    if donated > pool {
        return None;
    }
    let rt = ctx.failure_rt();
    // An argument of the request's size is live: the output it would replace.
    let same_size = match (ctx.at(), f.request) {
        (Some((pid, dev)), Some(r)) => {
            let mut live = ctx.pjrt.live_at(pid, dev, rt).peekable();
            if live.peek().is_none() {
                None
            } else {
                Some(live.any(|b| b.size == r))
            }
        }
        _ => None,
    };
    if same_size == Some(false) {
        return None;
    }
    let mut v = ctx.base(Kind::MissingDonation);
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("argument_bytes".into(), need.arguments);
    v.figures.insert("output_bytes".into(), need.outputs);
    v.figures.insert("temp_bytes".into(), need.temp);
    v.figures.insert("pool_bytes".into(), pool);
    v.figures.insert("saving_bytes".into(), need.outputs);
    v.evidence.extend(ctx.pool_state().cites);
    v.evidence.push(Cite {
        file: ctx.capture_path(),
        line: None,
        what: format!(
            "{exe}'s compiled statistics: arguments {}, outputs {}, aliased 0, temp {}",
            b(need.arguments),
            b(need.outputs),
            b(need.temp)
        ),
    });
    v.headline = format!(
        "{exe} allocates {} of outputs beside its {} of arguments: nothing is donated; with its outputs reusing the arguments it needs {}, within the {} pool.",
        b(need.outputs),
        b(need.arguments),
        b(donated),
        b(pool)
    );
    v.why = format!(
        "The executable needs its arguments ({}), its outputs ({}) and its temp ({}) at once: {}, more than the pool ({}). No output reuses an argument's memory (aliased 0 B){}. Donated, the outputs take the arguments' place and it needs {}.",
        exact(need.arguments),
        exact(need.outputs),
        b(need.temp),
        b(need.alone()),
        exact(pool),
        if same_size == Some(true) {
            ", and an argument of the failing output's size was live at the failure"
        } else {
            ""
        },
        b(donated)
    );
    // The replay: the run's buffers and temps, with only the temp asked for (the outputs
    // land in the donated arguments), against the same with the failing request.
    let check = ctx.at().and_then(|(pid, dev)| {
        // Up to just before the failing call: its own outputs are the request.
        let before = rt.saturating_sub(1);
        let with = check::run_trace(ctx.pjrt, pid, dev, before, &[f.request?])?;
        let without = check::run_trace(ctx.pjrt, pid, dev, before, &[need.temp])?;
        (with.buffers > 0).then(|| {
            let fails = !check::fits(&with, pool);
            let fits = check::fits(&without, pool);
            Check {
                method: "bfc_replay".into(),
                passed: fails && fits,
                detail: format!(
                    "the run's {} buffers and temps replayed through the BFC model at the run's {} pool: with the {} output request it {}; with the outputs donated ({}) it {}",
                    with.buffers,
                    b(pool),
                    b(f.request.unwrap_or(0)),
                    if fails { "fails, as the run did" } else { "fits (the replay misses what made the run fail)" },
                    if need.temp > 0 {
                        format!("only the {} temp asked for", b(need.temp))
                    } else {
                        "nothing more asked for".to_string()
                    },
                    if fits { "fits" } else { "still fails" }
                ),
            }
        })
    });
    let check = check.or_else(|| {
        Some(Check {
            method: "recorded_figures".into(),
            passed: donated <= pool,
            detail: format!(
                "arguments {} + temp {} = {} ≤ the {} pool",
                b(need.arguments),
                b(need.temp),
                b(donated),
                b(pool)
            ),
        })
    });
    v.fix = Fix {
        advice: format!(
            "Donate the arguments the outputs replace: jax.jit({exe_fn}, donate_argnums=…) (e.g. the parameters of an update step, when the old values are not used after the call); the outputs then reuse their {} and the step needs {}.",
            b(need.outputs),
            b(donated),
            exe_fn = exe.strip_prefix("jit_").unwrap_or(exe)
        ),
        check,
    };
    Some(v)
}
