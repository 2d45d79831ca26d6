//! The runtime peak per device and what made it up; OOM incidents.
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
//!
//! Each process's records are gathered in one pass and walked once: a completion finds
//! its execution by (executable, device, start), an incident its last allocator sample
//! by a search in time order, and what was live at every peak and incident comes from
//! one sweep (`super::live`), so the work is linear in the capture however many
//! executions failed.

use std::collections::{BTreeMap, HashMap};

use memwatch_wire::{Api, Event, PjrtExecutable, PjrtMemoryStats};

use super::live::{live_at_each, SweepWork};
use super::load::RuntimeCapture;
use super::report::{
    DeviceRuntime, ExecutableSummary, FailedCompile, OomIncident, PeakAttribution, ProcessRuntime,
    Running, RuntimeReport, Sample,
};

const RESOURCE_EXHAUSTED: i32 = 8;

struct Span {
    handle: u64,
    device: i32,
    start: u64,
    end: u64,
    completed: bool,
}

/// One process's records, each kind in the capture's (time) order.
#[derive(Default)]
struct Records<'a> {
    exes: Vec<&'a PjrtExecutable>,
    stats: Vec<&'a PjrtMemoryStats>,
    events: Vec<&'a Event>,
}

/// Computes the report. `timeline`: include every sample per device. The capture's
/// events and samples are in time order (as [`super::load`] gives them).
pub fn analyse(cap: &RuntimeCapture, timeline: bool) -> RuntimeReport {
    analyse_counting(cap, timeline).0
}

/// [`analyse`], and the work its sweeps of what was live did (all processes together).
pub fn analyse_counting(cap: &RuntimeCapture, timeline: bool) -> (RuntimeReport, SweepWork) {
    let mut by_pid: BTreeMap<u32, Records> = BTreeMap::new();
    for x in &cap.executables {
        by_pid.entry(x.pid).or_default().exes.push(x);
    }
    for s in &cap.stats {
        by_pid.entry(s.pid).or_default().stats.push(s);
    }
    for e in &cap.events {
        by_pid.entry(e.pid).or_default().events.push(e);
    }
    let mut work = SweepWork::default();
    let processes = by_pid
        .into_iter()
        .map(|(pid, r)| {
            let (p, w) = process(pid, &r, timeline);
            work.events_applied += w.events_applied;
            work.groups_read += w.groups_read;
            p
        })
        .collect();
    let report = RuntimeReport {
        processes,
        damaged_regions: cap.damage.len() as u64,
    };
    (report, work)
}

