//! Per-process and per-device statistics of a loaded capture: allocation counts, peak
//! live bytes and when, leaks at exit, largest allocations, failed calls with their
//! result names, API call durations (p50/p99) and how many calls of one API overlapped.
//!
//! Owns the definitions of these numbers (documented on the report fields) and nothing
//! about how they are printed. Events are walked in time order (a stable sort by start
//! time: ties keep file order), because shim threads flush their buffers separately.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use memwatch_wire::{EventKind, MemKind};
use serde::Serialize;

use super::api_table::{ApiMark, ApiTable};
use super::codes::result_name;
use super::devices::DeviceWalk;
use super::load::{DamageReport, Ev, EventContext, Loaded, ProcKey};
use crate::live::{
    is_runtime_segment, Allocation, Change, Family, HandleRef, Held, HistoryMark, LiveHistory,
    LiveSet,
};

/// Knobs of [`analyze`].
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// How many largest allocations to keep per device.
    pub top: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self { top: 10 }
    }
}

/// Everything `memwatch report` prints. Times are ns since the capture's start (the
/// earliest `process_start` anchor or event, see [`Loaded::base_ns`]); bytes are
/// integers.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureReport {
    pub file: String,
    pub file_bytes: u64,
    pub frames: u64,
    /// Events read (all kinds).
    pub events: u64,
    /// Wall-clock time of the capture's start (Unix ns), from the earliest process.
    pub start_wall_unix_ns: Option<u64>,
    /// CLOCK_MONOTONIC ns of the capture's start (time 0 of every `*_ns` figure): adds
    /// to them to line them up with other monotonic timestamps (a worker's own log).
    pub start_monotonic_ns: u64,
    /// From the start to the last event or process end.
    pub duration_ns: u64,
    pub processes: Vec<ProcessReport>,
    /// Each process's devices side by side: driver-level peak by kind, the framework's
    /// own figures, NVML's per-process figure (`super::devices`).
    pub devices: Vec<super::devices::DeviceView>,
    /// Capture-wide API statistics (all processes together), by API number.
    pub api: Vec<ApiStats>,
    /// Failed calls of all processes, in time order (at most 10,000 per process kept).
    pub failures: Vec<FailureReport>,
    pub failures_total: u64,
    /// Damaged regions of the file (empty for an intact capture).
    pub damage: Vec<DamageReport>,
    /// Events and frames of kinds this build does not know (skipped).
    pub unknown_events: u64,
    pub unknown_frames: u64,
    /// Capture-level tags (`memwatch run --tag K=V`).
    pub tags: std::collections::BTreeMap<String, String>,
    /// memwatch's own device readings (`crate::device_readings`), or that they are
    /// missing.
    pub device_readings: crate::device_readings::ReadingsSummary,
}

/// One process image (a pid that called `exec` appears once per image).
#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    /// Which image of the pid: 0 for the image it started with, N after its N-th exec.
    pub image: u32,
    /// This image ended by exec'ing the next one (same pid): the memory it still held
    /// was released by the exec, so its `live_bytes_at_exit` is 0 and the bytes are in
    /// `live_bytes_at_exec`.
    pub ended_by_exec: bool,
    pub ppid: u32,
    pub command: Vec<String>,
    pub hostname: String,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    /// From the shim's `process_end`. `null` when not known: the process ended without
    /// one (killed, or the capture was cut off; then `end_ns` is null too), or its end
    /// was recorded without a status (the wire's -1; `end_ns` is set).
    pub exit_code: Option<i32>,
    pub devices: Vec<DeviceReport>,
    /// Events the shim had to drop (its buffers were full): figures below miss them.
    pub dropped_events: u64,
    /// Peak of device-occupying bytes summed over all the process's devices.
    pub peak_bytes: u64,
    pub peak_ts_ns: u64,
    pub markers: u64,
    /// This process's API statistics (overlap counts only its own threads).
    pub api: Vec<ApiStats>,
}

