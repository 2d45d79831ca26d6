//! The OOM doctor: one verdict per out-of-memory failure of a run, from whatever
//! evidence exists — what failed (request, allocator, process, device, error), when
//! (compile, autotuning, execute, data transfer, a framework's allocator), who asked
//! (executable, HLO instruction, `op_name`, source line, Python frame), why (one
//! [`Kind`], with the figures that prove it) and the fix, checked where memwatch can
//! (e.g. a pool size confirmed by replaying the run's own trace through the BFC model).
//!
//! - `evidence`: the inputs and how each is loaded (capture, logs, XLA dump, device
//!   samples, framework allocator states, the run's own facts);
//! - `dumps`: which of several XLA dumps (one per worker) is the failing process's;
//! - `facts`: figures derived from a capture (driver-level live bytes through the one
//!   `LiveSet`, PJRT buffers, executions, allocator samples);
//! - `failure`: which failure ended the run;
//! - `imbalance`: the failing device's share of the run's memory when it is one of
//!   several;
//! - `steps`: growth step after step (leaks);
//! - `need`: the one rule for live set + request against the pool;
//! - `check`: replaying the run's trace through the BFC model to check a fix;
//! - `kinds`: one module per kind;
//! - `verdict`: the stable, serialisable answer.
//!
//! Nothing here prints or exits.

pub mod check;
pub mod dumps;
pub mod evidence;
pub mod facts;
pub mod failure;
pub mod imbalance;
mod kinds;
pub mod ledger;
pub mod need;
pub mod snapshot;
pub mod steps;
pub mod verdict;

pub use evidence::{
    CaptureEvidence, DeviceSeries, DumpEvidence, Evidence, FrameworkState, LogEvidence, RunFacts,
};
pub use verdict::{Check, Cite, Diagnosis, Fix, Kind, Missing, Source, Verdict, What, When, Who};

use std::path::PathBuf;

/// Why a piece of evidence could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error(transparent)]
    Capture(#[from] crate::capture::CaptureError),
    #[error(transparent)]
    Log(#[from] crate::xla::ParseError),
    #[error(transparent)]
    Xla(#[from] crate::xla::XlaError),
    #[error(transparent)]
    Snapshot(#[from] crate::torch::SnapshotError),
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}: {msg}", path.display())]
    NotADump { path: PathBuf, msg: String },
    #[error("{}:{line}: {msg}", path.display())]
    Samples {
        path: PathBuf,
        line: usize,
        msg: String,
    },
}

/// Cuts `s` to `n` characters (with `…`).
pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n.saturating_sub(1)).collect();
        format!("{t}…")
    }
}

/// Diagnoses a run from its evidence.
pub fn diagnose(ev: &Evidence) -> Diagnosis {
    let empty = crate::log::LogReport::default();
    let log = ev.log.as_ref().map_or(&empty, |l| &l.report);
    let pjrt = ev
        .capture
        .as_ref()
        .map(facts::PjrtFacts::compute)
        .unwrap_or_default();
    let failure = failure::identify(ev, &pjrt);
    let checkpoint = failure.as_ref().and_then(|f| f.ts_raw).unwrap_or(u64::MAX);
    let drivers = ev
        .capture
        .as_ref()
        .map(|c| facts::DriverFacts::compute(c, checkpoint))
        .unwrap_or_default();
    let dumps = dumps::choose(ev, failure.as_ref().and_then(|f| f.pid));
    // What ended the run decides a failure: refusals of a run that exited 0 are a
    // warning, and its ledger is taken at its peak.
    let recovered = failure.as_ref().is_some_and(|f| !kinds::ended_run(ev, f));
    let ledger = ledger::compute(&ledger::Inputs {
        ev,
        prefer_pid: failure.as_ref().and_then(|f| f.pid),
        log,
        pjrt: &pjrt,
        drivers: &drivers,
        failure: failure.as_ref().filter(|_| !recovered),
    });
    let ctx = kinds::Ctx {
        ev,
        dump: dumps.chosen.and_then(|i| ev.dumps.get(i)),
        log,
        pjrt: &pjrt,
        drivers: &drivers,
        failure: failure.as_ref(),
        ledger: ledger.as_ref(),
        recovered,
    };
    let mut verdicts = kinds::classify(&ctx);
    let imbalance = match (&ev.capture, &failure) {
        (Some(c), Some(f)) => imbalance::compute(c, f, &drivers, &pjrt),
        _ => None,
    };
    if let (Some(i), Some(v)) = (&imbalance, verdicts.iter_mut().find(|v| v.failure)) {
        i.annotate(v);
    }
    let failed = verdicts.iter().any(|v| v.failure);
    let headline = verdicts.first().map_or_else(
        || match (&ev.capture, &ev.log) {
            (None, None) if ev.framework_states.is_empty() => {
                "No evidence to diagnose.".to_string()
            }
            _ => match ev.run.exit_code {
                Some(c) if c != 0 => format!(
                    "The run failed (exit status {c}) but no source shows an out-of-memory failure."
                ),
                _ => "No out-of-memory failure found.".to_string(),
            },
        },
        |v| v.headline.clone(),
    );
    let missing = missing(
        ev,
        failure.as_ref(),
        &verdicts,
        dumps.chosen.is_none(),
        ledger.as_ref(),
    );
    Diagnosis {
        schema: verdict::SCHEMA,
        failed,
        headline,
        devices: device_peaks(ev, &drivers),
        imbalance,
        ledger,
        sources: sources(ev, &dumps),
        missing,
        verdicts,
    }
}

