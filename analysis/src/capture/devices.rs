//! The per-device view of a capture (`memwatch report`'s "per device" section, JSON
//! `devices`): for each device of each process, the driver-level peak and where that
//! memory went by kind, next to the framework's own figures where the capture has them
//! (the PJRT allocator's samples, live `jax.Array` bytes) and, given NVML's per-process
//! readings, what the driver held for the process beyond the captured allocations (the
//! CUDA context, loaded module code).
//!
//! Owns the kinds ([`MemoryKind`]) and these figures. It is fed by `stats`' one pass over
//! the events (the live set's changes, so it follows the one free-matching rule) and
//! prints nothing. Devices are CUDA/HIP ordinals as each process saw them: with
//! `CUDA_VISIBLE_DEVICES` two processes' device 0 can be two different GPUs.

use std::collections::HashMap;

use memwatch_wire::{Api, ApiFamily, EventKind, MemKind};
use serde::Serialize;

use super::load::{Ev, Loaded, ProcKey};
use super::stats::Origin;
use crate::live::{Change, Family, LiveKey, LiveSet, MemEvent};
use crate::nvsmi::ProcessSample;

/// What device memory was allocated for, as far as the API (and the framework's own
/// figures) tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryKind {
    /// A VMM handle exactly the size of the PJRT allocator's pool (`pool_bytes`): XLA's
    /// BFC pool.
    FrameworkPool,
    /// Other VMM physical handles (`cuMemCreate`): NCCL's buffers when it runs with
    /// cuMem, VMM allocators (XLA's `platform`, PyTorch's expandable segments).
    Vmm,
    /// `cudaMalloc` / `hipMalloc`: PyTorch's caching-allocator segments (its
    /// `memory_reserved()`).
    RuntimeMalloc,
    /// `cuMemAlloc`: the driver API (XLA's small buffers, CuPy's pool, NCCL without cuMem).
    DriverMalloc,
    /// Stream-ordered pools (`cuMemAllocAsync`, `*FromPoolAsync`: XLA's `cuda_async`).
    StreamPool,
    /// Managed (unified) memory.
    Managed,
}

const KINDS: usize = 6;

impl MemoryKind {
    const ALL: [Self; KINDS] = [
        Self::FrameworkPool,
        Self::Vmm,
        Self::RuntimeMalloc,
        Self::DriverMalloc,
        Self::StreamPool,
        Self::Managed,
    ];

    /// The kind of a device-memory allocation; `pool_sizes`: the PJRT allocator's pool
    /// sizes on its (process, device).
    pub fn of(api: Api, mem: Option<MemKind>, size: u64, pool_sizes: &[u64]) -> Self {
        if Self::is_vmm(api, mem) {
            return if pool_sizes.contains(&size) {
                Self::FrameworkPool
            } else {
                Self::Vmm
            };
        }
        match mem {
            Some(MemKind::StreamPool) => Self::StreamPool,
            Some(MemKind::Managed) => Self::Managed,
            _ => match api {
                Api::CuMemAllocAsync
                | Api::CuMemAllocFromPoolAsync
                | Api::CudaMallocAsync
                | Api::HipMallocAsync
                | Api::HipMallocFromPoolAsync => Self::StreamPool,
                Api::CuMemAllocManaged | Api::CudaMallocManaged | Api::HipMallocManaged => {
                    Self::Managed
                }
                _ if api.family() == Some(ApiFamily::CudaDriver) => Self::DriverMalloc,
                _ => Self::RuntimeMalloc,
            },
        }
    }

    /// Whether a device-memory allocation is a VMM physical allocation (the only kind
    /// [`Self::of`] reads the pool sizes for).
    pub fn is_vmm(api: Api, mem: Option<MemKind>) -> bool {
        mem == Some(MemKind::VmmPhysical)
            || (matches!(mem, None | Some(MemKind::None))
                && matches!(api, Api::CuMemCreate | Api::HipMemCreate))
    }