/// One device of one process. Device memory counts device, managed, stream-ordered
/// pool and VMM physical (cuMemCreate/hipMemCreate) allocations; VMM mappings and
/// address reservations are not counted (the physical handle already is), pinned host
/// memory is counted separately under `host_pinned`.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Device ordinal as the process saw it (-1: calls that name no device, such as
    /// address reservations; listed after the real devices).
    pub device: i32,
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
    /// The physical device's UUID and PCI bus id as the runtime said them
    /// (`memwatch_wire::identity`'s forms; `None`: not recorded).
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    /// Successful device-memory allocations.
    pub alloc_count: u64,
    /// Frees matched to an allocation made on this device.
    pub free_count: u64,
    /// Allocation calls that returned an error (any memory kind).
    pub failed_count: u64,
    /// Release calls that returned an error.
    pub free_failed_count: u64,
    /// Frees of pointers no allocation in the capture returned (counted, not an error).
    pub unmatched_frees: u64,
    /// Allocations returning a pointer that was still live (its free was not seen).
    pub reused_without_free: u64,
    /// Sum of all successful device-memory allocation sizes.
    pub alloc_bytes: u64,
    pub peak_bytes: u64,
    /// When `peak_bytes` was first reached.
    pub peak_ts_ns: u64,
    /// Device bytes still allocated when the capture ends (leaks).
    pub live_bytes_at_exit: u64,
    pub live_allocs_at_exit: u64,
    /// Device bytes still allocated when this image exec'd the next one (released by
    /// the exec, not leaked; 0 unless the process report's `ended_by_exec`).
    pub live_bytes_at_exec: u64,
    pub live_allocs_at_exec: u64,
    pub host_pinned: HostPinnedReport,
    /// VMM map/unmap, address reserve/free and pool create/destroy calls.
    pub vmm_and_pool_calls: u64,
    /// VMM handle releases (`cuMemRelease`) that gave no memory back, by why: the handle
    /// was still mapped (given back at its last unmap), a retained reference
    /// (`cuMemRetainAllocationHandle`, as NCCL frees its buffers), or a handle imported
    /// from another process. None of these is an unmatched free.
    pub vmm_reference_releases: VmmReferenceReleases,
    /// Largest successful allocations (device memory and pinned host), largest first.
    pub largest_allocations: Vec<AllocReport>,
    /// Largest device-memory allocations still live at exit (leaks), largest first (at
    /// most `top`; empty when the image ended by exec). Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub largest_leaks: Vec<AllocReport>,
}

/// Counts of [`DeviceReport::vmm_reference_releases`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VmmReferenceReleases {
    pub still_mapped: u64,
    pub retained: u64,
    pub imported: u64,
}

/// Pinned host memory of one device's calls.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostPinnedReport {
    pub alloc_count: u64,
    pub free_count: u64,
    pub peak_bytes: u64,
    pub peak_ts_ns: u64,
    pub live_bytes_at_exit: u64,
}

/// One allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllocReport {
    pub size: u64,
    pub ts_ns: u64,
    pub api: String,
    pub mem_kind: String,
    pub ptr: u64,
    /// The allocating call's native stack, innermost first, when the shim sampled it
    /// (`MEMWATCH_BACKTRACE_EVERY_BYTES`); omitted otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<super::symbolize::StackFrame>,
}

/// Durations and overlap of one API's calls (spans and allocation calls alike).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiStats {
    pub api: String,
    pub count: u64,
    /// Calls that returned an error (failed allocs and frees).
    pub errors: u64,
    pub total_ns: u64,
    /// Nearest-rank percentiles of the call durations.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Most calls of this API in progress at one instant (each call is the half-open
    /// interval [ts, ts + max(duration, 1 ns))); one thread is in one call at a time, so
    /// this is the number of threads inside the API at once.
    pub max_concurrent: u64,
    /// Most distinct (process, device) pairs inside the API at one instant.
    pub max_concurrent_devices: u64,
    /// When calls were in progress on more than one (process, device) at once (several
    /// workers compiling or loading modules together), in time order; at most
    /// [`MAX_STRETCHES`] kept, `concurrent_device_stretches_total` counts all. Omitted
    /// when there were none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub concurrent_device_stretches: Vec<DeviceStretch>,
    #[serde(skip_serializing_if = "is_zero")]
    pub concurrent_device_stretches_total: u64,
}

