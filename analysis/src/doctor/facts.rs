//! Figures derived from a capture that several kinds need: driver-level live bytes per
//! (process image, device) from the capture's fold through the live set
//! ([`crate::live::LiveHistory`]: peaks, the live set at the failure), the PJRT buffers
//! with their lifetimes and producing execution, the executions, and the framework
//! allocator's samples. Computed once per diagnosis.

use super::evidence::CaptureEvidence;
use crate::live::ProcKey;
use crate::runtime::{self, RuntimeReport};
use memwatch_wire::{Api, EventKind, MemKind, PjrtExecutable};
use std::collections::{BTreeMap, HashMap};

/// Driver-level figures of one (process image, device).
#[derive(Debug, Clone, Default)]
pub struct DeviceLive {
    pub peak_bytes: u64,
    /// Raw monotonic ns of the first time the peak was reached.
    pub peak_ts: u64,
    /// Bytes live at the checkpoint (see [`DriverFacts::checkpoint_ts`]).
    pub at_checkpoint: u64,
    /// The device allocations live at the checkpoint: (raw alloc time, size), in time
    /// order.
    pub live_at_checkpoint: Vec<(u64, u64)>,
    /// Pinned host memory peak (made while this device was current).
    pub host_peak_bytes: u64,
}

/// Driver-level facts of a capture.
#[derive(Debug, Clone, Default)]
pub struct DriverFacts {
    pub per: BTreeMap<(ProcKey, i32), DeviceLive>,
    /// Raw ns at which `at_checkpoint` was taken (the failure, or the end).
    pub checkpoint_ts: u64,
}

impl DriverFacts {
    /// The peaks of every (process, device) and its live set at `checkpoint` (raw ns;
    /// `u64::MAX`: the end): just before the first event after it, from the capture's
    /// fold through the one free-matching rule ([`CaptureEvidence::live`]).
    pub fn compute(cap: &CaptureEvidence, checkpoint: u64) -> Self {
        let l = &cap.loaded;
        let mut per: BTreeMap<(ProcKey, i32), DeviceLive> = BTreeMap::new();
        for (i, key) in l.streams.iter().enumerate() {
            let p = cap.live.peaks(i);
            per.insert(
                *key,
                DeviceLive {
                    peak_bytes: p.device_bytes,
                    peak_ts: p.device_ts,
                    host_peak_bytes: p.host_bytes,
                    ..DeviceLive::default()
                },
            );
        }
        let at = l.events.partition_point(|e| e.ts <= checkpoint);
        // `CaptureEvidence` keeps the lifetimes, so the answer is always there.
        for pos in cap.live.live_before(at).into_iter().flatten() {
            let e = &l.events[pos];
            let d = per.entry(l.streams[e.stream as usize]).or_default();
            d.at_checkpoint = d.at_checkpoint.saturating_add(e.size);
            d.live_at_checkpoint.push((e.ts, e.size));
        }
        for d in per.values_mut() {
            d.live_at_checkpoint.sort_unstable();
        }
        DriverFacts {
            per,
            checkpoint_ts: checkpoint,
        }
    }

    /// Device bytes live at the checkpoint on `device`, of every process but `pid`:
    /// (pid, bytes) with bytes > 0.
    pub fn others_on(&self, device: i32, pid: u32) -> Vec<(u32, u64)> {
        let mut m: BTreeMap<u32, u64> = BTreeMap::new();
        for ((k, d), v) in &self.per {
            if *d == device && k.pid != pid {
                *m.entry(k.pid).or_default() += v.at_checkpoint;
            }
        }
        m.into_iter().filter(|(_, b)| *b > 0).collect()
    }

    /// The figures of `pid` on `device` (all its images).
    pub fn of(&self, pid: u32, device: i32) -> Option<&DeviceLive> {
        self.per
            .iter()
            .filter(|((k, d), _)| k.pid == pid && *d == device)
            .map(|(_, v)| v)
            .max_by_key(|v| v.peak_bytes)
    }
}

/// Who made a PJRT buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// Output of execution `exec` (index into [`PjrtFacts::executions`]).
    Execution(usize),
    /// A host-to-device transfer.
    Transfer,
    /// A device copy.
    Copy,
}

/// A PJRT buffer (a `jax.Array`'s storage) and its lifetime (runtime ns).
#[derive(Debug, Clone)]
pub struct Buffer {
    pub pid: u32,
    pub device: i32,
    pub size: u64,
    pub created: u64,
    pub freed: Option<u64>,
    pub producer: Producer,
}

/// One call to execute an executable on one device.
#[derive(Debug, Clone)]
pub struct Execution {
    pub pid: u32,
    pub device: i32,
    pub handle: u64,
    /// Runtime ns of the call.
    pub ts: u64,
    /// Until completion (or the call's return).
    pub end: u64,
    /// Whether the call and its completion succeeded.
    pub ok: bool,
    /// The error (8: RESOURCE_EXHAUSTED) of a failed one.
    pub result: i32,
    /// The size the error message names (human units in the message).
    pub requested: u64,
}

/// The PJRT side of a capture.
#[derive(Debug, Clone, Default)]
pub struct PjrtFacts {
    pub executions: Vec<Execution>,
    pub buffers: Vec<Buffer>,
    /// Failed compiles: (pid, runtime ns of the call, duration, result).
    pub failed_compiles: Vec<(u32, u64, u64, i32)>,
    pub executables: Vec<PjrtExecutable>,
    pub report: Option<RuntimeReport>,
}