fn device_peaks(ev: &Evidence, drivers: &facts::DriverFacts) -> Vec<verdict::DevicePeak> {
    let Some(cap) = &ev.capture else {
        return Vec::new();
    };
    let base = cap.loaded.base_ns();
    drivers
        .per
        .iter()
        .filter(|((_, d), v)| *d >= 0 && v.peak_bytes > 0)
        .map(|((k, d), v)| {
            let meta = cap.loaded.processes.get(k).and_then(|p| p.devices.get(d));
            verdict::DevicePeak {
                pid: k.pid,
                device: *d,
                device_name: meta.map(|m| m.name.clone()),
                device_total_bytes: meta.map(|m| m.total_bytes).filter(|t| *t > 0),
                peak_bytes: v.peak_bytes,
                peak_ns: v.peak_ts.saturating_sub(base),
            }
        })
        .collect()
}

fn sources(ev: &Evidence, dumps: &dumps::DumpChoice) -> Vec<Source> {
    let mut out = Vec::new();
    if let Some(c) = &ev.capture {
        let damage = &c.loaded.damage;
        let dropped: u64 = c.loaded.processes.values().map(|p| p.dropped_events).sum();
        let mut notes = Vec::new();
        if !damage.is_empty() {
            notes.push(format!(
                "{} damaged region(s) skipped ({} bytes; cut off by a crash?)",
                damage.len(),
                damage.iter().map(|d| d.bytes_lost).sum::<u64>()
            ));
        }
        if dropped > 0 {
            notes.push(format!("{dropped} events dropped by the shim"));
        }
        out.push(Source {
            kind: "capture".into(),
            path: c.path(),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        });
    }
    if let Some(l) = &ev.log {
        for f in &l.report.files {
            let note = l
                .not_understood
                .iter()
                .find(|(p, _)| p.display().to_string() == *f)
                .map(|(_, why)| format!("nothing memwatch knows in it ({why})"));
            out.push(Source {
                kind: "log".into(),
                path: f.clone(),
                note,
            });
        }
    }
    for (i, d) in ev.dumps.iter().enumerate() {
        out.push(Source {
            kind: "xla_dump".into(),
            path: d.dir.display().to_string(),
            note: dumps.notes.get(i).cloned().flatten(),
        });
    }
    for s in &ev.device_samples {
        out.push(Source {
            kind: "device_samples".into(),
            path: s.source.clone(),
            note: None,
        });
    }
    for s in &ev.framework_states {
        out.push(Source {
            kind: "torch_snapshot".into(),
            path: s.source.clone(),
            note: None,
        });
    }
    out
}