    /// Stable lower-case name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::FrameworkPool => "framework_pool",
            Self::Vmm => "vmm",
            Self::RuntimeMalloc => "runtime_malloc",
            Self::DriverMalloc => "driver_malloc",
            Self::StreamPool => "stream_pool",
            Self::Managed => "managed",
        }
    }

    /// The kind of a [`MemoryKind::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A few words for tables.
    pub fn short(self) -> &'static str {
        match self {
            Self::FrameworkPool => "framework pool",
            Self::Vmm => "VMM (cuMemCreate)",
            Self::RuntimeMalloc => "cudaMalloc",
            Self::DriverMalloc => "cuMemAlloc",
            Self::StreamPool => "stream pool",
            Self::Managed => "managed",
        }
    }

    /// What the kind is, for people.
    pub fn label(self) -> &'static str {
        match self {
            Self::FrameworkPool => "framework pool (VMM handle = PJRT pool_bytes: XLA's BFC pool)",
            Self::Vmm => "VMM handles (cuMemCreate: NCCL's cuMem buffers, VMM allocators)",
            Self::RuntimeMalloc => "cudaMalloc/hipMalloc (PyTorch's reserved segments)",
            Self::DriverMalloc => "cuMemAlloc (driver API: XLA's small buffers, CuPy, NCCL)",
            Self::StreamPool => "stream-ordered pool (cuMemAllocAsync: XLA cuda_async)",
            Self::Managed => "managed memory",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One device of one process.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceView {
    pub pid: u32,
    pub image: u32,
    /// The CUDA/HIP ordinal as this process saw it (not a physical GPU id).
    pub device: i32,
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
    /// Driver-level peak of device memory (every kind) and when (ns since the start).
    pub peak_bytes: u64,
    pub peak_ns: u64,
    /// Device memory by kind at `peak_ns`; sums to `peak_bytes`.
    pub at_peak: Vec<KindBytes>,
    /// Each kind over the run.
    pub kinds: Vec<KindFigures>,
    pub host_pinned_peak_bytes: u64,
    /// VMM handles the process mapped without creating them: imported from another
    /// process (NCCL's peer buffers, CUDA IPC). Their memory is the exporter's and is
    /// counted on the exporter's device; omitted when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imported_vmm: Option<ImportedVmm>,
    pub framework: FrameworkView,
    /// NVML's per-process figure next to the captured live bytes; present when
    /// per-process readings were given and the process used this one device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindBytes {
    pub kind: &'static str,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindFigures {
    pub kind: &'static str,
    pub allocs: u64,
    pub peak_bytes: u64,
    pub live_bytes_at_end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportedVmm {
    pub mappings: u64,
    /// Most bytes mapped from imported handles at once.
    pub peak_mapped_bytes: u64,
}

/// The framework's own figures of this device, where the capture has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum FrameworkView {
    /// The PJRT allocator's samples (what JAX's `device.memory_stats()` returns) and the
    /// PJRT buffers (`jax.Array` device storage) of this process on this device.
    Pjrt {
        samples: u64,
        /// Largest `peak_bytes_in_use` any sample reported.
        peak_bytes_in_use: u64,
        /// Largest `bytes_in_use` any sample reported.
        max_bytes_in_use: u64,
        bytes_limit: Option<u64>,
        pool_bytes: Option<u64>,
        /// Most bytes of PJRT buffers live at once, and when.
        live_arrays_peak_bytes: u64,
        live_arrays_peak_ns: u64,
    },
    /// No framework figure in the capture (PyTorch and CuPy report nothing to the
    /// shim); `note` says what stands for it.
    None { note: String },
}

/// NVML's figure of one process (all it holds on the device: allocations, the CUDA
/// context, loaded module code) against the capture's live bytes at the same instants.
/// Differences are NVML minus captured; a reading taken while memory changed can be off
/// by what changed within the reading's millisecond.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlView {
    pub readings: u64,
    pub peak_bytes: u64,
    pub peak_ns: u64,
    /// Captured live bytes of the process when NVML read its peak.
    pub captured_at_peak_bytes: u64,
    /// NVML minus captured at the peak reading: held by the driver for the process
    /// outside any allocation call (the CUDA context, module code).
    pub not_captured_at_peak_bytes: i64,
    /// The same over every reading (median, least, most).
    pub not_captured_median_bytes: i64,
    pub not_captured_min_bytes: i64,
    pub not_captured_max_bytes: i64,
}