impl PjrtFacts {
    pub fn compute(cap: &CaptureEvidence) -> Self {
        let rt = &cap.runtime;
        let mut out = Self::lifetimes(rt);
        if !(rt.events.is_empty() && rt.executables.is_empty() && rt.stats.is_empty()) {
            out.report = Some(runtime::analyse(rt, true));
        }
        out
    }

    /// The executions and the buffers' lifetimes of a runtime capture, without the
    /// runtime report (what [`super::steps::execution_leak`] reads; the daemon builds it
    /// from its stored PJRT rows).
    pub fn lifetimes(rt: &runtime::RuntimeCapture) -> Self {
        let mut out = PjrtFacts {
            executables: rt.executables.clone(),
            ..PjrtFacts::default()
        };
        if rt.events.is_empty() && rt.executables.is_empty() && rt.stats.is_empty() {
            return out;
        }
        // (pid, handle, device, ts) -> execution index, for outputs and completions.
        let mut exec_at: HashMap<(u32, u64, i32, u64), usize> = HashMap::new();
        let mut open: HashMap<(u32, u64), usize> = HashMap::new();
        for e in &rt.events {
            match e.api_name() {
                Api::PjrtExecute => {
                    exec_at.insert((e.pid, e.ptr, e.device, e.ts_ns), out.executions.len());
                    out.executions.push(Execution {
                        pid: e.pid,
                        device: e.device,
                        handle: e.ptr,
                        ts: e.ts_ns,
                        end: e.ts_ns + e.duration_ns,
                        ok: e.result == 0,
                        result: e.result,
                        requested: e.size,
                    });
                }
                Api::PjrtExecuteComplete => {
                    if let Some(&i) = exec_at.get(&(e.pid, e.ptr, e.device, e.ts_ns)) {
                        let x = &mut out.executions[i];
                        x.end = x.end.max(e.ts_ns + e.duration_ns);
                        if e.result != 0 {
                            x.ok = false;
                            x.result = e.result;
                            x.requested = x.requested.max(e.size);
                        }
                    }
                }
                Api::PjrtClientCompile if e.result != 0 => {
                    out.failed_compiles
                        .push((e.pid, e.ts_ns, e.duration_ns, e.result));
                }
                _ => {}
            }
            if e.memory_kind() == Some(MemKind::PjrtBuffer) {
                match e.event_kind() {
                    Some(EventKind::Alloc) => {
                        let producer = match e.api_name() {
                            Api::PjrtExecuteOutput => exec_at
                                .get(&(e.pid, e.aux, e.device, e.ts_ns))
                                .map_or(Producer::Copy, |&i| Producer::Execution(i)),
                            Api::PjrtBufferFromHostBuffer => Producer::Transfer,
                            _ => Producer::Copy,
                        };
                        if let Some(old) = open.insert((e.pid, e.ptr), out.buffers.len()) {
                            out.buffers[old].freed.get_or_insert(e.ts_ns);
                        }
                        out.buffers.push(Buffer {
                            pid: e.pid,
                            device: e.device,
                            size: e.size,
                            created: e.ts_ns,
                            freed: None,
                            producer,
                        });
                    }
                    Some(EventKind::Free) => {
                        if let Some(i) = open.remove(&(e.pid, e.ptr)) {
                            out.buffers[i].freed = Some(e.ts_ns);
                        }
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The executable record of a handle.
    pub fn executable(&self, pid: u32, handle: u64) -> Option<&PjrtExecutable> {
        self.executables
            .iter()
            .find(|x| x.pid == pid && x.handle == handle)
    }

    /// Its name (or a placeholder naming the handle).
    pub fn name(&self, pid: u32, handle: u64) -> String {
        self.executable(pid, handle)
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("executable {handle:#x}"))
    }

    /// Buffers of `pid` on `device` live at runtime ns `ts`.
    pub fn live_at(&self, pid: u32, device: i32, ts: u64) -> impl Iterator<Item = &Buffer> {
        self.buffers.iter().filter(move |b| {
            b.pid == pid && b.device == device && b.created <= ts && b.freed.is_none_or(|f| f > ts)
        })
    }

    /// Bytes in use in the pool of (pid, device) at runtime ns `ts`: the allocator's last
    /// sample, raised to the PJRT buffers live at `ts` (samples come every 100 ms or so; the
    /// buffers are later). None when neither says anything. The buffers of an execution
    /// that failed include the output whose allocation was refused, which holds nothing:
    /// callers cap this at the pool.
    pub fn in_use_at(&self, pid: u32, device: i32, ts: u64) -> Option<u64> {
        let live: u64 = self.live_at(pid, device, ts).map(|b| b.size).sum();
        match (self.sample_before(pid, device, ts), live) {
            (None, 0) => None,
            (s, l) => Some(s.map_or(0, |s| s.bytes_in_use).max(l)),
        }
    }

    /// The allocator's samples of (pid, device), in time order.
    pub fn samples(&self, pid: u32, device: i32) -> Vec<runtime::Sample> {
        self.report
            .as_ref()
            .and_then(|r| r.processes.iter().find(|p| p.pid == pid))
            .and_then(|p| p.devices.iter().find(|d| d.device == device))
            .map(|d| d.timeline.clone())
            .unwrap_or_default()
    }

    /// The last sample at or before runtime ns `ts`.
    pub fn sample_before(&self, pid: u32, device: i32, ts: u64) -> Option<runtime::Sample> {
        self.samples(pid, device)
            .into_iter()
            .take_while(|s| s.ts_ns <= ts)
            .filter(|s| s.bytes_in_use > 0 || s.pool_bytes.is_some_and(|p| p > 0))
            .last()
    }
}
