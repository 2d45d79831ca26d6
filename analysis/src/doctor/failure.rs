//! Which failure ended the run, from every source that reports one: the frameworks'
//! own messages (PyTorch, CuPy), the compiler's (a failed compile, the autotuner), XLA's
//! runtime (a failed execute, a BFC out-of-memory report, `RESOURCE_EXHAUSTED`), and the
//! driver (a failed allocation call, an error name). The most specific statement wins;
//! the others corroborate it (a capture's exact size refines a message's rounded one).

use super::evidence::Evidence;
use super::facts::PjrtFacts;
use super::verdict::{Cite, When};
use crate::live::Family;
use crate::log::LogReport;
use memwatch_wire::{Api, EventKind, MemKind};

/// What reported the failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// PyTorch's caching allocator (index into the log's `torch_ooms`).
    Torch(usize),
    /// PyTorch's caching allocator as a snapshot recorded it, with no message in a log
    /// (index into the evidence's `framework_states`).
    TorchSnapshot(usize),
    /// CuPy's pool (index into `cupy_ooms`).
    Cupy(usize),
    /// A compile (autotuning when the autotuner reported it).
    Compile,
    /// XLA's runtime: an execute or a transfer.
    Xla,
    /// A driver call (index into the failing process's failures, when captured).
    Driver,
}

/// The failure that ended the run.
#[derive(Debug, Clone)]
pub struct Failure {
    pub origin: Origin,
    pub when: When,
    pub pid: Option<u32>,
    pub device: Option<i32>,
    pub request: Option<u64>,
    pub request_exact: bool,
    pub allocator: Option<String>,
    pub result: Option<String>,
    pub executable: Option<String>,
    /// The failed execution (index into [`PjrtFacts::executions`]).
    pub execution: Option<usize>,
    /// Raw monotonic ns of the failure, when the capture has it (else the last the
    /// capture saw of the process: see `seen_in_capture`).
    pub ts_raw: Option<u64>,
    /// Whether the capture itself recorded the failure (a failed call or execute).
    pub seen_in_capture: bool,
    /// Whether the failed call was pinned host memory.
    pub host: bool,
    pub python_frame: Option<String>,
    pub cites: Vec<Cite>,
}

impl Failure {
    fn new(origin: Origin, when: When) -> Self {
        Self {
            origin,
            when,
            pid: None,
            device: None,
            request: None,
            request_exact: false,
            allocator: None,
            result: None,
            executable: None,
            execution: None,
            ts_raw: None,
            seen_in_capture: false,
            host: false,
            python_frame: None,
            cites: Vec::new(),
        }
    }
}

/// Whether `printed` (a figure from a message with two decimals of its binary unit)
/// can be the exact `bytes`.
pub fn approx_matches(printed: u64, bytes: u64) -> bool {
    if printed == bytes {
        return true;
    }
    let unit: u64 = match printed {
        p if p >= 1 << 30 => 1 << 30,
        p if p >= 1 << 20 => 1 << 20,
        p if p >= 1 << 10 => 1 << 10,
        _ => return false,
    };
    200 * printed.abs_diff(bytes) <= unit
}

fn cite(file: &str, line: usize, what: impl Into<String>) -> Cite {
    Cite {
        file: file.to_string(),
        line: Some(line),
        what: what.into(),
    }
}

/// The last Python exception and the program's own frame in it, as cites.
fn exception_frame(log: &LogReport, f: &mut Failure) {
    if let Some(e) = log.exceptions.last() {
        f.result.get_or_insert_with(|| e.exc_type.clone());
        if let Some(fr) = e.user_frame() {
            f.python_frame = Some(format!("{}:{} in {}", fr.file, fr.line, fr.function));
            f.cites.push(cite(
                &fr.at.file,
                fr.at.line,
                format!(
                    "the program's frame: {}",
                    fr.code.as_deref().unwrap_or(&fr.function)
                ),
            ));
        }
    }
}

/// A failed driver allocation of the capture with an out-of-memory result.
struct DriverFailure {
    pid: u32,
    device: i32,
    ts: u64,
    size: u64,
    api: Api,
    host: bool,
}