/// Figures of one stream ((process image, device)) while walking.
#[derive(Default, Clone)]
struct StreamWalk {
    live: [u64; KINDS],
    total: u64,
    peak: u64,
    peak_ts: u64,
    at_peak: [u64; KINDS],
    kind_peak: [u64; KINDS],
    kind_allocs: [u64; KINDS],
    host_live: u64,
    host_peak: u64,
    imported_maps: u64,
    imported_live: u64,
    imported_peak: u64,
    arrays_live: u64,
    arrays_peak: u64,
    arrays_peak_ts: u64,
}

/// A process reading on the capture's clock: (raw ns, used bytes).
type Reading = (u64, u64);

/// The PJRT allocator's pool sizes by (pid, device).
pub type PoolSizes = foldhash::HashMap<(u32, i32), Vec<u64>>;

/// Adds the pool sizes `stats` name to `sizes`; whether one was new.
pub fn add_pool_sizes(sizes: &mut PoolSizes, stats: &[memwatch_wire::PjrtMemoryStats]) -> bool {
    let mut added = false;
    for s in stats {
        for b in [
            s.get(memwatch_wire::PjrtMemoryStats::POOL_BYTES, s.pool_bytes),
            s.get(
                memwatch_wire::PjrtMemoryStats::PEAK_POOL_BYTES,
                s.peak_pool_bytes,
            ),
        ]
        .into_iter()
        .flatten()
        {
            let v = sizes.entry((s.pid, s.device)).or_default();
            if b > 0 && !v.contains(&b) {
                v.push(b);
                added = true;
            }
        }
    }
    added
}

/// The walk the report's fold (`stats::ReportFold`) feeds, event by event, in time
/// order. Streams are taken in as they appear; the pool sizes can be set again (a
/// capture folded while written learns them as it goes, and folds again when one
/// changes).
#[derive(Clone, Default)]
pub(super) struct DeviceWalk {
    streams: Vec<StreamWalk>,
    pool_sizes: PoolSizes,
    /// Live PJRT buffers: (process image, buffer) -> (stream, size).
    arrays: foldhash::HashMap<(ProcKey, u64), (u32, u64)>,
    /// Mappings of imported handles: (process image, address) -> (stream, size).
    imported: foldhash::HashMap<(ProcKey, u64), (u32, u64)>,
    /// NVML readings in time order: (raw ns, pid, used bytes); `next` is the first not
    /// yet compared.
    readings: Vec<(u64, u32, u64)>,
    next: usize,
    /// Per pid: (reading, captured live bytes then).
    compared: HashMap<u32, Vec<(Reading, u64)>>,
}

impl DeviceWalk {
    /// A walk of `loaded` (all of it known: its pool sizes), with NVML's per-process
    /// readings of the same run.
    pub fn new(loaded: &Loaded, samples: &[ProcessSample]) -> Self {
        let mut pool_sizes = PoolSizes::default();
        add_pool_sizes(&mut pool_sizes, &loaded.pjrt.stats);
        // NVML's wall-clock readings on the capture's monotonic clock, through each
        // process's own anchor pair.
        let mut offset: HashMap<u32, u64> = HashMap::new();
        for m in loaded.processes.values() {
            if let Some(mono) = m.mono_anchor_ns {
                offset
                    .entry(m.pid)
                    .or_insert(m.wall_anchor_unix_ns.saturating_sub(mono));
            }
        }
        let mut readings: Vec<(u64, u32, u64)> = samples
            .iter()
            .filter_map(|s| {
                let off = offset.get(&s.pid)?;
                Some((s.wall_unix_ns.saturating_sub(*off), s.pid, s.used_bytes))
            })
            .collect();
        readings.sort_unstable();
        Self {
            pool_sizes,
            readings,
            ..Self::default()
        }
    }