/// Stretches of [`ApiStats::concurrent_device_stretches`] kept per API.
pub const MAX_STRETCHES: usize = 64;

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A stretch of time during which calls of one API were in progress on several
/// (process, device) pairs at once: from the call that made it two to the end that made
/// it one again (ns since the capture's start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceStretch {
    pub from_ns: u64,
    pub until_ns: u64,
    /// The most (process, device) pairs at once during it.
    pub max_devices: u64,
}

/// A failed call.
#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    pub ts_ns: u64,
    pub api: String,
    /// "alloc_failed" or "free_failed".
    pub kind: String,
    pub mem_kind: String,
    /// Bytes requested (allocations).
    pub size: u64,
    pub result: i32,
    /// e.g. "hipErrorOutOfMemory"; `null` for a code not in the tables.
    pub result_name: Option<String>,
}

fn mem_name(mem: u8) -> String {
    MemKind::from_u8(mem).map_or_else(|| format!("unknown({mem})"), |k| k.name().to_string())
}

#[derive(Default, Clone)]
struct Acc {
    alloc_count: u64,
    free_count: u64,
    failed_count: u64,
    free_failed_count: u64,
    unmatched_frees: u64,
    reused_without_free: u64,
    alloc_bytes: u64,
    host_alloc_count: u64,
    host_free_count: u64,
    vmm_and_pool_calls: u64,
    vmm_refs: VmmReferenceReleases,
    /// Min-heap of the `top` largest: (size, earlier first, index into events).
    largest: BinaryHeap<Reverse<(u64, Reverse<u64>, usize)>>,
}

/// Each process image's running total (touched by every allocation: a fast hash).
type Procs = foldhash::HashMap<ProcKey, ProcAcc>;

#[derive(Default, Clone)]
struct ProcAcc {
    live: u64,
    peak: u64,
    peak_ts: u64,
}

/// What the report keeps with each live allocation: the stream (pid, device) it was
/// made on, its index in the sorted event list, and whether it is a runtime segment
/// (for the history: [`is_runtime_segment`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    pub stream: u32,
    pub segment: bool,
    pub idx: usize,
}

/// Computes the report. Consumes the loaded capture (its events are sorted in place).
pub fn analyze(loaded: Loaded, opts: &ReportOptions) -> CaptureReport {
    analyze_with(loaded, opts, &[])
}

/// [`analyze`], with NVML's per-process readings of the same run (`nvidia-smi
/// --query-compute-apps`) set next to the captured live bytes in
/// [`CaptureReport::devices`].
pub fn analyze_with(
    mut loaded: Loaded,
    opts: &ReportOptions,
    process_samples: &[crate::nvsmi::ProcessSample],
) -> CaptureReport {
    // Time order; stable so equal timestamps keep file order.
    loaded.events.sort_by_key(|e| e.ts);
    let mut fold = ReportFold::new(opts, false);
    fold.live.devices = DeviceWalk::new(&loaded, process_samples);
    fold.add_all(&loaded.events, loaded.context());
    let mut report = fold.finish(&loaded).0;
    report.tags = std::mem::take(&mut loaded.tags);
    report
}

/// The report's figures, folded one event at a time in time order (a stable sort by
/// `ts` of the file's order), so a capture can be folded while it is written
/// (`super::fold`) or all at once ([`analyze`]). The live set goes through the one
/// free-matching rule ([`LiveSet`]); the peaks are kept by a [`LiveHistory`], which
/// also keeps the device allocations' lifetimes when asked (for the OOM doctor); the
/// per-device view by a [`DeviceWalk`] fed the same changes. The
/// API table does not depend on the live set: many events at once are folded on two
/// threads, one for each.
pub struct ReportFold {
    top: usize,
    live: LivePart,
    api: ApiTable,
    /// Position of the next event.
    next: usize,
}