fn driver_failures(ev: &Evidence) -> Vec<DriverFailure> {
    let Some(cap) = &ev.capture else {
        return Vec::new();
    };
    let mut v: Vec<DriverFailure> = cap
        .loaded
        .processes
        .values()
        .flat_map(|p| p.failures.iter())
        .filter(|f| f.kind == EventKind::AllocFailed && f.result == 2)
        .map(|f| DriverFailure {
            pid: f.pid,
            device: f.device,
            ts: f.ts,
            size: f.size,
            api: f.api,
            host: Family::of(MemKind::from_u8(f.mem_kind), f.api) == Some(Family::Host),
        })
        .collect();
    v.sort_by_key(|f| f.ts);
    v
}

/// The process that failed when no source names it: the one that exited non-zero with
/// device memory, else the one with the most.
fn guess_pid(ev: &Evidence) -> Option<u32> {
    let cap = ev.capture.as_ref()?;
    let with_devices =
        cap.loaded.processes.values().filter(|p| {
            !p.devices.is_empty() || cap.loaded.streams.iter().any(|s| s.0.pid == p.pid)
        });
    let failed: Vec<u32> = with_devices
        .clone()
        .filter(|p| p.exit_code.is_some_and(|c| c != 0))
        .map(|p| p.pid)
        .collect();
    if failed.len() == 1 {
        return failed.first().copied();
    }
    with_devices.map(|p| p.pid).next()
}

