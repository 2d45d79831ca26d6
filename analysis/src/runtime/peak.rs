//! The runtime peak per device and what made it up; OOM incidents; the XLA dump join.
//!
//! Definitions (documented in the report too):
//! - *runtime peak* of a device: the largest `peak_bytes_in_use` (else `bytes_in_use`)
//!   any memory-statistics sample reported; it was reached between the previous sample
//!   and the first sample that shows it (the *peak window*).
//! - *running at the peak*: executions on that device whose span (call start to
//!   completion, or to the call's return when no completion was recorded) overlaps the
//!   peak window; if none does, the last execution that started before the window ended.
//!   The main one is the running executable with the largest compiled temp.
//! - *co-resident*: `jax.Array` buffers (PJRT buffers) alive at the window's end, grouped
//!   by the executable that produced them (or "host transfer" / "copy").

use super::load::RuntimeCapture;
use crate::xla::{Group, ModuleReport, PeakBuffer};
use memwatch_wire::{Api, Event, EventKind, PjrtExecutable, PjrtMemoryStats};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One memory-statistics sample as reported (absent fields: null).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Sample {
    pub ts_ns: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: Option<u64>,
    pub pool_bytes: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
}

impl Sample {
    fn of(s: &PjrtMemoryStats) -> Self {
        Sample {
            ts_ns: s.ts_ns,
            bytes_in_use: s.bytes_in_use.max(0) as u64,
            peak_bytes_in_use: s.get(PjrtMemoryStats::PEAK_BYTES_IN_USE, s.peak_bytes_in_use),
            pool_bytes: s.get(PjrtMemoryStats::POOL_BYTES, s.pool_bytes),
            largest_free_block_bytes: s
                .get(PjrtMemoryStats::LARGEST_FREE_BLOCK, s.largest_free_block),
            bytes_limit: s.get(PjrtMemoryStats::BYTES_LIMIT, s.bytes_limit),
        }
    }
    fn peak(&self) -> u64 {
        self.peak_bytes_in_use
            .unwrap_or(self.bytes_in_use)
            .max(self.bytes_in_use)
    }
}

/// An executable as compiled (compiled memory statistics, per device).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutableSummary {
    pub pid: u32,
    pub handle: u64,
    pub name: String,
    pub fingerprint: String,
    pub deserialized: bool,
    pub argument_bytes: Option<u64>,
    pub output_bytes: Option<u64>,
    pub alias_bytes: Option<u64>,
    pub temp_bytes: Option<u64>,
    pub generated_code_bytes: Option<u64>,
    pub executions: u64,
    pub failed_executions: u64,
    pub call_time_ns: u64,
}

impl ExecutableSummary {
    /// `x` as compiled: its name and compiled memory statistics, no executions counted.
    pub fn compiled(x: &PjrtExecutable) -> Self {
        ExecutableSummary {
            pid: x.pid,
            handle: x.handle,
            name: x.name.clone(),
            fingerprint: x.fingerprint.clone(),
            deserialized: x.flags & PjrtExecutable::FLAG_DESERIALIZED != 0,
            argument_bytes: x.stat(x.stats.argument),
            output_bytes: x.stat(x.stats.output),
            alias_bytes: x.stat(x.stats.alias),
            temp_bytes: x.stat(x.stats.temp),
            generated_code_bytes: x.stat(x.stats.generated_code),
            executions: 0,
            failed_executions: 0,
            call_time_ns: 0,
        }
    }
}

/// Live buffers at the peak produced by one executable (or a transfer).
#[derive(Debug, Clone, Serialize)]
pub struct LiveGroup {
    pub producer: String,
    pub bytes: u64,
    pub count: u64,
}

/// The dump module an executable was joined to and its peak's make-up.
#[derive(Debug, Clone, Serialize)]
pub struct DumpJoin {
    pub module: String,
    pub file: String,
    /// "name+stats" when the dump's argument/output/temp bytes equal the compiled
    /// statistics, "name" when only the name matched.
    pub matched_by: String,
    pub argument_bytes: u64,
    pub output_bytes: u64,
    pub temp_bytes: u64,
    pub peak_buffers: Vec<PeakBuffer>,
    pub by_op_name: Vec<Group>,
    /// The module's peak bytes by HLO op category (fusion, dot/conv, ...).
    pub by_category: Vec<Group>,
}

