//! Memory was refused but the run did not end on it: the process exited 0 (XLA's
//! preallocation backed off to a smaller pool, an out-of-memory error was caught and
//! retried smaller). A warning that says what it cost — the memory it got against what
//! it asked for — and who held the rest at the first refusal (the device's ledger at
//! that instant: the process's bytes and the device's, time-matched).

use super::{exact, Ctx};
use crate::doctor::ledger::{self, HolderKind};
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict};
use crate::live::Family;
use crate::size::format_bytes as b;
use memwatch_wire::{EventKind, MemKind};

/// Whether the failure ended the run: `false` when the process the capture saw fail
/// exited 0 (a failure only a log states, in a process the capture did not tie it to:
/// when the run exited 0); unknown exits count as ending it.
pub fn ended_run(ev: &crate::doctor::Evidence, f: &crate::doctor::failure::Failure) -> bool {
    let own = ev
        .capture
        .as_ref()
        .filter(|_| f.seen_in_capture)
        .and_then(|c| {
            c.loaded
                .processes
                .values()
                .filter(|p| f.pid.is_some_and(|x| p.pid == x))
                .filter_map(|p| p.exit_code)
                .next_back()
        });
    // A run that as a whole ended with a failing status after the refusal did not recover
    // from it, whichever of its processes the failure is placed in.
    if ev.run.exit_code.is_some_and(|c| c != 0) {
        return true;
    }
    let exit = if f.seen_in_capture {
        own
    } else {
        ev.run.exit_code
    };
    exit != Some(0)
}