/// Finds the failure that ended the run, if any source reports one.
pub fn identify(ev: &Evidence, pjrt: &PjrtFacts) -> Option<Failure> {
    let empty = LogReport::default();
    let log = ev.log.as_ref().map_or(&empty, |l| &l.report);
    let drivers = driver_failures(ev);
    let cap_path = ev.capture.as_ref().map(|c| c.path()).unwrap_or_default();
    let mut f = if let Some((i, t)) = log.torch_ooms.iter().enumerate().next_back() {
        let mut f = Failure::new(Origin::Torch(i), When::FrameworkAllocator);
        f.device = t.device;
        f.request = t.request_approx_bytes;
        f.allocator = Some("pytorch caching allocator".into());
        f.cites.push(cite(
            &t.at.file,
            t.at.line,
            format!("PyTorch {} out of memory", t.backend),
        ));
        // The capture's failed cudaMalloc of that size is the exact request (rounded up
        // to PyTorch's 2 MiB for large blocks).
        if let (Some(r), Some(d)) = (
            f.request,
            drivers
                .iter()
                .rev()
                .find(|d| !d.host && f.request.is_some_and(|r| approx_matches(r, d.size))),
        ) {
            let _ = r;
            f.request = Some(d.size);
            f.request_exact = true;
            f.pid = Some(d.pid);
            f.ts_raw = Some(d.ts);
            f.cites.push(Cite {
                file: cap_path.clone(),
                line: None,
                what: format!("{} of {} B failed (pid {})", d.api.name(), d.size, d.pid),
            });
        }
        f
    } else if let Some((i, o)) = ev
        .framework_states
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, s)| Some((i, s.oom.as_ref()?)))
    {
        let s = &ev.framework_states[i];
        let mut f = Failure::new(Origin::TorchSnapshot(i), When::FrameworkAllocator);
        f.device = Some(s.device);
        f.request = Some(o.request_bytes);
        f.request_exact = true;
        f.allocator = Some("pytorch caching allocator".into());
        f.result = Some("torch.OutOfMemoryError".into());
        f
    } else if let Some((i, c)) = log.cupy_ooms.iter().enumerate().next_back() {
        let mut f = Failure::new(Origin::Cupy(i), When::FrameworkAllocator);
        f.request = Some(c.request_bytes);
        f.request_exact = true;
        f.allocator = Some("cupy memory pool".into());
        f.cites
            .push(cite(&c.at.file, c.at.line, "CuPy out of memory"));
        f
    } else if !log.autotune_failures.is_empty() || !pjrt.failed_compiles.is_empty() {
        let autotune = !log.autotune_failures.is_empty() || !log.scratch_refusals.is_empty();
        let mut f = Failure::new(
            Origin::Compile,
            if autotune {
                When::Autotuning
            } else {
                When::Compile
            },
        );
        if let Some(a) = log.autotune_failures.last() {
            f.request = a.request_approx_bytes;
            f.allocator = a.allocator.clone();
            f.device = a.device;
            f.result = a.status_code.clone();
            f.cites.push(cite(
                &a.at.file,
                a.at.line,
                format!(
                    "autotuning found no config for {}",
                    a.instruction.as_deref().unwrap_or("an instruction")
                ),
            ));
        }
        if let Some(r) = log.scratch_refusals.last() {
            f.request = f.request.or(r.requested_approx_bytes);
            f.allocator.get_or_insert_with(|| r.allocator.clone());
            f.cites.push(cite(
                &r.at.file,
                r.at.line,
                "the pool declined the autotuner's scratch request",
            ));
        }
        if let (Some(cap), Some(&(pid, ts, dur, res))) = (&ev.capture, pjrt.failed_compiles.last())
        {
            f.pid = Some(pid);
            f.ts_raw = Some(cap.raw(ts + dur));
            f.result.get_or_insert_with(|| result_code_name(res).into());
            f.cites.push(Cite {
                file: cap_path.clone(),
                line: None,
                what: format!(
                    "PJRT_Client_Compile failed ({}) in pid {pid}",
                    result_code_name(res)
                ),
            });
        }
        f
    } else if let Some(x) = pjrt.executions.iter().rposition(|x| !x.ok && x.result != 0) {
        let cap = ev.capture.as_ref()?;
        let x_ = &pjrt.executions[x];
        let mut f = Failure::new(Origin::Xla, When::Execute);
        f.pid = Some(x_.pid);
        f.device = Some(x_.device);
        f.execution = Some(x);
        f.executable = Some(pjrt.name(x_.pid, x_.handle));
        f.ts_raw = Some(cap.raw(x_.ts));
        f.request = (x_.requested > 0).then_some(x_.requested);
        f.result = Some(result_code_name(x_.result).into());
        f.cites.push(Cite {
            file: cap_path.clone(),
            line: None,
            what: format!(
                "{} failed with {} on device {}",
                f.executable.as_deref().unwrap_or("?"),
                result_code_name(x_.result),
                x_.device
            ),
        });
        xla_log(log, &mut f);
        f
    } else if !log.ooms.is_empty() || !log.resource_exhausted.is_empty() {
        let mut f = Failure::new(Origin::Xla, When::DataTransfer);
        xla_log(log, &mut f);
        if f.executable.is_some() {
            f.when = When::Execute;
        }
        f
    } else if let Some(d) = drivers.last() {
        let mut f = Failure::new(Origin::Driver, When::DriverCall);
        f.pid = Some(d.pid);
        f.device = Some(d.device);
        f.request = Some(d.size);
        f.request_exact = true;
        f.ts_raw = Some(d.ts);
        f.host = d.host;
        f.allocator = Some(d.api.name().to_string());
        f.result = crate::capture::result_name(d.api, 2).map(str::to_string);
        f.cites.push(Cite {
            file: cap_path.clone(),
            line: None,
            what: format!("{} of {} B failed (pid {})", d.api.name(), d.size, d.pid),
        });
        f
    } else if let Some(d) = log.driver_errors.last() {
        let mut f = Failure::new(Origin::Driver, When::DriverCall);
        f.result = Some(d.name.clone());
        f.cites.push(cite(&d.at.file, d.at.line, d.name.clone()));
        f
    } else {
        return None;
    };
    if matches!(
        f.origin,
        Origin::Torch(_) | Origin::TorchSnapshot(_) | Origin::Cupy(_)
    ) && f.pid.is_none()
    {
        f.pid = guess_pid(ev);
    }
    f.pid = f.pid.or_else(|| guess_pid(ev));
    if f.device.is_none() {
        f.device = f.pid.and_then(|pid| only_device(ev, pid));
    }
    f.seen_in_capture = f.ts_raw.is_some();
    if f.ts_raw.is_none() {
        // Not in the capture: the last the capture saw of the process.
        f.ts_raw = f.pid.and_then(|pid| last_seen(ev, pid));
    }
    exception_frame(log, &mut f);
    snapshot_oom(ev, &mut f);
    Some(f)
}