/// Events folded at once from which the API table gets a thread of its own.
const PARALLEL_EVENTS: usize = 1 << 15;

/// The figures that follow the live set.
struct LivePart {
    /// By stream index.
    accs: Vec<Acc>,
    procs: Procs,
    live: LiveSet<Origin>,
    history: LiveHistory,
    devices: DeviceWalk,
    last_ts: u64,
}

/// Where a [`ReportFold`] stood (see [`ReportFold::checkpoint`]).
#[derive(Clone)]
pub struct ReportCheckpoint {
    accs: Vec<Acc>,
    api: ApiMark,
    procs: Procs,
    live: LiveSet<Origin>,
    history: HistoryMark,
    devices: DeviceWalk,
    last_ts: u64,
    next: usize,
}

impl ReportCheckpoint {
    /// How many events had been folded.
    pub fn position(&self) -> usize {
        self.next
    }
}

impl ReportFold {
    /// An empty fold; `lifetimes`: keep the device allocations' lifetimes in its
    /// [`LiveHistory`].
    pub fn new(opts: &ReportOptions, lifetimes: bool) -> Self {
        Self {
            top: opts.top,
            live: LivePart {
                accs: Vec::new(),
                procs: Procs::default(),
                live: LiveSet::new(),
                history: LiveHistory::new(lifetimes),
                devices: DeviceWalk::default(),
                last_ts: 0,
            },
            api: ApiTable::new(),
            next: 0,
        }
    }

    /// Reserves room for the lifetimes of `n` allocations (see
    /// [`LiveHistory::reserve_lifetimes`]).
    pub fn reserve_lifetimes(&mut self, n: usize) {
        self.live.history.reserve_lifetimes(n);
    }

    /// Events folded so far (the position of the next one).
    pub fn len(&self) -> usize {
        self.next
    }

    /// Whether no event was folded.
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Sets the PJRT allocator's pool sizes the per-device view's kinds depend on;
    /// whether they changed (then the events folded are to be folded again).
    pub fn set_pool_sizes(&mut self, sizes: &super::devices::PoolSizes) -> bool {
        self.live.devices.set_pool_sizes(sizes)
    }

    /// Folds `events[self.len()..]`: `events` are all the events in time order, those
    /// folded first (an event's position names it, and a free looks its allocation up).
    /// Many at once: on two threads.
    pub fn add_all(&mut self, events: &[Ev], ctx: EventContext<'_>) {
        let first = self.next.min(events.len());
        let fresh = &events[first..];
        let top = self.top;
        if fresh.len() < PARALLEL_EVENTS {
            for (k, e) in fresh.iter().enumerate() {
                self.live.add(first + k, events, ctx, top);
                self.api.add(e, ctx.streams);
            }
            self.next = events.len();
            return;
        }
        let live = &mut self.live;
        // (Behind a lock only so that this thread can do it when no thread is had.)
        let api = std::sync::Mutex::new(&mut self.api);
        let fold_api = || {
            let mut api = api.lock().unwrap_or_else(|p| p.into_inner());
            for e in fresh {
                api.add(e, ctx.streams);
            }
        };
        std::thread::scope(|s| {
            let apart = std::thread::Builder::new()
                .name("memwatch-fold-api".into())
                .spawn_scoped(s, fold_api);
            for i in first..events.len() {
                live.add(i, events, ctx, top);
            }
            match apart {
                Ok(t) => {
                    if let Err(panic) = t.join() {
                        std::panic::resume_unwind(panic);
                    }
                }
                Err(_) => fold_api(),
            }
        });
        self.next = events.len();
    }

    /// Where the fold stands: [`Self::restore`] goes back to it. Costs a copy of the
    /// live set and of the per-stream and per-API figures (the calls' durations are
    /// only counted).
    pub fn checkpoint(&self) -> ReportCheckpoint {
        ReportCheckpoint {
            accs: self.live.accs.clone(),
            api: self.api.mark(),
            procs: self.live.procs.clone(),
            live: self.live.live.clone(),
            history: self.live.history.mark(),
            devices: self.live.devices.clone(),
            last_ts: self.live.last_ts,
            next: self.next,
        }
    }

