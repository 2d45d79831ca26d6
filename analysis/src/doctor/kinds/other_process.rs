//! The device itself was full: the driver refused memory (a pool that could not grow, a
//! framework's new segment) while other processes, or memory outside the framework's
//! pool, held the device. Named from the capture's other processes on the same device,
//! or the device samples.

use super::{exact, Ctx};
use crate::doctor::ledger::HolderKind;
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
    // Without other captured processes: the ledger at the failure (device samples
    // matched to its instant) says what was held outside the capture.
    if held == 0 {
        let l = ctx
            .ledger
            .filter(|l| l.pid == Some(pid) && l.device == dev && l.moment == "failure")?;
        let unrecorded = l.bytes_of(HolderKind::OtherProcessUnrecorded);
        let unknown = l.unattributed_bytes.unwrap_or(0);
        if unrecorded.saturating_add(unknown) <= l.tolerance_bytes {
            return None;
        }
        held = unrecorded.saturating_add(unknown);
        if unrecorded > 0 {
            names.push(format!(
                "processes the capture did not record held {} (device samples)",
                b(unrecorded)
            ));
        }
        if unknown > 0 {
            names.push(format!(
                "{} more was in use outside the capture, by no holder the evidence names",
                b(unknown)
            ));
        }
    }
    let mut v = ctx.base(Kind::OtherProcess);
    v.holder = crate::doctor::verdict::Blame {
        pid: (others.len() == 1).then(|| others[0].0),
        framework: None,
        other_process: true,
    };
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