/// The snapshot's record of a PyTorch failure (its last on the failing device): cited,
/// the exact request when nothing gave one, and the Python frame that asked when the log
/// has none.
fn snapshot_oom(ev: &Evidence, f: &mut Failure) {
    if !matches!(f.origin, Origin::Torch(_) | Origin::TorchSnapshot(_)) {
        return;
    }
    let Some((s, o)) = ev.framework_states.iter().rev().find_map(|s| {
        let o = s.oom.as_ref()?;
        f.device.is_none_or(|d| d == s.device).then_some((s, o))
    }) else {
        return;
    };
    if !f.request_exact {
        f.request = Some(o.request_bytes);
        f.request_exact = true;
    }
    f.device.get_or_insert(s.device);
    if f.python_frame.is_none() {
        f.python_frame.clone_from(&o.python_frame);
    }
    f.cites.push(Cite {
        file: s.source.clone(),
        line: None,
        what: format!(
            "the snapshot's OOM at {:.3} s: {} B asked of the {} pool from {}",
            o.at_s,
            o.request_bytes,
            o.pool,
            o.python_frame
                .as_deref()
                .or(o.site.as_deref())
                .unwrap_or("an unknown stack")
        ),
    });
}

/// The XLA runtime's log messages: the BFC report (exact request), the error (the
/// executable, the device).
fn xla_log(log: &LogReport, f: &mut Failure) {
    if let Some(o) = log.ooms.last() {
        if let Some(r) = o.request_bytes() {
            f.request = Some(r);
            f.request_exact = true;
        }
        f.allocator = Some(o.allocator.clone());
        f.cites.push(cite(
            &o.at.file,
            o.at.line,
            format!("{} ran out of memory", o.allocator),
        ));
    }
    if let Some(r) = log.resource_exhausted.last() {
        if f.executable.is_none() {
            f.executable = r.executable.clone();
        }
        if f.request.is_none() {
            f.request = r.bytes.or(r.approx_bytes);
            f.request_exact = r.bytes.is_some();
        }
        f.allocator = f.allocator.take().or_else(|| r.allocator.clone());
        if f.device.is_none() {
            f.device = r
                .message
                .split_once("on device ")
                .and_then(|(_, d)| d.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|d| d.parse().ok());
        }
        f.result.get_or_insert_with(|| "RESOURCE_EXHAUSTED".into());
        f.cites
            .push(cite(&r.at.file, r.at.line, "RESOURCE_EXHAUSTED"));
    }
}

/// PJRT error codes (absl status codes) by name.
pub fn result_code_name(code: i32) -> &'static str {
    match code {
        8 => "RESOURCE_EXHAUSTED",
        5 => "NOT_FOUND",
        13 => "INTERNAL",
        3 => "INVALID_ARGUMENT",
        _ => "error",
    }
}

fn only_device(ev: &Evidence, pid: u32) -> Option<i32> {
    let cap = ev.capture.as_ref()?;
    let mut devs: Vec<i32> = cap
        .loaded
        .streams
        .iter()
        .filter(|(k, d)| k.pid == pid && *d >= 0)
        .map(|(_, d)| *d)
        .collect();
    devs.sort_unstable();
    devs.dedup();
    (devs.len() == 1).then(|| devs[0])
}

/// When a failure the capture did not record happened, at the latest: before the
/// process's teardown. The last allocator sample that still saw memory in use, else the
/// last event before the trailing releases (buffers destroyed, modules unloaded, memory
/// freed at exit).
fn last_seen(ev: &Evidence, pid: u32) -> Option<u64> {
    let cap = ev.capture.as_ref()?;
    if let Some(s) = cap
        .runtime
        .stats
        .iter()
        .filter(|s| s.pid == pid && s.bytes_in_use > 0)
        .map(|s| s.ts_ns)
        .max()
    {
        return Some(cap.raw(s));
    }
    let l = &cap.loaded;
    let teardown = |e: &crate::capture::load::Ev| {
        matches!(
            EventKind::from_u8(e.kind),
            Some(EventKind::Free | EventKind::FreeFailed)
        ) || matches!(
            Api::from_u16(e.api),
            Api::PjrtLoadedExecutableDestroy
                | Api::PjrtBufferDestroy
                | Api::CuModuleUnload
                | Api::HipModuleUnload
                | Api::CuStreamDestroy
                | Api::HipStreamDestroy
        )
    };
    let mine = || {
        l.events
            .iter()
            .rev()
            .filter(|e| l.streams[e.stream as usize].0.pid == pid)
    };
    mine()
        .find(|e| !teardown(e))
        .or_else(|| mine().next())
        .map(|e| e.end())
}
