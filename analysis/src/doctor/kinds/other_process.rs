//! The device itself was full: the driver refused memory (a pool that could not grow, a
//! framework's new segment) while other processes, or memory outside the framework's
//! pool, held the device. Named from the capture's other processes on the same device,
//! or the device samples.

use super::{exact, Ctx};
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    let (pid, dev) = ctx.at()?;
    // The driver refused device memory to this process (its pool could not grow).
    let cap_refusals: Vec<_> = ctx
        .ev
        .capture
        .iter()
        .flat_map(|c| c.loaded.processes.values())
        .filter(|p| p.pid == pid)
        .flat_map(|p| p.failures.iter())
        .filter(|x| x.result == 2 && x.device == dev)
        .filter(|x| {
            crate::live::Family::of(memwatch_wire::MemKind::from_u8(x.mem_kind), x.api)
                .is_some_and(|fam| fam.on_device())
        })
        .collect();
    let log_refusals = &ctx.log.device_alloc_failures;
    let torch_others: u64 = ctx
        .log
        .torch_ooms
        .last()
        .map_or(0, |t| t.other_processes.iter().map(|o| o.1).sum());
    if cap_refusals.is_empty() && log_refusals.is_empty() && torch_others == 0 {
        return None;
    }
    let others = ctx.drivers.others_on(dev, pid);
    let mut held: u64 = others.iter().map(|o| o.1).sum();
    let ours = ctx.drivers.of(pid, dev).map_or(0, |d| d.at_checkpoint);
    let total = ctx.device_total(Some(pid), Some(dev));
    let mut names: Vec<String> = others
        .iter()
        .map(|(p, bytes)| {
            let cmd = ctx
                .ev
                .capture
                .as_ref()
                .and_then(|c| c.loaded.processes.values().find(|x| x.pid == *p))
                .map(|x| x.argv.join(" "))
                .unwrap_or_default();
            format!(
                "pid {p} ({}) held {}",
                crate::doctor::clip(&cmd, 60),
                b(*bytes)
            )
        })
        .collect();
    if held == 0 && torch_others > 0 {
        held = torch_others;
        names = ctx
            .log
            .torch_ooms
            .last()
            .map(|t| {
                t.other_processes
                    .iter()
                    .map(|(p, m)| format!("pid {p} held {}", b(*m)))
                    .collect()
            })
            .unwrap_or_default();
    }
    // Without other captured processes: the device samples say what was used in all.
    let sampled = ctx
        .ev
        .device_samples
        .iter()
        .find(|s| s.device == dev)
        .and_then(|s| s.max_used());
    // Device readings split at one instant (memwatch's own sampler): the device's use
    // minus this run's processes' at that instant, preferring readings taken at a failure.
    let split = ctx
        .ev
        .device_samples
        .iter()
        .filter(|s| s.device == dev)
        .filter_map(|s| {
            s.with_splits()
                .filter_map(|(t, _, _, x)| Some((t, x?)))
                .max_by_key(|(t, x)| (x.at_failure, x.other_bytes, std::cmp::Reverse(*t)))
        })
        .max_by_key(|(_, x)| (x.at_failure, x.other_bytes));
    if held == 0 {
        if let Some((_, x)) = split {
            if x.other_bytes == 0 {
                return None;
            }
            held = x.other_bytes;
            names.push(format!(
                "the device readings show {} in use outside this run while its processes held {}, at the same instant",
                b(x.other_bytes),
                b(x.watched_bytes)
            ));
        }
    }
    if held == 0 {
        match sampled {
            Some(used) if used > ours => {
                held = used - ours;
                names.push(format!(
                    "the device samples show up to {} in use, {} more than this process",
                    b(used),
                    b(held)
                ));
            }
            _ => return None,
        }
    }
    let mut v = ctx.base(Kind::OtherProcess);
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    v.figures.insert("other_process_bytes".into(), held);
    v.figures.insert("process_bytes".into(), ours);
    if let Some(t) = total {
        v.figures.insert("device_total_bytes".into(), t);
    }
    let refused = cap_refusals.len().max(log_refusals.len());
    v.figures
        .insert("refused_driver_allocations".into(), refused as u64);
    if let Some(x) = cap_refusals.first() {
        v.evidence.push(Cite {
            file: ctx.capture_path(),
            line: None,
            what: format!(
                "{} refused {} driver allocation(s) on device {dev} (the first {} B)",
                x.api.name(),
                cap_refusals.len(),
                x.size
            ),
        });
    } else if let Some(x) = log_refusals.first() {
        v.evidence.push(Cite {
            file: x.at.file.clone(),
            line: Some(x.at.line),
            what: format!("the driver refused {} B ({})", x.bytes, x.error),
        });
    }
    v.headline = format!(
        "Device {dev} was full: other processes held {} while this process (pid {pid}) held {}.",
        b(held),
        b(ours)
    );
    v.why = format!(
        "The driver refused this process's allocations ({refused} refused) although its own pool was within its limit: {}. This process held {}{}.",
        names.join("; "),
        exact(ours),
        total
            .map(|t| format!(" of the device's {}", b(t)))
            .unwrap_or_default()
    );
    let need = ours.saturating_add(f.request.unwrap_or(0));
    v.fix = Fix {
        advice: "Give the jobs separate GPUs (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES) or stop the other process; a JAX process can reserve its pool at start (XLA_PYTHON_CLIENT_PREALLOCATE=true) so it is not taken later.".into(),
        check: total.map(|t| Check {
            method: "recorded_figures".into(),
            passed: need <= t,
            detail: format!(
                "this process's {} plus the request fit the {} device alone; with the others' {} they did not",
                b(ours),
                b(t),
                b(held)
            ),
        }),
    };
    Some(v)
}