fn process(pid: u32, r: &Records, timeline: bool) -> (ProcessRuntime, SweepWork) {
    let by_handle: HashMap<u64, &PjrtExecutable> = r.exes.iter().map(|x| (x.handle, *x)).collect();
    let names: HashMap<u64, String> = r.exes.iter().map(|x| (x.handle, x.name.clone())).collect();
    let events = &r.events;

    // Execute spans, extended to completion where a completion event exists (the
    // execution of the same executable, device and start). Completions are matched in a
    // second pass: the plugin may report one (on its own thread) before the Execute call
    // that started it has returned and been recorded, so it can come first in the capture.
    let mut spans: Vec<Span> = Vec::new();
    let mut span_at: HashMap<(u64, i32, u64), usize> = HashMap::new();
    let mut summary: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for e in events {
        if e.api() == Api::PjrtExecute {
            let s = summary.entry(e.ptr).or_default();
            if e.result == 0 {
                s.0 += 1;
            } else {
                s.1 += 1;
            }
            s.2 += e.duration_ns;
            span_at.insert((e.ptr, e.device, e.ts_ns), spans.len());
            spans.push(Span {
                handle: e.ptr,
                device: e.device,
                start: e.ts_ns,
                end: e.ts_ns + e.duration_ns,
                completed: false,
            });
        }
    }
    for e in events {
        if e.api() == Api::PjrtExecuteComplete {
            if let Some(&i) = span_at.get(&(e.ptr, e.device, e.ts_ns)) {
                let sp = &mut spans[i];
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
    }
    let executables = r
        .exes
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
    let running_of = |sp: &Span| Running {
        executable: name_of(sp.handle),
        handle: sp.handle,
        start_ns: sp.start,
        end_ns: sp.end,
        completed: sp.completed,
        temp_bytes: temp_of(sp.handle),
    };
    // Each device's spans (in start order) and samples (in time order).
    let mut spans_of: HashMap<i32, Vec<&Span>> = HashMap::new();
    for sp in &spans {
        spans_of.entry(sp.device).or_default().push(sp);
    }
    let mut stats_of: BTreeMap<i32, Vec<&PjrtMemoryStats>> = BTreeMap::new();
    for s in &r.stats {
        stats_of.entry(s.device).or_default().push(s);
    }

    let oom_events: Vec<&Event> = events
        .iter()
        .copied()
        .filter(|e| {
            // Synchronous: Execute itself returned the error. Asynchronous: Execute
            // returned success and the error came with the completion event (the
            // wrapper only asks for completion after a successful Execute, so one
            // failure is never counted twice).
            matches!(e.api(), Api::PjrtExecute | Api::PjrtExecuteComplete)
                && e.result == RESOURCE_EXHAUSTED
        })
        .collect();
    // The peak of each device: (device, its samples, index of the peak sample).
    let peaks: Vec<(i32, Vec<Sample>, Option<usize>)> = stats_of
        .iter()
        .map(|(&device, stats)| {
            let samples: Vec<Sample> = stats.iter().map(|s| Sample::of(s)).collect();
            let peak = peak_of(&samples);
            (device, samples, peak)
        })
        .collect();
    // What was live at every peak and every incident, in one sweep.
    let instants: Vec<(u64, i32)> = peaks
        .iter()
        .filter_map(|(device, samples, i)| i.map(|i| (samples[i].ts_ns, *device)))
        .chain(oom_events.iter().map(|e| (e.ts_ns, e.device)))
        .collect();
    let (mut live, work) = live_at_each(events, &instants, &names);
    let mut live = live.drain(..);

    let no_spans = Vec::new();
    let devices = peaks
        .into_iter()
        .map(|(device, samples, peak_i)| {
            let peak = peak_i.map(|i| {
                let s = &samples[i];
                let window_start = if i > 0 { samples[i - 1].ts_ns } else { 0 };
                let spans = spans_of.get(&device).unwrap_or(&no_spans);
                let mut running: Vec<Running> = spans
                    .iter()
                    .filter(|sp| sp.start <= s.ts_ns && sp.end >= window_start)
                    .map(|sp| running_of(sp))
                    .collect();
                if running.is_empty() {
                    // The last execution that started by the peak sample.
                    let n = spans.partition_point(|sp| sp.start <= s.ts_ns);
                    if let Some(sp) = n.checked_sub(1).map(|k| spans[k]) {
                        running.push(running_of(sp));
                    }
                }
                let main = running
                    .iter()
                    .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
                    .cloned();
                let at = live.next().unwrap_or_default();
                let temp = main.as_ref().and_then(|m| m.temp_bytes).unwrap_or(0);
                let peak_bytes = s.peak();
                let explained = (at.bytes + temp).min(peak_bytes);
                PeakAttribution {
                    ts_ns: s.ts_ns,
                    window_start_ns: window_start,
                    peak_bytes_in_use: peak_bytes,
                    pool_bytes: s.pool_bytes,
                    bytes_limit: s.bytes_limit,
                    executable: main.map(|m| m.executable),
                    running,
                    live_buffer_bytes: at.bytes,
                    co_resident: at.groups,
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

    let no_stats = Vec::new();
    let ooms: Vec<OomIncident> = oom_events
        .iter()
        .map(|e| {
            // The device's last sample by the end of the call.
            let stats = stats_of.get(&e.device).unwrap_or(&no_stats);
            let n = stats.partition_point(|s| s.ts_ns <= e.ts_ns + e.duration_ns);
            let last = n.checked_sub(1).map(|k| Sample::of(stats[k]));
            let at = live.next().unwrap_or_default();
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
                live_buffer_bytes: at.bytes,
                co_resident: at.groups,
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
    let p = ProcessRuntime {
        pid,
        executables,
        devices,
        ooms_total: ooms.len() as u64,
        ooms,
        failed_compiles,
    };
    (p, work)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::join_dump;
    use memwatch_wire::{CompiledMemoryStats, EventKind, MemKind};

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

    /// The plugin's completion callback can be recorded before the Execute call that
    /// started the run returns: the completion is still matched to its execution.
    #[test]
    fn a_completion_recorded_before_its_execute_still_extends_the_run() {
        let mut c = co_resident_capture();
        assert_eq!(c.events[2].api(), Api::PjrtExecute);
        assert_eq!(c.events[3].api(), Api::PjrtExecuteComplete);
        c.events.swap(2, 3);
        let r = analyse(&c, true);
        let pk = r.processes[0].devices[0].peak.clone().unwrap();
        assert!(pk.running[0].completed);
        assert_eq!(pk.running[0].end_ns, 550);
        assert_eq!(pk.running_temp_bytes, 8 * GIB);
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

    /// A JAX loop that keeps every step's output and, once the pool is full, fails every
    /// execution through its completion: each failure is an incident listing the loop's
    /// outputs live then and the last sample by then, and the one sweep that lists what
    /// was live applies each event once however many incidents ask (the work is linear
    /// in the capture: 3 events and one group read per step).
    #[test]
    fn a_long_loop_of_failed_executions_is_swept_once() {
        const OUT: u64 = 1 << 20;
        for (steps, full) in [(100u64, 40u64), (1000, 40), (4000, 700)] {
            let mut c = RuntimeCapture {
                executables: vec![exe(
                    0xb,
                    "jit_refine",
                    2 * OUT as i64,
                    OUT as i64,
                    OUT as i64,
                )],
                ..RuntimeCapture::default()
            };
            for i in 0..steps {
                let ts = 1000 + i * 100;
                let failed = i >= full;
                c.events
                    .push(ev(Api::PjrtExecute, EventKind::ApiSpan, ts, 10, 0xb));
                c.events.push(buf(
                    Api::PjrtExecuteOutput,
                    ts,
                    0x10_0000 + i * 64,
                    OUT,
                    0xb,
                ));
                c.events.push(Event {
                    result: if failed { 8 } else { 0 },
                    size: if failed { 2 * OUT } else { 0 },
                    ..ev(Api::PjrtExecuteComplete, EventKind::ApiSpan, ts, 50, 0xb)
                });
                if i % 10 == 9 {
                    let in_use = (i + 1).min(full) * OUT;
                    c.stats.push(stats(ts + 60, in_use, in_use + 2 * OUT));
                }
            }
            let (r, work) = analyse_counting(&c, false);
            let p = &r.processes[0];
            assert_eq!(p.ooms.len() as u64, steps - full);
            for (k, o) in p.ooms.iter().enumerate() {
                let step = full + k as u64;
                let ts = 1000 + step * 100;
                assert_eq!(o.ts_ns, ts);
                assert_eq!(o.live_buffer_bytes, (step + 1) * OUT, "step {step}");
                assert_eq!(o.co_resident.len(), 1);
                assert_eq!(o.co_resident[0].producer, "jit_refine");
                assert_eq!(o.co_resident[0].count, step + 1);
                // The last sample by the call's end (ts + 50).
                let last = o.last_stats.as_ref().map(|s| s.ts_ns);
                let want = c.stats.iter().rev().find(|s| s.ts_ns <= ts + 50);
                let want = want.map(|s| s.ts_ns);
                assert_eq!(last, want, "step {step}");
            }
            let x = &p.executables[0];
            assert_eq!((x.executions, x.failed_executions), (full, steps - full));
            assert!(work.events_applied <= c.events.len() as u64);
            assert_eq!(
                work.groups_read,
                p.ooms.len() as u64 + 1,
                "one group per answer"
            );
        }
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