/// One execution overlapping the peak window.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub executable: String,
    pub handle: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub completed: bool,
    pub temp_bytes: Option<u64>,
}

/// A device's runtime peak and its attribution.
#[derive(Debug, Clone, Serialize)]
pub struct PeakAttribution {
    pub ts_ns: u64,
    pub window_start_ns: u64,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
    /// The main executable running at the peak (largest compiled temp among `running`).
    pub executable: Option<String>,
    pub running: Vec<Running>,
    /// Live PJRT buffers at the window's end.
    pub live_buffer_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    /// Compiled temp of the main executable (its scratch while it runs).
    pub running_temp_bytes: u64,
    /// `live_buffer_bytes + running_temp_bytes`, capped at the peak.
    pub explained_bytes: u64,
    /// What the two do not cover (allocator rounding, buffers outside PJRT, ...).
    pub unexplained_bytes: u64,
    pub xla: Option<DumpJoin>,
}

/// One device of one process.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRuntime {
    pub device: i32,
    pub samples: u64,
    pub first: Option<Sample>,
    pub last: Option<Sample>,
    pub max_pool_bytes: Option<u64>,
    pub peak: Option<PeakAttribution>,
    /// Every sample (only when asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Sample>,
}

/// An execute that failed with RESOURCE_EXHAUSTED.
#[derive(Debug, Clone, Serialize)]
pub struct OomIncident {
    pub ts_ns: u64,
    pub device: i32,
    pub executable: String,
    pub handle: u64,
    pub result: i32,
    /// The size named in the error message; JAX prints it in human units ("3.25GiB"),
    /// so it is only as exact as the message.
    pub requested_bytes: Option<u64>,
    pub compiled_temp_bytes: Option<u64>,
    /// The failed request is the executable's temp buffer: the compiled temp size,
    /// rounded up to BFC's 256 bytes, lies within the message's rounding of the request.
    pub request_is_temp_buffer: bool,
    /// The exact size of that request when it is the temp buffer (temp rounded to 256).
    pub exact_request_bytes: Option<u64>,
    pub last_stats: Option<Sample>,
    pub live_buffer_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    pub xla: Option<DumpJoin>,
}

/// A compile that failed (no executable came of it): memory asked for while compiling
/// (autotuning scratch) is not in the allocator's peak.
#[derive(Debug, Clone, Serialize)]
pub struct FailedCompile {
    pub ts_ns: u64,
    pub duration_ns: u64,
    /// The PJRT error code (8: RESOURCE_EXHAUSTED).
    pub result: i32,
}

/// One process's runtime report.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessRuntime {
    pub pid: u32,
    pub executables: Vec<ExecutableSummary>,
    pub devices: Vec<DeviceRuntime>,
    pub ooms: Vec<OomIncident>,
    pub failed_compiles: Vec<FailedCompile>,
}

/// `memwatch runtime`'s document.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeReport {
    pub processes: Vec<ProcessRuntime>,
    pub damaged_regions: u64,
}

const RESOURCE_EXHAUSTED: i32 = 8;

struct Span {
    handle: u64,
    device: i32,
    start: u64,
    end: u64,
    completed: bool,
}

fn producer_name(api: Api, aux: u64, names: &HashMap<u64, String>) -> String {
    match api {
        Api::PjrtExecuteOutput => names
            .get(&aux)
            .cloned()
            .unwrap_or_else(|| format!("executable {aux:#x}")),
        Api::PjrtBufferFromHostBuffer => "host transfer".into(),
        Api::PjrtBufferPreAttach => "before attach".into(),
        _ => "device copy".into(),
    }
}

/// Live PJRT buffers at `ts` on `device` (all devices when the free events lack one).
fn live_at(
    events: &[&Event],
    ts: u64,
    device: i32,
    names: &HashMap<u64, String>,
) -> (u64, Vec<LiveGroup>) {
    let mut live: HashMap<u64, (u64, String, i32)> = HashMap::new();
    for e in events.iter().take_while(|e| e.ts_ns <= ts) {
        match e.kind() {
            Some(EventKind::Alloc) if e.is_mem(memwatch_wire::MemKind::PjrtBuffer) => {
                live.insert(
                    e.ptr,
                    (e.size, producer_name(e.api(), e.aux, names), e.device),
                );
            }
            Some(EventKind::Free) => {
                live.remove(&e.ptr);
            }
            _ => {}
        }
    }
    let mut groups: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut total = 0;
    for (size, who, dev) in live.values() {
        if *dev != device {
            continue;
        }
        total += size;
        let g = groups.entry(who.clone()).or_default();
        g.0 += size;
        g.1 += 1;
    }
    let mut v: Vec<LiveGroup> = groups
        .into_iter()
        .map(|(producer, (bytes, count))| LiveGroup {
            producer,
            bytes,
            count,
        })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.producer.cmp(&b.producer)));
    (total, v)
}