    /// What a [`Self::checkpoint`] copies, in entries (live allocations, live PJRT
    /// buffers, per-stream figures): `super::fold` takes one only once at least as many
    /// events were folded since the last, so copying costs no more than folding.
    pub fn checkpoint_size(&self) -> usize {
        self.live.live.len() + self.live.devices.entries() + self.live.accs.len()
    }

    /// Goes back to a checkpoint of this fold (which has only gone on since): the
    /// events from its position on are to be folded again.
    pub fn restore(&mut self, cp: &ReportCheckpoint) {
        self.live.accs.clone_from(&cp.accs);
        self.api.rewind(&cp.api);
        self.live.procs.clone_from(&cp.procs);
        self.live.live.clone_from(&cp.live);
        self.live.history.rewind(&cp.history);
        self.live.devices.restore(&cp.devices);
        self.live.last_ts = cp.last_ts;
        self.next = cp.next;
    }

    /// The report of `loaded`, whose events (in time order) are the ones folded, and the
    /// fold's [`LiveHistory`]. The tags are left in `loaded` (the report's are empty).
    pub fn finish(self, loaded: &Loaded) -> (CaptureReport, LiveHistory) {
        let ReportFold {
            top,
            live:
                LivePart {
                    mut accs,
                    mut procs,
                    live,
                    mut history,
                    devices,
                    mut last_ts,
                },
            api,
            next: _,
        } = self;
        accs.resize_with(loaded.streams.len(), Acc::default);
        history.finish(live.iter().map(|(k, h)| (k.family, h.data.idx)));
        let base = loaded.base_ns();
        let rel = |t: u64| t.saturating_sub(base);
        let events = &loaded.events;
        let mut symbolizer = super::symbolize::Symbolizer::default();
        let no_modules = Vec::new();
        let mut alloc_report = |i: usize| -> AllocReport {
            let e = &events[i];
            let stack = match loaded.backtraces.get(&(e.stream, e.ts, e.ptr)) {
                Some(frames) => {
                    let proc_ = loaded.streams[e.stream as usize].0;
                    let modules = loaded.modules.get(&proc_).unwrap_or(&no_modules);
                    symbolizer.frames(modules, frames)
                }
                None => Vec::new(),
            };
            AllocReport {
                size: e.size,
                ts_ns: rel(e.ts),
                api: e.api().name().to_string(),
                mem_kind: mem_name(e.mem),
                ptr: e.ptr,
                stack,
            }
        };
        let largest: Vec<Vec<AllocReport>> = accs
            .iter()
            .map(|acc| {
                let mut v: Vec<_> = acc.largest.iter().map(|r| r.0).collect();
                v.sort_by(|a, b| b.cmp(a));
                v.into_iter().map(|(_, _, i)| alloc_report(i)).collect()
            })
            .collect();
        // Device allocations still live at the end, per stream: largest first, then
        // earliest.
        let mut leaks_of: Vec<Vec<(u64, Reverse<usize>)>> = vec![Vec::new(); accs.len()];
        for (key, held) in live.iter() {
            if key.family.on_device() {
                if let Some(v) = leaks_of.get_mut(held.data.stream as usize) {
                    v.push((held.size, Reverse(held.data.idx)));
                }
            }
        }
        let leaks: Vec<Vec<AllocReport>> = leaks_of
            .into_iter()
            .map(|mut v| {
                v.sort_by(|a, b| b.cmp(a));
                v.truncate(top);
                v.into_iter()
                    .map(|(_, Reverse(i))| alloc_report(i))
                    .collect()
            })
            .collect();
        let (global_api, per_pid_api) = api.finish(base);
        let devices = devices.finish(loaded, base);

        let mut processes = Vec::new();
        let mut failures = Vec::new();
        let mut failures_total = 0;
        for (pid, meta) in &loaded.processes {
            let mut devices: Vec<DeviceReport> = loaded
                .streams
                .iter()
                .enumerate()
                .filter(|(_, (p, _))| p == pid)
                .map(|(i, &(_, device))| {
                    let a = &accs[i];
                    let peaks = history.peaks(i);
                    let now = live.totals(*pid, device);
                    let info = meta.devices.get(&device);
                    let exec = meta.ended_by_exec;
                    let host = HostPinnedReport {
                        alloc_count: a.host_alloc_count,
                        free_count: a.host_free_count,
                        peak_bytes: peaks.host_bytes,
                        peak_ts_ns: rel(peaks.host_ts),
                        live_bytes_at_exit: if exec { 0 } else { now.host_bytes },
                    };
                    DeviceReport {
                        device,
                        name: info.map(|d| d.name.clone()),
                        total_bytes: info.map(|d| d.total_bytes),
                        uuid: info.and_then(|d| d.identity.uuid()).map(str::to_string),
                        pci_bus_id: info
                            .and_then(|d| d.identity.pci_bus_id())
                            .map(str::to_string),
                        alloc_count: a.alloc_count,
                        free_count: a.free_count,
                        failed_count: a.failed_count,
                        free_failed_count: a.free_failed_count,
                        unmatched_frees: a.unmatched_frees,
                        reused_without_free: a.reused_without_free,
                        alloc_bytes: a.alloc_bytes,
                        peak_bytes: peaks.device_bytes,
                        peak_ts_ns: rel(peaks.device_ts),
                        live_bytes_at_exit: if exec { 0 } else { now.device_bytes },
                        live_allocs_at_exit: if exec { 0 } else { now.device_allocs },
                        live_bytes_at_exec: if exec { now.device_bytes } else { 0 },
                        live_allocs_at_exec: if exec { now.device_allocs } else { 0 },
                        host_pinned: host,
                        vmm_and_pool_calls: a.vmm_and_pool_calls,
                        vmm_reference_releases: a.vmm_refs.clone(),
                        largest_allocations: largest[i].clone(),
                        largest_leaks: if exec { Vec::new() } else { leaks[i].clone() },
                    }
                })
                .collect();
            // Real devices first, so `devices[0]` is device 0; the row of calls that name
            // no device (-1: address reservations, host-side events) comes last.
            devices.sort_by_key(|d| (d.device < 0, d.device));
            let p = procs.remove(pid).unwrap_or_default();
            if let Some(end) = meta.end_ts {
                last_ts = last_ts.max(end);
            }
            failures_total += meta.failures_total;
            failures.extend(meta.failures.iter().map(|f| FailureReport {
                pid: f.pid,
                tid: f.tid,
                device: f.device,
                ts_ns: rel(f.ts),
                api: f.api.name().to_string(),
                kind: f.kind.name().to_string(),
                mem_kind: mem_name(f.mem_kind),
                size: f.size,
                result: f.result,
                result_name: result_name(f.api, f.result).map(str::to_string),
            }));
            processes.push(ProcessReport {
                pid: pid.pid,
                image: pid.image,
                ended_by_exec: meta.ended_by_exec,
                ppid: meta.ppid,
                command: meta.argv.clone(),
                hostname: meta.hostname.clone(),
                start_ns: meta.mono_anchor_ns.map(rel),
                end_ns: meta.end_ts.map(rel),
                exit_code: meta.exit_code,
                devices,
                dropped_events: meta.dropped_events,
                peak_bytes: p.peak,
                peak_ts_ns: rel(p.peak_ts),
                markers: meta.markers,
                api: per_pid_api.get(pid).cloned().unwrap_or_default(),
            });
        }
        failures.sort_by_key(|f| (f.ts_ns, f.pid, f.tid));

        let start_wall_unix_ns = loaded
            .processes
            .values()
            .filter_map(|p| p.mono_anchor_ns.map(|a| (a, p.wall_anchor_unix_ns)))
            .min()
            .map(|(anchor, wall)| wall.saturating_sub(anchor.saturating_sub(base)));

        let report = CaptureReport {
            file: loaded.path.display().to_string(),
            file_bytes: loaded.file_bytes,
            frames: loaded.frames,
            events: loaded.events.len() as u64 + loaded.unknown_events,
            start_wall_unix_ns,
            start_monotonic_ns: base,
            duration_ns: rel(last_ts),
            processes,
            devices,
            api: global_api,
            failures,
            failures_total,
            damage: loaded.damage.clone(),
            unknown_events: loaded.unknown_events,
            unknown_frames: loaded.unknown_frames,
            tags: Default::default(),
            device_readings: crate::device_readings::summarize(loaded),
        };
        (report, history)
    }
}