fn missing(
    ev: &Evidence,
    f: Option<&failure::Failure>,
    verdicts: &[Verdict],
    no_usable_dump: bool,
    ledger: Option<&ledger::Ledger>,
) -> Vec<Missing> {
    let mut out = Vec::new();
    let mut add = |e: &str, w: &str| {
        out.push(Missing {
            evidence: e.into(),
            would_add: w.into(),
        })
    };
    let failed = verdicts.iter().any(|v| v.failure);
    if ev.capture.is_none() {
        add(
            "capture",
            "every allocation with its process and device (memwatch run): what was live, peaks per device, other processes, the failed driver calls, PJRT executions and buffers",
        );
    } else if let Some(c) = &ev.capture {
        if !c.loaded.damage.is_empty() {
            if f.is_some_and(|f| !f.seen_in_capture) {
                add(
                    "capture (to the failure)",
                    "the capture is cut off before the failure: its counts and sizes are those up to where it stops, not at the failure",
                );
            } else {
                add(
                    "capture (whole)",
                    "the capture is damaged: what the damaged stretch held is missing from the figures",
                );
            }
        }
    }
    let understood = ev
        .log
        .as_ref()
        .is_some_and(|l| l.not_understood.len() < l.report.files.len());
    if !understood {
        add(
            "log",
            "the program's stderr: the framework's own error (request, allocator, limit), the executable and the Python frame",
        );
    }
    let xla =
        f.is_some_and(|f| matches!(f.origin, failure::Origin::Xla | failure::Origin::Compile));
    if xla && no_usable_dump {
        add(
            "xla_dump",
            "the HLO: which instruction and op_name needed the memory, its source line, and the temp buffer's make-up (XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text)",
        );
    }
    if !ev.env_known {
        add(
            "environment",
            "the allocator settings the run used (XLA_PYTHON_CLIENT_ALLOCATOR, XLA_CLIENT_MEM_FRACTION, PYTORCH_CUDA_ALLOC_CONF): whether a limit was set that an allocator ignores (memwatch run records them)",
        );
    }
    if failed
        && verdicts
            .first()
            .is_some_and(|v| v.kind == Kind::Unexplained)
        && ev.device_samples.is_empty()
    {
        add(
            "device_samples",
            "the device's memory in use by every process (nvidia-smi / rocm-smi samples): memory held outside the run",
        );
    }
    let torch = f.is_some_and(|f| {
        matches!(
            f.origin,
            failure::Origin::Torch(_) | failure::Origin::TorchSnapshot(_)
        )
    });
    if torch && ev.framework_states.is_empty() {
        add(
            "torch_snapshot",
            "PyTorch's allocation history (torch.cuda.memory._record_memory_history + _dump_snapshot): which tensors were live, from which Python frames, step by step",
        );
    }
    // What the device's ledger needs to close (device samples, per-process readings).
    if let Some(l) = ledger.filter(|l| !l.closes && f.is_some()) {
        for m in &l.missing {
            let evidence = if m.starts_with("per-process") {
                "per_process_device_samples"
            } else if m.starts_with("device samples") || m.contains("free memory") {
                "device_samples"
            } else {
                continue;
            };
            if !out.iter().any(|x| x.evidence == evidence) {
                out.push(Missing {
                    evidence: evidence.into(),
                    would_add: format!("what closes the device's ledger: {m}"),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn corpus(s: &str, f: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/oom-corpus")
            .join(s)
            .join(f)
    }

    /// What ended the run decides a failure: the same refusals are a failure when the
    /// process exited non-zero and a `recovered` warning when it exited 0 — for a failure
    /// the capture saw (the process's own exit) and for one only a log states (the run's).
    #[test]
    fn what_ended_the_run_decides() {
        let cap = || CaptureEvidence::read(&corpus("h200_jax_recovered", "capture.mwcap")).unwrap();
        let d = diagnose(&Evidence {
            capture: Some(cap()),
            ..Evidence::default()
        });
        assert!(!d.failed);
        let v = &d.verdicts[0];
        assert_eq!((v.kind, v.failure), (Kind::Recovered, false));
        assert_eq!(v.figures["refused_allocations"], 13);
        assert!(v.figures["got_bytes"] < v.figures["asked_bytes"]);
        assert!(v.holder.other_process);
        // The ledger is taken at the run's own process's peak, not the holder's.
        let l = d.ledger.as_ref().unwrap();
        assert_eq!((l.moment.as_str(), l.pid), ("peak", v.what.pid));
        // A log alone: the run's exit status decides.
        for (exit, failed) in [(Some(0), false), (Some(1), true), (None, true)] {
            let ev = Evidence {
                log: Some(LogEvidence::read(&[corpus("torch_fraction", "stderr.log")]).unwrap()),
                run: RunFacts {
                    exit_code: exit,
                    ..RunFacts::default()
                },
                ..Evidence::default()
            };
            let d = diagnose(&ev);
            assert_eq!(d.failed, failed, "exit {exit:?}");
            assert_eq!(
                d.verdicts[0].kind == Kind::Recovered,
                !failed,
                "exit {exit:?}: {:?}",
                d.verdicts[0].kind
            );
        }
    }

    /// A framework state (what a PyTorch snapshot reader fills) plugs in: torch_leak's
    /// own per-step figures (figures.json) make the leak exact, steps included.
    #[test]
    fn a_framework_state_gives_the_steps() {
        let figures: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(corpus("torch_leak", "figures.json")).unwrap(),
        )
        .unwrap();
        let per_step: Vec<u64> = figures["allocated_per_step"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let ev = Evidence {
            capture: Some(CaptureEvidence::read(&corpus("torch_leak", "capture.mwcap")).unwrap()),
            log: Some(LogEvidence::read(&[corpus("torch_leak", "stderr.log")]).unwrap()),
            framework_states: vec![FrameworkState {
                source: "figures.json".into(),
                device: 0,
                allocated_per_step: per_step,
                ..FrameworkState::default()
            }],
            ..Evidence::default()
        };
        let d = diagnose(&ev);
        let v = &d.verdicts[0];
        assert_eq!(v.kind, Kind::Leak);
        assert_eq!(v.figures["growth_per_step_bytes"], 134218240);
        assert_eq!(v.figures["steps"], 29);
        assert_eq!(v.figures["first_step"], 0);
        assert!(v.also.contains(&Kind::TorchFractionLimit));
        assert!(!d.missing.iter().any(|m| m.evidence == "torch_snapshot"));
    }
}