    /// Entries a clone copies (streams, live PJRT buffers, imported mappings).
    pub fn entries(&self) -> usize {
        self.streams.len() + self.arrays.len() + self.imported.len()
    }

    /// Sets the pool sizes; whether they changed.
    pub fn set_pool_sizes(&mut self, sizes: &PoolSizes) -> bool {
        let changed = self.pool_sizes != *sizes;
        if changed {
            self.pool_sizes.clone_from(sizes);
        }
        changed
    }

    /// Goes back to where `cp` (an earlier clone of this walk) stood, keeping the pool
    /// sizes and the readings.
    pub fn restore(&mut self, cp: &Self) {
        self.streams.clone_from(&cp.streams);
        self.arrays.clone_from(&cp.arrays);
        self.imported.clone_from(&cp.imported);
        self.next = cp.next;
        self.compared.clone_from(&cp.compared);
    }

    fn kind(&self, e: &Ev, streams: &[(ProcKey, i32)]) -> MemoryKind {
        let (api, mem) = (e.api(), e.mem_kind());
        // The pool sizes are looked up only for the kind that reads them.
        let pools = if MemoryKind::is_vmm(api, mem) {
            let (k, d) = streams[e.stream as usize];
            self.pool_sizes
                .get(&(k.pid, d))
                .map_or(&[][..], Vec::as_slice)
        } else {
            &[]
        };
        MemoryKind::of(api, mem, e.size, pools)
    }

    fn add(&mut self, e: &Ev, streams: &[(ProcKey, i32)]) {
        let k = self.kind(e, streams);
        let s = &mut self.streams[e.stream as usize];
        let i = k.index();
        s.live[i] = s.live[i].saturating_add(e.size);
        s.kind_allocs[i] += 1;
        s.kind_peak[i] = s.kind_peak[i].max(s.live[i]);
        s.total = s.total.saturating_add(e.size);
        if s.total > s.peak {
            s.peak = s.total;
            s.peak_ts = e.ts;
            s.at_peak = s.live;
        }
    }

    fn sub(&mut self, alloc: &Ev, size: u64, streams: &[(ProcKey, i32)]) {
        let k = self.kind(alloc, streams);
        let s = &mut self.streams[alloc.stream as usize];
        s.live[k.index()] = s.live[k.index()].saturating_sub(size);
        s.total = s.total.saturating_sub(size);
    }

    /// Compares the NVML readings taken before `ts` with the live bytes now.
    fn readings_until(&mut self, ts: u64, streams: &[(ProcKey, i32)]) {
        while let Some(&(t, pid, used)) = self.readings.get(self.next) {
            if t >= ts {
                break;
            }
            self.next += 1;
            let captured: u64 = streams
                .iter()
                .zip(&self.streams)
                .filter(|((k, _), _)| k.pid == pid)
                .map(|(_, s)| s.total)
                .sum();
            self.compared
                .entry(pid)
                .or_default()
                .push(((t, used), captured));
        }
    }

    /// Folds in event `events[i]`, after the live set took it (`change`).
    pub fn event(
        &mut self,
        events: &[Ev],
        i: usize,
        me: &MemEvent,
        change: &Change<Origin>,
        live: &LiveSet<Origin>,
        streams: &[(ProcKey, i32)],
    ) {
        let e = &events[i];
        if e.stream as usize >= self.streams.len() {
            self.streams
                .resize(e.stream as usize + 1, StreamWalk::default());
        }
        self.readings_until(e.ts, streams);
        match change {
            Change::Alloc {
                family, replaced, ..
            } => {
                if let Some(old) = replaced {
                    self.release(events, *family, old.data, old.size, streams);
                }
                if family.on_device() {
                    self.add(e, streams);
                } else {
                    let s = &mut self.streams[e.stream as usize];
                    s.host_live = s.host_live.saturating_add(e.size);
                    s.host_peak = s.host_peak.max(s.host_live);
                }
            }
            Change::Free { family, freed, .. } => {
                self.release(events, *family, freed.data, freed.size, streams)
            }
            Change::Untracked => self.untracked(e, me, live),
            _ => {}
        }
    }