/// Computes the report. `timeline`: include every sample per device.
pub fn analyse(cap: &RuntimeCapture, timeline: bool) -> RuntimeReport {
    let mut pids: Vec<u32> = cap
        .executables
        .iter()
        .map(|x| x.pid)
        .chain(cap.stats.iter().map(|s| s.pid))
        .chain(cap.events.iter().map(|e| e.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let processes = pids
        .into_iter()
        .map(|pid| process(cap, pid, timeline))
        .collect();
    RuntimeReport {
        processes,
        damaged_regions: cap.damage.len() as u64,
    }
}

fn process(cap: &RuntimeCapture, pid: u32, timeline: bool) -> ProcessRuntime {
    let exes: Vec<&PjrtExecutable> = cap.executables.iter().filter(|x| x.pid == pid).collect();
    let by_handle: HashMap<u64, &PjrtExecutable> = exes.iter().map(|x| (x.handle, *x)).collect();
    let names: HashMap<u64, String> = exes.iter().map(|x| (x.handle, x.name.clone())).collect();
    let events: Vec<&Event> = cap.events.iter().filter(|e| e.pid == pid).collect();

    // Execute spans, extended to completion where a completion event exists.
    let mut spans: Vec<Span> = Vec::new();
    let mut summary: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for e in &events {
        match e.api() {
            Api::PjrtExecute => {
                let s = summary.entry(e.ptr).or_default();
                if e.result == 0 {
                    s.0 += 1;
                } else {
                    s.1 += 1;
                }
                s.2 += e.duration_ns;
                spans.push(Span {
                    handle: e.ptr,
                    device: e.device,
                    start: e.ts_ns,
                    end: e.ts_ns + e.duration_ns,
                    completed: false,
                });
            }
            Api::PjrtExecuteComplete => {
                if let Some(sp) = spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.handle == e.ptr && s.device == e.device && s.start == e.ts_ns)
                {
                    sp.end = sp.end.max(e.ts_ns + e.duration_ns);
                    sp.completed = true;
                }
                // Execute returned success but the device-side run failed (reported
                // through the completion event): count it as a failed run.
                if e.result != 0 {
                    let s = summary.entry(e.ptr).or_default();
                    s.0 = s.0.saturating_sub(1);
                    s.1 += 1;
                }
            }
            _ => {}
        }
    }
    let executables = exes
        .iter()
        .map(|x| {
            let (ok, failed, t) = summary.get(&x.handle).copied().unwrap_or_default();
            ExecutableSummary {
                executions: ok,
                failed_executions: failed,
                call_time_ns: t,
                ..ExecutableSummary::compiled(x)
            }
        })
        .collect();
    let name_of = |h: u64| {
        names
            .get(&h)
            .cloned()
            .unwrap_or_else(|| format!("executable {h:#x}"))
    };
    let temp_of = |h: u64| by_handle.get(&h).and_then(|x| x.stat(x.stats.temp));

    let mut devs: Vec<i32> = cap
        .stats
        .iter()
        .filter(|s| s.pid == pid)
        .map(|s| s.device)
        .collect();
    devs.sort_unstable();
    devs.dedup();
    let devices = devs
        .into_iter()
        .map(|device| {
            let samples: Vec<Sample> = cap
                .stats
                .iter()
                .filter(|s| s.pid == pid && s.device == device)
                .map(Sample::of)
                .collect();
            let peak = peak_of(&samples).map(|i| {
                let s = &samples[i];
                let window_start = if i > 0 { samples[i - 1].ts_ns } else { 0 };
                let mut running: Vec<Running> = spans
                    .iter()
                    .filter(|sp| {
                        sp.device == device && sp.start <= s.ts_ns && sp.end >= window_start
                    })
                    .map(|sp| Running {
                        executable: name_of(sp.handle),
                        handle: sp.handle,
                        start_ns: sp.start,
                        end_ns: sp.end,
                        completed: sp.completed,
                        temp_bytes: temp_of(sp.handle),
                    })
                    .collect();
                if running.is_empty() {
                    if let Some(sp) = spans
                        .iter()
                        .rev()
                        .find(|sp| sp.device == device && sp.start <= s.ts_ns)
                    {
                        running.push(Running {
                            executable: name_of(sp.handle),
                            handle: sp.handle,
                            start_ns: sp.start,
                            end_ns: sp.end,
                            completed: sp.completed,
                            temp_bytes: temp_of(sp.handle),
                        });
                    }
                }
                let main = running
                    .iter()
                    .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
                    .cloned();
                let (live, groups) = live_at(&events, s.ts_ns, device, &names);
                let temp = main.as_ref().and_then(|m| m.temp_bytes).unwrap_or(0);
                let peak_bytes = s.peak();
                let explained = (live + temp).min(peak_bytes);
                PeakAttribution {
                    ts_ns: s.ts_ns,
                    window_start_ns: window_start,
                    peak_bytes_in_use: peak_bytes,
                    pool_bytes: s.pool_bytes,
                    bytes_limit: s.bytes_limit,
                    executable: main.map(|m| m.executable),
                    running,
                    live_buffer_bytes: live,
                    co_resident: groups,
                    running_temp_bytes: temp,
                    explained_bytes: explained,
                    unexplained_bytes: peak_bytes - explained,
                    xla: None,
                }
            });
            DeviceRuntime {
                device,
                samples: samples.len() as u64,
                first: samples.first().cloned(),
                last: samples.last().cloned(),
                max_pool_bytes: samples.iter().filter_map(|s| s.pool_bytes).max(),
                peak,
                timeline: if timeline { samples } else { Vec::new() },
            }
        })
        .collect();

    let ooms = events
        .iter()
        .filter(|e| {
            // Synchronous: Execute itself returned the error. Asynchronous: Execute
            // returned success and the error came with the completion event (the
            // wrapper only asks for completion after a successful Execute, so one
            // failure is never counted twice).
            matches!(e.api(), Api::PjrtExecute | Api::PjrtExecuteComplete)
                && e.result == RESOURCE_EXHAUSTED
        })
        .map(|e| {
            let last = cap
                .stats
                .iter()
                .rev()
                .find(|s| {
                    s.pid == pid && s.device == e.device && s.ts_ns <= e.ts_ns + e.duration_ns
                })
                .map(Sample::of);
            let (live, groups) = live_at(&events, e.ts_ns, e.device, &names);
            let requested = (e.size > 0).then_some(e.size);
            let temp = temp_of(e.ptr);
            let exact = match (requested, temp) {
                (Some(r), Some(t)) if t > 0 && request_matches(r, round_up_256(t)) => {
                    Some(round_up_256(t))
                }
                _ => None,
            };
            OomIncident {
                ts_ns: e.ts_ns,
                device: e.device,
                executable: name_of(e.ptr),
                handle: e.ptr,
                result: e.result,
                requested_bytes: requested,
                compiled_temp_bytes: temp,
                request_is_temp_buffer: exact.is_some(),
                exact_request_bytes: exact,
                last_stats: last,
                live_buffer_bytes: live,
                co_resident: groups,
                xla: None,
            }
        })
        .collect();
    let failed_compiles = events
        .iter()
        .filter(|e| e.api_name() == Api::PjrtClientCompile && e.result != 0)
        .map(|e| FailedCompile {
            ts_ns: e.ts_ns,
            duration_ns: e.duration_ns,
            result: e.result,
        })
        .collect();
    ProcessRuntime {
        pid,
        executables,
        devices,
        ooms,
        failed_compiles,
    }
}

fn round_up_256(b: u64) -> u64 {
    b.div_ceil(256) * 256
}

/// Whether `printed` (a size parsed from a message that prints two decimals of a binary
/// unit, e.g. "3.25GiB") can be the exact `bytes`: exact bytes match exactly, a human
/// figure within half of its last printed digit (0.005 of its unit).
fn request_matches(printed: u64, bytes: u64) -> bool {
    if printed == bytes {
        return true;
    }
    let unit: u64 = match printed {
        p if p >= 1 << 30 => 1 << 30,
        p if p >= 1 << 20 => 1 << 20,
        p if p >= 1 << 10 => 1 << 10,
        _ => return false,
    };
    // |printed - bytes| <= 0.005 unit, in integers: 200 * diff <= unit.
    200 * printed.abs_diff(bytes) <= unit
}

/// Index of the sample that first shows the device's largest peak.
fn peak_of(samples: &[Sample]) -> Option<usize> {
    let max = samples.iter().map(Sample::peak).max()?;
    samples.iter().position(|s| s.peak() == max)
}

/// `jit_mlp`, `jit(mlp)`, `pjit_mlp`, `jit__mlp` ... -> comparable key.
pub fn normalise(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase()
        .trim_start_matches("pjit")
        .trim_start_matches("jit")
        .to_string()
}

/// Finds `exe`'s module among `mods`: same normalised name; among several, the one whose
/// argument/output/temp bytes equal the compiled statistics.
pub fn find_module<'a>(
    exe: &ExecutableSummary,
    mods: &'a [ModuleReport],
) -> Option<(&'a ModuleReport, &'static str)> {
    let key = normalise(&exe.name);
    let same: Vec<&ModuleReport> = mods.iter().filter(|m| normalise(&m.name) == key).collect();
    let stats_match = |m: &&&ModuleReport| {
        exe.temp_bytes == Some(m.temp_bytes)
            && exe.argument_bytes == Some(m.argument_bytes)
            && exe.output_bytes == Some(m.output_bytes)
    };
    if let Some(m) = same.iter().find(stats_match) {
        return Some((m, "name+stats"));
    }
    same.last().map(|m| (*m, "name"))
}

