//! `/api/runs/{id}/runtime` for one device: the framework allocator's timeline (peaks
//! kept when downsampled), executions as spans, the executables with their compiled
//! statistics, the runtime peak's attribution and the OOMs, from
//! `memwatch_analysis::runtime::analyse` over the stored records.

use std::collections::BTreeMap;

use memwatch_analysis::runtime::{analyse, join_dump, RuntimeCapture};
use memwatch_analysis::runtime::{
    DeviceRuntime, ExecutableSummary, OomIncident, PeakAttribution, Sample,
};
use memwatch_analysis::xla::ModuleReport;
use memwatch_wire::{Api, EventKind};
use serde::Serialize;

use super::capture::runtime_capture;
use crate::codes;
use crate::db::{Store, StoreError};

/// One execution on the device, as a span (times relative to the run's start).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionSpan {
    pub pid: u32,
    pub executable: String,
    pub handle: u64,
    pub start_ns: u64,
    /// Completion when seen, else the call's return.
    pub end_ns: u64,
    pub completed: bool,
    /// 0 = OK, else the PJRT error code (of the call, or of its completion).
    pub result: i32,
}

/// `/api/runs/{id}/runtime` for one device.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeView {
    pub run_id: i64,
    pub device: i64,
    pub pid: Option<u32>,
    /// Memory-statistics samples stored for the device.
    pub samples: u64,
    /// The allocator's timeline (bytes in use, pool, largest free block, limit), at most
    /// `points` samples: when there are more, each bucket keeps its sample with the most
    /// bytes in use, so no peak is hidden.
    pub timeline: Vec<Sample>,
    pub executions: Vec<ExecutionSpan>,
    /// How many executions exist (`executions` holds at most `limit`).
    pub execution_count: u64,
    pub executables: Vec<ExecutableSummary>,
    pub peak: Option<PeakAttribution>,
    /// The executable running at the runtime peak, with its compiled statistics.
    pub peak_executable: Option<ExecutableSummary>,
    pub ooms: Vec<OomIncident>,
    pub xla_modules_attached: u64,
}

pub(super) struct Analysed {
    pub pid: u32,
    pub executables: Vec<ExecutableSummary>,
    pub device: DeviceRuntime,
    pub ooms: Vec<OomIncident>,
    pub modules: Vec<ModuleReport>,
}

/// Runs the analysis over the stored records and picks the process that used `device`
/// most (largest runtime peak). Outer None: no such run; inner None: no PJRT records for
/// the device.
pub(super) async fn analysed(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
    timeline: bool,
) -> Result<Option<(RuntimeCapture, Option<Analysed>)>, StoreError> {
    let Some(cap) = runtime_capture(store, run).await? else {
        return Ok(None);
    };
    let modules = store.run_modules(run).await?;
    let mut report = analyse(&cap, timeline);
    if !modules.is_empty() {
        join_dump(&mut report, &modules, top);
    }
    let best = report
        .processes
        .into_iter()
        .filter_map(|p| {
            let d = p
                .devices
                .iter()
                .find(|d| i64::from(d.device) == device)?
                .clone();
            let ooms = p
                .ooms
                .into_iter()
                .filter(|o| i64::from(o.device) == device)
                .collect();
            Some(Analysed {
                pid: p.pid,
                executables: p.executables,
                device: d,
                ooms,
                modules: Vec::new(),
            })
        })
        .max_by_key(|a| a.device.peak.as_ref().map_or(0, |p| p.peak_bytes_in_use));
    Ok(Some((
        cap,
        best.map(|mut a| {
            a.modules = modules;
            a
        }),
    )))
}

/// `/api/runs/{id}/runtime?device=&points=&limit=`. None: no such run.
pub(crate) async fn device_runtime(
    store: &Store,
    run: i64,
    device: i64,
    points: usize,
    limit: usize,
    top: usize,
) -> Result<Option<RuntimeView>, StoreError> {
    let Some((cap, a)) = analysed(store, run, device, top, true).await? else {
        return Ok(None);
    };
    let mut view = RuntimeView {
        run_id: run,
        device,
        pid: None,
        samples: 0,
        timeline: Vec::new(),
        executions: Vec::new(),
        execution_count: 0,
        executables: Vec::new(),
        peak: None,
        peak_executable: None,
        ooms: Vec::new(),
        xla_modules_attached: 0,
    };
    let Some(a) = a else {
        return Ok(Some(view));
    };
    let names: BTreeMap<u64, &ExecutableSummary> =
        a.executables.iter().map(|x| (x.handle, x)).collect();
    let mut spans: Vec<ExecutionSpan> = Vec::new();
    for e in cap.events.iter().filter(|e| {
        e.pid == a.pid
            && i64::from(e.device) == device
            && codes::event_kind(e.kind) == Some(EventKind::ApiSpan)
    }) {
        match codes::api(e.api) {
            Api::PjrtExecute => spans.push(ExecutionSpan {
                pid: e.pid,
                executable: names
                    .get(&e.ptr)
                    .map_or_else(|| format!("executable {:#x}", e.ptr), |x| x.name.clone()),
                handle: e.ptr,
                start_ns: e.ts_ns,
                end_ns: e.ts_ns + e.duration_ns,
                completed: false,
                result: e.result,
            }),
            Api::PjrtExecuteComplete => {
                if let Some(s) = spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.handle == e.ptr && s.start_ns == e.ts_ns)
                {
                    s.end_ns = s.end_ns.max(e.ts_ns + e.duration_ns);
                    s.completed = true;
                    if s.result == 0 {
                        s.result = e.result;
                    }
                }
            }
            _ => {}
        }
    }
    view.execution_count = spans.len() as u64;
    spans.truncate(limit);
    view.executions = spans;
    view.pid = Some(a.pid);
    view.samples = a.device.samples;
    view.timeline = downsample(&a.device.timeline, points);
    view.peak_executable = a.device.peak.as_ref().and_then(|p| {
        let main = main_handle(p)?;
        names.get(&main).map(|x| (*x).clone())
    });
    view.peak = a.device.peak;
    view.ooms = a.ooms;
    view.executables = a.executables;
    view.xla_modules_attached = a.modules.len() as u64;
    Ok(Some(view))
}

/// The handle of the main executable at the peak (the analysis names it by name only).
pub(super) fn main_handle(p: &PeakAttribution) -> Option<u64> {
    p.running
        .iter()
        .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
        .map(|r| r.handle)
}

/// At most `points` samples; each bucket keeps its sample with the most bytes in use.
fn downsample(s: &[Sample], points: usize) -> Vec<Sample> {
    if points == 0 || s.len() <= points {
        return s.to_vec();
    }
    let per = s.len().div_ceil(points);
    s.chunks(per)
        .filter_map(|c| {
            c.iter()
                .max_by_key(|x| (x.peak_bytes_in_use.unwrap_or(0), x.bytes_in_use))
                .cloned()
        })
        .collect()
}