    fn release(
        &mut self,
        events: &[Ev],
        family: Family,
        origin: Origin,
        size: u64,
        streams: &[(ProcKey, i32)],
    ) {
        if family.on_device() {
            self.sub(&events[origin.idx], size, streams);
        } else {
            let s = &mut self.streams[origin.stream as usize];
            s.host_live = s.host_live.saturating_sub(size);
        }
    }

    /// PJRT buffers and mappings of imported VMM handles.
    fn untracked(&mut self, e: &Ev, me: &MemEvent, live: &LiveSet<Origin>) {
        let alloc = me.kind == Some(EventKind::Alloc);
        let free = me.kind == Some(EventKind::Free);
        match me.mem {
            Some(MemKind::PjrtBuffer) if alloc => {
                if let Some((st, size)) = self.arrays.insert((me.proc, e.ptr), (e.stream, e.size)) {
                    let s = &mut self.streams[st as usize];
                    s.arrays_live = s.arrays_live.saturating_sub(size);
                }
                let s = &mut self.streams[e.stream as usize];
                s.arrays_live = s.arrays_live.saturating_add(e.size);
                if s.arrays_live > s.arrays_peak {
                    s.arrays_peak = s.arrays_live;
                    s.arrays_peak_ts = e.ts;
                }
            }
            Some(MemKind::PjrtBuffer) if free => {
                if let Some((st, size)) = self.arrays.remove(&(me.proc, e.ptr)) {
                    let s = &mut self.streams[st as usize];
                    s.arrays_live = s.arrays_live.saturating_sub(size);
                }
            }
            Some(MemKind::VmmMap) if alloc => {
                let Some(handle) = me.handle else { return };
                let created = live
                    .get(&LiveKey {
                        proc: me.proc,
                        family: Family::VmmHandle,
                        ptr: handle,
                    })
                    .is_some();
                if !created {
                    self.imported.insert((me.proc, e.ptr), (e.stream, e.size));
                    let s = &mut self.streams[e.stream as usize];
                    s.imported_maps += 1;
                    s.imported_live = s.imported_live.saturating_add(e.size);
                    s.imported_peak = s.imported_peak.max(s.imported_live);
                }
            }
            Some(MemKind::VmmMap) if free => {
                if let Some((st, size)) = self.imported.remove(&(me.proc, e.ptr)) {
                    let s = &mut self.streams[st as usize];
                    s.imported_live = s.imported_live.saturating_sub(size);
                }
            }
            _ => {}
        }
    }