fn join(exe: &ExecutableSummary, mods: &[ModuleReport], top: usize) -> Option<DumpJoin> {
    let (m, how) = find_module(exe, mods)?;
    Some(DumpJoin {
        module: m.name.clone(),
        file: m.file.clone(),
        matched_by: how.to_string(),
        argument_bytes: m.argument_bytes,
        output_bytes: m.output_bytes,
        temp_bytes: m.temp_bytes,
        peak_buffers: m.peak_buffers.iter().take(top).cloned().collect(),
        by_op_name: m.by_op_name.iter().take(top).cloned().collect(),
        by_category: m.by_category.clone(),
    })
}

/// Adds the dump join to every peak and OOM of `report`.
pub fn join_dump(report: &mut RuntimeReport, mods: &[ModuleReport], top: usize) {
    for p in &mut report.processes {
        let exes = p.executables.clone();
        let find = |h: u64| exes.iter().find(|x| x.handle == h);
        for d in &mut p.devices {
            if let Some(peak) = &mut d.peak {
                let main = peak
                    .running
                    .iter()
                    .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
                    .map(|r| r.handle);
                peak.xla = main.and_then(find).and_then(|x| join(x, mods, top));
            }
        }
        for o in &mut p.ooms {
            o.xla = find(o.handle).and_then(|x| join(x, mods, top));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{CompiledMemoryStats, MemKind};

    const GIB: u64 = 1 << 30;

    fn exe(handle: u64, name: &str, temp: i64, arg: i64, out: i64) -> PjrtExecutable {
        PjrtExecutable {
            pid: 1,
            handle,
            flags: PjrtExecutable::FLAG_STATS,
            stats: CompiledMemoryStats {
                temp,
                argument: arg,
                output: out,
                ..CompiledMemoryStats::default()
            },
            devices: vec![0],
            name: name.into(),
            ..PjrtExecutable::default()
        }
    }

    fn ev(api: Api, kind: EventKind, ts: u64, dur: u64, ptr: u64) -> Event {
        Event {
            ts_ns: ts,
            duration_ns: dur,
            ptr,
            pid: 1,
            device: 0,
            ..Event::new(kind, MemKind::None, api)
        }
    }

    fn buf(api: Api, ts: u64, ptr: u64, size: u64, producer: u64) -> Event {
        let mut e = Event {
            size,
            aux: producer,
            ..ev(api, EventKind::Alloc, ts, 10, ptr)
        };
        e.set_mem_kind(MemKind::PjrtBuffer);
        e
    }

    fn stats(ts: u64, in_use: u64, peak: u64) -> PjrtMemoryStats {
        PjrtMemoryStats {
            pid: 1,
            ts_ns: ts,
            device: 0,
            flags: PjrtMemoryStats::BYTES_IN_USE
                | PjrtMemoryStats::PEAK_BYTES_IN_USE
                | PjrtMemoryStats::POOL_BYTES
                | PjrtMemoryStats::BYTES_LIMIT,
            bytes_in_use: in_use as i64,
            peak_bytes_in_use: peak as i64,
            pool_bytes: 20 * GIB as i64,
            bytes_limit: 20 * GIB as i64,
            ..PjrtMemoryStats::default()
        }
    }

    /// The parameters of one executable (`jit_init`'s outputs) plus the temp of another
    /// (`jit_step`) make the peak.
    fn co_resident_capture() -> RuntimeCapture {
        RuntimeCapture {
            executables: vec![
                exe(0xa, "jit_init", 0, 0, 4 * GIB as i64),
                exe(0xb, "jit_step", 8 * GIB as i64, 4 * GIB as i64, 1024),
            ],
            stats: vec![
                stats(100, 0, 0),
                stats(300, 4 * GIB, 4 * GIB),
                stats(600, 4 * GIB + 1024, 12 * GIB + 1024),
                stats(900, 4 * GIB + 1024, 12 * GIB + 1024),
            ],
            events: vec![
                ev(Api::PjrtExecute, EventKind::ApiSpan, 150, 50, 0xa),
                buf(Api::PjrtExecuteOutput, 150, 0x100, 4 * GIB, 0xa),
                ev(Api::PjrtExecute, EventKind::ApiSpan, 400, 20, 0xb),
                ev(Api::PjrtExecuteComplete, EventKind::ApiSpan, 400, 150, 0xb),
                buf(Api::PjrtExecuteOutput, 400, 0x200, 1024, 0xb),
                Event {
                    size: 16 * GIB,
                    result: 8,
                    ..ev(Api::PjrtExecute, EventKind::ApiSpan, 950, 5, 0xb)
                },
            ],
            ..RuntimeCapture::default()
        }
    }

    #[test]
    fn peak_names_running_executable_and_co_resident_buffers() {
        let r = analyse(&co_resident_capture(), true);
        let p = &r.processes[0];
        let d = &p.devices[0];
        assert_eq!(d.samples, 4);
        assert_eq!(d.timeline.len(), 4);
        let pk = d.peak.as_ref().unwrap();
        assert_eq!(pk.peak_bytes_in_use, 12 * GIB + 1024);
        assert_eq!((pk.window_start_ns, pk.ts_ns), (300, 600));
        assert_eq!(pk.executable.as_deref(), Some("jit_step"));
        assert!(pk.running[0].completed);
        assert_eq!(pk.running[0].end_ns, 550);
        assert_eq!(pk.co_resident[0].producer, "jit_init");
        assert_eq!(pk.co_resident[0].bytes, 4 * GIB);
        assert_eq!(pk.live_buffer_bytes, 4 * GIB + 1024);
        assert_eq!(pk.running_temp_bytes, 8 * GIB);
        assert_eq!(pk.explained_bytes, 12 * GIB + 1024);
        assert_eq!(pk.unexplained_bytes, 0);
        let step = p.executables.iter().find(|x| x.name == "jit_step").unwrap();
        assert_eq!((step.executions, step.failed_executions), (1, 1));
    }

    #[test]
    fn oom_incident_carries_request_and_last_stats() {
        let r = analyse(&co_resident_capture(), false);
        let o = &r.processes[0].ooms[0];
        assert_eq!(o.executable, "jit_step");
        assert_eq!(o.requested_bytes, Some(16 * GIB));
        assert_eq!(o.compiled_temp_bytes, Some(8 * GIB));
        assert_eq!(o.last_stats.as_ref().unwrap().ts_ns, 900);
        assert_eq!(o.live_buffer_bytes, 4 * GIB + 1024);
        assert!(r.processes[0].devices[0].timeline.is_empty());
    }

    #[test]
    fn oom_reported_through_the_completion_event_is_an_incident() {
        let mut c = co_resident_capture();
        // the failing execute returned success; its completion event carried the error
        c.events.pop();
        c.events
            .push(ev(Api::PjrtExecute, EventKind::ApiSpan, 950, 5, 0xb));
        c.events.push(Event {
            size: 8 * GIB + 256,
            result: 8,
            ..ev(Api::PjrtExecuteComplete, EventKind::ApiSpan, 950, 40, 0xb)
        });
        let r = analyse(&c, false);
        let p = &r.processes[0];
        assert_eq!(p.ooms.len(), 1);
        let o = &p.ooms[0];
        assert_eq!(o.executable, "jit_step");
        assert_eq!(o.requested_bytes, Some(8 * GIB + 256));
        assert_eq!(o.compiled_temp_bytes, Some(8 * GIB));
        assert_eq!(o.last_stats.as_ref().unwrap().ts_ns, 900);
        let step = p.executables.iter().find(|x| x.name == "jit_step").unwrap();
        assert_eq!((step.executions, step.failed_executions), (1, 1));
        // a completion that succeeded is no incident
        c.events.last_mut().unwrap().result = 0;
        assert!(analyse(&c, false).processes[0].ooms.is_empty());
    }

    #[test]
    fn no_overlap_falls_back_to_the_last_execution_before_the_peak() {
        let mut c = co_resident_capture();
        c.events.retain(|e| !e.is_api(Api::PjrtExecuteComplete));
        c.stats[2].ts_ns = 700; // window 300..700, step ran 400..420: overlaps
        let r = analyse(&c, false);
        let pk = r.processes[0].devices[0].peak.clone().unwrap();
        assert_eq!(pk.executable.as_deref(), Some("jit_step"));
        assert!(!pk.running[0].completed);
        c.stats.truncate(1); // only the first sample: no execution before it but init
        c.stats[0].ts_ns = 250;
        let r = analyse(&c, false);
        let pk = r.processes[0].devices[0].peak.clone().unwrap();
        assert_eq!(pk.executable.as_deref(), Some("jit_init"));
    }

    #[test]
    fn names_normalise() {
        assert_eq!(normalise("jit_mlp"), "mlp");
        assert_eq!(normalise("jit(mlp)"), "mlp");
        assert_eq!(normalise("pjit_mlp"), "mlp");
        assert_ne!(normalise("jit_mlp"), normalise("jit_padf"));
    }

    #[test]
    fn joins_the_real_h200_dump_by_name_and_stats() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/h200/xla/h200-jax0.11.2-mlp");
        let mods = crate::xla::load_dump_dir(&dir).unwrap();
        // memory_analysis() of jit_mlp on the H200 (see the fixture's README)
        let mut c = co_resident_capture();
        c.executables[1] = exe(0xb, "jit_mlp", 239_103_760, 71_303_168, 67_108_938);
        let mut r = analyse(&c, false);
        join_dump(&mut r, &mods, 5);
        let j = r.processes[0].devices[0]
            .peak
            .as_ref()
            .unwrap()
            .xla
            .clone()
            .unwrap();
        assert_eq!(j.module, "jit_mlp");
        assert_eq!(j.matched_by, "name+stats");
        assert_eq!(j.temp_bytes, 239_103_760);
        assert_eq!(j.peak_buffers.len(), 5);
        assert!(!j.by_op_name.is_empty());
        let o = &r.processes[0].ooms[0];
        assert_eq!(o.xla.as_ref().unwrap().module, "jit_mlp");
        // different stats: joined by name only
        c.executables[1].stats.temp = 1;
        let mut r = analyse(&c, false);
        join_dump(&mut r, &mods, 5);
        let pk = r.processes[0].devices[0].peak.clone().unwrap();
        assert_eq!(pk.xla.unwrap().matched_by, "name");
    }

    #[test]
    fn printed_request_matches_the_rounded_temp_buffer() {
        // The H200 incident: "allocate 3.25GiB"; jit_model's temp 3489674768 B.
        let printed = 3.25f64 * (1u64 << 30) as f64;
        assert!(request_matches(printed as u64, round_up_256(3489674768)));
        assert_eq!(round_up_256(3489674768), 3489675008);
        // 3.26 GiB is another buffer.
        assert!(!request_matches(
            (3.26f64 * (1u64 << 30) as f64) as u64,
            3489675008
        ));
        // Exact byte counts must match exactly.
        assert!(request_matches(17179869184, 17179869184));
        assert!(!request_matches(900, 1000));
    }
}