pub fn warning(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    let mut v = ctx.base(Kind::Recovered);
    v.failure = false;
    let (pid, dev) = (f.pid, f.device);
    // The refused driver calls of the process on the device, in time order.
    let refusals: Vec<_> = ctx
        .ev
        .capture
        .iter()
        .flat_map(|c| c.loaded.processes.values())
        .filter(|p| pid.is_some_and(|x| p.pid == x))
        .flat_map(|p| p.failures.iter())
        .filter(|x| x.result == 2 && dev.is_none_or(|d| x.device == d))
        .filter(|x| {
            Family::of(MemKind::from_u8(x.mem_kind), x.api).is_some_and(|fam| fam.on_device())
        })
        .collect();
    let asked = refusals
        .iter()
        .map(|x| x.size)
        .max()
        .or(f.request)
        .filter(|a| *a > 0);
    let first = refusals.iter().map(|x| x.ts).min().or(f.ts_raw);
    let last = refusals.iter().map(|x| x.ts).max().or(f.ts_raw);
    // What it got: XLA's pool after the last refusal, else the next allocation of the
    // same call that succeeded.
    let got = match (&ctx.ev.capture, pid, dev, last) {
        (Some(c), Some(p), Some(d), Some(t)) => {
            let rt = c.runtime_ts_of(t);
            let pool = ctx
                .pjrt
                .samples(p, d)
                .into_iter()
                .find(|s| s.ts_ns >= rt && s.pool_bytes.is_some_and(|x| x > 0))
                .and_then(|s| s.pool_bytes)
                .map(|x| (x, "the allocator's pool"));
            pool.or_else(|| {
                let api = refusals.last()?.api;
                let l = &c.loaded;
                let from = l.events.partition_point(|e| e.ts <= t);
                l.events[from..]
                    .iter()
                    .find(|e| {
                        let (k, sd) = l.streams[e.stream as usize];
                        k.pid == p
                            && sd == d
                            && e.api() == api
                            && e.kind() == Some(EventKind::Alloc)
                    })
                    .map(|e| (e.size, "the next allocation of that call that succeeded"))
            })
        }
        _ => None,
    };
    let n = refusals.len().max(1) as u64;
    v.figures.insert("refused_allocations".into(), n);
    if let Some(a) = asked {
        v.figures.insert("asked_bytes".into(), a);
    }
    if let Some((g, _)) = got {
        v.figures.insert("got_bytes".into(), g);
    }
    // Who held the device at the first refusal.
    let at_first = first.map(|t| {
        ledger::at(
            &ledger::Inputs {
                ev: ctx.ev,
                prefer_pid: pid,
                log: ctx.log,
                pjrt: ctx.pjrt,
                drivers: ctx.drivers,
                failure: ctx.failure,
            },
            pid,
            dev.unwrap_or(0),
            ctx.ev.capture.as_ref().map(|_| t),
            "first refusal",
        )
    });
    let mut held = String::new();
    if let Some(l) = &at_first {
        let others = l.others();
        let mine: u64 = l
            .holders
            .iter()
            .filter(|h| {
                h.pid.is_some() && h.pid == pid && h.kind != HolderKind::OtherProcessUnrecorded
            })
            .map(|h| h.bytes)
            .sum();
        v.figures.insert("process_bytes_at_refusal".into(), mine);
        if others > mine {
            let recorded: Vec<u32> = l
                .of(HolderKind::OtherProcess)
                .filter_map(|h| h.pid)
                .collect();
            v.holder = crate::doctor::verdict::Blame {
                pid: (recorded.len() == 1).then(|| recorded[0]),
                framework: None,
                other_process: true,
            };
        }
        if others > 0 {
            v.figures.insert("other_process_bytes".into(), others);
        }
        if let Some(fr) = l.free() {
            v.figures.insert("device_free_bytes_at_refusal".into(), fr);
        }
        let names: Vec<String> = l
            .holders
            .iter()
            .filter(|h| {
                matches!(
                    h.kind,
                    HolderKind::OtherProcess | HolderKind::OtherProcessUnrecorded
                )
            })
            .map(|h| format!("{} held {}", h.name, b(h.bytes)))
            .collect();
        held = match (names.is_empty(), l.free()) {
            (false, Some(fr)) => format!(
                " At the first refusal {}; this process held {} and {} was free{}.",
                names.join(", "),
                b(mine),
                b(fr),
                l.sample_offset_ms
                    .map(|o| format!(" (device sample {o:+} ms from it)"))
                    .unwrap_or_default()
            ),
            (false, None) => format!(" At the first refusal {}.", names.join(", ")),
            (true, Some(fr)) => format!(
                " At the first refusal this process held {} and the device had {} free.",
                b(mine),
                b(fr)
            ),
            (true, None) => String::new(),
        };
    }
    if let Some(x) = refusals.first() {
        v.evidence.push(Cite {
            file: ctx.capture_path(),
            line: None,
            what: format!(
                "{} refused {} allocation(s) (the first {} B), then the process went on and exited 0",
                x.api.name(),
                refusals.len(),
                x.size
            ),
        });
    }
    let cost = match (asked, got) {
        (Some(a), Some((g, what))) if g < a => format!(
            ": it asked for {} and got {} ({what}), {} less",
            b(a),
            b(g),
            b(a - g)
        ),
        (Some(a), Some((g, what))) => format!(": it asked for {} and got {} ({what})", b(a), b(g)),
        (Some(a), None) => format!(": it asked for {}", b(a)),
        _ => String::new(),
    };
    v.headline = format!(
        "Recovered: {} device allocation(s) refused, but the program went on and exited 0{cost}.",
        n
    );
    v.why = format!(
        "The driver refused {}{}; the program recovered (a smaller pool, a retry) and did not fail.{held}",
        asked.map_or("memory".into(), |a| format!("a request of {}", exact(a))),
        if n > 1 { format!(" and {} more after it", n - 1) } else { String::new() },
    );
    // The advice follows from who held the memory and what was asked: more than the
    // device has, memory other processes held, or XLA's pool sized by a fraction.
    let others = at_first.as_ref().map_or(0, |l| l.others());
    let total = ctx.device_total(pid, dev);
    let xla = matches!(got, Some((_, "the allocator's pool")))
        || pid
            .zip(dev)
            .is_some_and(|(p, d)| !ctx.pjrt.samples(p, d).is_empty());
    let mut ways: Vec<String> = Vec::new();
    if let (Some(a), Some(t)) = (asked, total) {
        if a > t {
            ways.push(format!(
                "ask for at most what the device has ({} asked of its {})",
                b(a),
                b(t)
            ));
        }
    }
    if others > 0 {
        ways.push(format!(
            "give it a device the other processes ({} at the first refusal) do not use (CUDA_VISIBLE_DEVICES)",
            b(others)
        ));
    }
    if xla {
        ways.push(
            "size XLA's pool to what the run needs (XLA_PYTHON_CLIENT_MEM_FRACTION, or XLA_PYTHON_CLIENT_PREALLOCATE=false)"
                .into(),
        );
    }
    if ways.is_empty() {
        ways.push("ask for what the run needs".into());
    }
    v.fix = Fix {
        advice: match got {
            Some((g, _)) if asked.is_some_and(|a| g < a) => format!(
                "Nothing failed, but the run had {} less than it asked for: {} so a later step does not run short.",
                b(asked.unwrap_or(0) - g),
                ways.join(", or ")
            ),
            _ => format!(
                "Nothing failed; a later, larger step may: {}.",
                ways.join(", or ")
            ),
        },
        check: None,
    };
    Some(v)
}