impl LivePart {
    /// Folds the event at position `i`.
    fn add(&mut self, i: usize, events: &[Ev], ctx: EventContext<'_>, top: usize) {
        let e = &events[i];
        let s = e.stream as usize;
        if s >= self.accs.len() {
            self.accs.resize_with(s + 1, Acc::default);
        }
        self.last_ts = self.last_ts.max(e.end());
        let pid = ctx.streams[s].0;
        let me = ctx.mem_event(e);
        let origin = Origin {
            stream: e.stream,
            segment: is_runtime_segment(&me),
            idx: i,
        };
        let change = self.live.apply(&me, origin);
        self.history
            .record(i, e.stream, e.ts, &me, &change, |o: &Origin| Allocation {
                pos: o.idx,
                stream: o.stream,
                segment: o.segment,
            });
        self.devices
            .event(events, i, &me, &change, &self.live, ctx.streams);
        match change {
            Change::Alloc {
                family, replaced, ..
            } => {
                if let Some(old) = replaced {
                    // The same pointer handed out again: its free was never seen.
                    self.accs[s].reused_without_free += 1;
                    release(&mut self.procs, pid, family, &old);
                }
                let a = &mut self.accs[s];
                if top > 0 {
                    let entry = Reverse((e.size, Reverse(e.ts), i));
                    if a.largest.len() < top {
                        a.largest.push(entry);
                    } else if let Some(mut least) = a.largest.peek_mut() {
                        // The heap keeps the `top` largest: an entry below its least
                        // one is not kept.
                        if entry < *least {
                            *least = entry;
                        }
                    }
                }
                if family.on_device() {
                    a.alloc_count += 1;
                    a.alloc_bytes = a.alloc_bytes.saturating_add(e.size);
                    let p = self.procs.entry(pid).or_default();
                    p.live = p.live.saturating_add(e.size);
                    if p.live > p.peak {
                        p.peak = p.live;
                        p.peak_ts = e.ts;
                    }
                } else {
                    a.host_alloc_count += 1;
                }
            }
            Change::Free { family, freed, .. } => {
                if e.mem_kind() == Some(MemKind::VmmMap) {
                    // The last unmap of a released handle, which gives it back.
                    self.accs[s].vmm_and_pool_calls += 1;
                }
                let a = &mut self.accs[freed.data.stream as usize];
                if family.on_device() {
                    a.free_count += 1;
                } else {
                    a.host_free_count += 1;
                }
                release(&mut self.procs, pid, family, &freed);
            }
            Change::UnmatchedFree { .. } => self.accs[s].unmatched_frees += 1,
            Change::HandleReference(r) => {
                let c = &mut self.accs[s].vmm_refs;
                *match r {
                    HandleRef::StillMapped => &mut c.still_mapped,
                    HandleRef::Retained => &mut c.retained,
                    HandleRef::Imported => &mut c.imported,
                } += 1;
            }
            Change::Untracked => self.accs[s].vmm_and_pool_calls += 1,
            Change::NullFree => {}
            Change::NotMemory => match e.kind() {
                Some(EventKind::AllocFailed) => self.accs[s].failed_count += 1,
                Some(EventKind::FreeFailed) => self.accs[s].free_failed_count += 1,
                _ => {}
            },
        }
    }
}

/// Takes a released allocation off its process's running total.
fn release(procs: &mut Procs, pid: ProcKey, f: Family, old: &Held<Origin>) {
    if f.on_device() {
        let p = procs.entry(pid).or_default();
        p.live = p.live.saturating_sub(old.size);
    }
}