    /// The views, real devices first by ordinal, then by pid.
    pub fn finish(mut self, loaded: &Loaded, base: u64) -> Vec<DeviceView> {
        self.streams
            .resize(loaded.streams.len(), StreamWalk::default());
        self.readings_until(u64::MAX, &loaded.streams);
        let rel = |t: u64| t.saturating_sub(base);
        // Devices with memory per pid: NVML's per-process figure is matched to a
        // device only when the process used one.
        let mut devices_of: HashMap<u32, usize> = HashMap::new();
        for (i, (k, d)) in loaded.streams.iter().enumerate() {
            if *d >= 0 && self.streams[i].peak > 0 {
                *devices_of.entry(k.pid).or_default() += 1;
            }
        }
        let mut out = Vec::new();
        for (i, &(k, device)) in loaded.streams.iter().enumerate() {
            let s = &self.streams[i];
            let samples: Vec<&memwatch_wire::PjrtMemoryStats> = loaded
                .pjrt
                .stats
                .iter()
                .filter(|x| x.pid == k.pid && x.device == device)
                .collect();
            if device < 0
                || (s.peak == 0 && s.host_peak == 0 && samples.is_empty() && s.arrays_peak == 0)
            {
                continue;
            }
            let meta = loaded
                .processes
                .get(&k)
                .and_then(|p| p.devices.get(&device));
            let framework = framework_view(s, &samples, rel);
            let nvml = (devices_of.get(&k.pid) == Some(&1) && s.peak > 0)
                .then(|| self.compared.get(&k.pid).and_then(|c| nvml_view(c, rel)))
                .flatten();
            out.push(DeviceView {
                pid: k.pid,
                image: k.image,
                device,
                name: meta.map(|m| m.name.clone()).filter(|n| !n.is_empty()),
                total_bytes: meta.map(|m| m.total_bytes).filter(|t| *t > 0),
                peak_bytes: s.peak,
                peak_ns: rel(s.peak_ts),
                at_peak: MemoryKind::ALL
                    .iter()
                    .filter(|k| s.at_peak[k.index()] > 0)
                    .map(|k| KindBytes {
                        kind: k.name(),
                        bytes: s.at_peak[k.index()],
                    })
                    .collect(),
                kinds: MemoryKind::ALL
                    .iter()
                    .filter(|k| s.kind_allocs[k.index()] > 0)
                    .map(|k| KindFigures {
                        kind: k.name(),
                        allocs: s.kind_allocs[k.index()],
                        peak_bytes: s.kind_peak[k.index()],
                        live_bytes_at_end: s.live[k.index()],
                    })
                    .collect(),
                host_pinned_peak_bytes: s.host_peak,
                imported_vmm: (s.imported_maps > 0).then_some(ImportedVmm {
                    mappings: s.imported_maps,
                    peak_mapped_bytes: s.imported_peak,
                }),
                framework,
                nvml,
            });
        }
        out.sort_by_key(|v| (v.device, v.pid, v.image));
        out
    }
}

fn framework_view(
    s: &StreamWalk,
    samples: &[&memwatch_wire::PjrtMemoryStats],
    rel: impl Fn(u64) -> u64,
) -> FrameworkView {
    use memwatch_wire::PjrtMemoryStats as S;
    if samples.is_empty() && s.arrays_peak == 0 {
        let note = if s.kind_allocs[MemoryKind::RuntimeMalloc.index()] > 0 {
            "no framework records in the capture; in a PyTorch process the cudaMalloc \
             segments are what its caching allocator reserved (memory_reserved())"
        } else {
            "no framework records in the capture"
        };
        return FrameworkView::None {
            note: note.to_string(),
        };
    }
    let max = |flag: u32, f: fn(&S) -> i64| samples.iter().filter_map(|x| x.get(flag, f(x))).max();
    FrameworkView::Pjrt {
        samples: samples.len() as u64,
        peak_bytes_in_use: max(S::PEAK_BYTES_IN_USE, |x| x.peak_bytes_in_use).unwrap_or(0),
        max_bytes_in_use: max(S::BYTES_IN_USE, |x| x.bytes_in_use).unwrap_or(0),
        bytes_limit: max(S::BYTES_LIMIT, |x| x.bytes_limit),
        pool_bytes: max(S::POOL_BYTES, |x| x.pool_bytes),
        live_arrays_peak_bytes: s.arrays_peak,
        live_arrays_peak_ns: rel(s.arrays_peak_ts),
    }
}

fn nvml_view(c: &[(Reading, u64)], rel: impl Fn(u64) -> u64) -> Option<NvmlView> {
    let ((peak_ts, peak), captured) = c
        .iter()
        .copied()
        .max_by_key(|((t, used), _)| (*used, std::cmp::Reverse(*t)))?;
    let diff = |used: u64, captured: u64| used as i64 - captured as i64;
    let mut diffs: Vec<i64> = c.iter().map(|((_, u), cap)| diff(*u, *cap)).collect();
    diffs.sort_unstable();
    Some(NvmlView {
        readings: c.len() as u64,
        peak_bytes: peak,
        peak_ns: rel(peak_ts),
        captured_at_peak_bytes: captured,
        not_captured_at_peak_bytes: diff(peak, captured),
        not_captured_median_bytes: diffs[diffs.len() / 2],
        not_captured_min_bytes: diffs[0],
        not_captured_max_bytes: diffs[diffs.len() - 1],
    })
}
