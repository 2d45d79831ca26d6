//! Streaming capture loading: one pass over the file, frames decoded one at a time,
//! each event folded into a compact 40-byte record.
//!
//! Owns reading (salvage mode: damage is recorded, never fatal), per-process metadata,
//! and the compact event list the analyses sort and walk. It holds each event once, in
//! compact form (never the decoded frames, never the file), so 10M+ events fit. It does
//! not compute statistics (`stats`) or print anything.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use memwatch_wire::{
    Api, DeviceProps, Event, EventKind, FrameReader, Module, ModuleMap, ProcessEnd, ProcessStart,
    ReadMode, Record, WireError,
};

pub use crate::live::{Family, ProcKey};

use super::CaptureError;

/// Largest backwards step of a thread's event times that is treated as clock-conversion
/// jitter (and clamped away) rather than as frames written out of order.
const CLAMP_WINDOW_NS: u64 = 1_000_000;

/// Failed calls kept per process in full detail; more are only counted.
pub const MAX_FAILURES_KEPT: usize = 10_000;

/// Markers whose text starts with this are capture-level tags (`memwatch run --tag K=V`
/// writes `memwatch.tag K=V`), not annotations of a process.
pub const TAG_PREFIX: &str = "memwatch.tag ";

/// One event, compacted: what the analyses need, nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev {
    /// Raw CLOCK_MONOTONIC order time: the call's start, or its return for the events of
    /// allocating calls (`memwatch_wire::Event::ts_ns`); [`Ev::start`] / [`Ev::end`].
    pub ts: u64,
    /// Duration of the call in ns.
    pub dur: u64,
    pub ptr: u64,
    pub size: u64,
    /// Index into [`Loaded::streams`]: the (pid, device) the event belongs to.
    pub stream: u32,
    /// The stored codes (`memwatch_wire::Event`'s `api`, `kind`, `mem_kind`), kept as
    /// stored so unknown values are still told apart; read them with [`Ev::api`],
    /// [`Ev::kind`], [`Ev::mem_kind`].
    pub api: u16,
    pub kind: u8,
    pub mem: u8,
}

impl Ev {
    /// When the call started.
    pub fn start(&self) -> u64 {
        memwatch_wire::event::call_span(self.ts, self.dur, self.kind, self.api).0
    }

    /// When the call returned (as far as known: `ts` for an untimed call).
    pub fn end(&self) -> u64 {
        memwatch_wire::event::call_span(self.ts, self.dur, self.kind, self.api).1
    }

    /// The event kind (`None`: a kind this version does not know).
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8(self.kind)
    }

    /// The memory kind (`None`: a kind this version does not know).
    pub fn mem_kind(&self) -> Option<memwatch_wire::MemKind> {
        memwatch_wire::MemKind::from_u8(self.mem)
    }

    /// The API (unknown numbers give [`Api::Unknown`]).
    pub fn api(&self) -> Api {
        Api::from_u16(self.api)
    }
}

/// A failed call, kept in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCall {
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    /// Raw CLOCK_MONOTONIC start.
    pub ts: u64,
    pub api: Api,
    pub kind: EventKind,
    pub mem_kind: u8,
    pub size: u64,
    pub result: i32,
}

/// A device a process reported (`device_info` frame, and the `memwatch.device_props`
/// marker that follows it for HIP devices).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceMeta {
    pub name: String,
    pub vendor: u8,
    pub total_bytes: u64,
    /// The runtime says the GPU is integrated (an APU); `None`: not asked or no answer.
    pub integrated: Option<bool>,
    /// Physical memory the OS of the process managed.
    pub host_memory_bytes: Option<u64>,
    /// Which physical device the ordinal was (unknown in captures made before the shim
    /// recorded it).
    pub identity: memwatch_wire::DeviceIdentity,
}

/// What the capture says about one process image (see [`ProcKey`]). A pid with several
/// `process_start`s is split into images by time after loading (`images`): the frames
/// of one pid may arrive out of order (`memwatch run` reads each connection on its own
/// thread, so the new image's first frames can precede the old image's last ones).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessMeta {
    pub pid: u32,
    /// Which image of the pid (0 = first).
    pub image: u32,
    /// A later image of the same pid follows: this one ended with an exec, which
    /// released its memory.
    pub ended_by_exec: bool,
    pub ppid: u32,
    pub argv: Vec<String>,
    pub hostname: String,
    pub shim_version: String,
    /// Earliest monotonic anchor of the pid's `process_start`s (`None`: events only).
    pub mono_anchor_ns: Option<u64>,
    pub wall_anchor_unix_ns: u64,
    /// Number of `process_start` frames for this image (1; 0 when it was lost).
    pub starts: u32,
    pub end_ts: Option<u64>,
    /// The status of the last `process_end`; `None` without one, or when it carried no
    /// known status (`end_ts` tells the two apart).
    pub exit_code: Option<i32>,
    /// Largest cumulative dropped-events counter the process reported.
    pub dropped_events: u64,
    pub markers: u64,
    pub devices: BTreeMap<i32, DeviceMeta>,
    /// Failed calls in file order (at most [`MAX_FAILURES_KEPT`]).
    pub failures: Vec<FailedCall>,
    /// All failed calls, including those not kept.
    pub failures_total: u64,
}

/// One damaged region of the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DamageReport {
    pub offset: u64,
    pub kind: String,
    pub bytes_lost: u64,
}

/// A whole capture, loaded.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    pub processes: BTreeMap<ProcKey, ProcessMeta>,
    /// (process image, device) of each stream index used by [`Ev::stream`].
    pub streams: Vec<(ProcKey, i32)>,
    /// Events in file order (not necessarily time order: shim threads flush separately).
    pub events: Vec<Ev>,
    /// Events whose kind this build does not know (skipped).
    pub unknown_events: u64,
    pub frames: u64,
    pub unknown_frames: u64,
    /// Device-level readings taken outside the processes (`device_sample` frames: amdgpu
    /// sysfs VRAM/GTT, ROCm SMI, NVML), in file order.
    pub device_samples: Vec<memwatch_wire::DeviceSample>,
    /// Devices and their processes read by memwatch's own sampler (`device_reading`
    /// frames: NVML, ROCm SMI), in file order; empty in captures made without it (read
    /// that as "not sampled", never as 0 bytes).
    pub device_readings: Vec<memwatch_wire::DeviceReading>,
    pub damage: Vec<DamageReport>,
    pub file_bytes: u64,
    /// Capture-level tags (see [`TAG_PREFIX`]).
    pub tags: BTreeMap<String, String>,
    /// Earliest event start.
    pub min_event_ts: Option<u64>,
    /// Sampled native stacks (`backtrace` frames), by the allocation they belong to:
    /// (stream, start time as in [`Ev::ts`], pointer) -> return addresses, innermost
    /// first.
    pub backtraces: std::collections::HashMap<(u32, u64, u64), Vec<u64>>,
    /// Loaded objects of each process image (`module_map` frames, merged).
    pub modules: BTreeMap<ProcKey, Vec<Module>>,
    /// PJRT records and the PJRT events in full (`crate::runtime` reads them), so one
    /// pass over the file serves both readers.
    pub pjrt: PjrtRecords,
    /// The physical handle each VMM mapping names (`cuMemMap`'s handle, which [`Ev`]
    /// does not keep), by (stream, time as in [`Ev::ts`], mapped address): the live set
    /// gives a released handle back at its last unmap. Only mappings are here.
    pub vmm_map_handles: std::collections::HashMap<(u32, u64, u64), u64>,
    /// The shim's pre-attach markers of a late attach (`memwatch attach`), by pid:
    /// (device the record names, text), in file order; read with
    /// [`memwatch_wire::pre_attach::fold`]. Empty for a capture that was no attach.
    pub pre_attach_markers: BTreeMap<u32, Vec<(i64, String)>>,
}

/// The PJRT part of a capture as read (raw CLOCK_MONOTONIC times).
#[derive(Debug, Default, Clone)]
pub struct PjrtRecords {
    pub executables: Vec<memwatch_wire::PjrtExecutable>,
    pub stats: Vec<memwatch_wire::PjrtMemoryStats>,
    /// Events with a PJRT API, in file order.
    pub events: Vec<Event>,
}

impl Loaded {
    /// Event `e` as [`crate::live::LiveSet`] reads it (its stream's process image and
    /// device, and the handle of a VMM mapping).
    pub fn mem_event(&self, e: &Ev) -> crate::live::MemEvent {
        self.context().mem_event(e)
    }

    /// What reading an event as the live set does needs of the capture.
    pub fn context(&self) -> EventContext<'_> {
        EventContext {
            streams: &self.streams,
            vmm_map_handles: &self.vmm_map_handles,
        }
    }

    /// The capture's time origin: the earliest `process_start` anchor or the earliest
    /// event, whichever is earlier (a shim may announce itself at its first flush, after
    /// its first events).
    pub fn base_ns(&self) -> u64 {
        let anchors = self
            .processes
            .values()
            .filter_map(|p| p.mono_anchor_ns)
            .min();
        match (anchors, self.min_event_ts) {
            (Some(a), Some(e)) => a.min(e),
            (a, e) => a.or(e).unwrap_or(0),
        }
    }
}

/// What an event is read with besides itself: its stream's (process image, device) and
/// the handles of VMM mappings (of a [`Loaded`], or of one being built).
#[derive(Debug, Clone, Copy)]
pub struct EventContext<'a> {
    pub streams: &'a [(ProcKey, i32)],
    pub vmm_map_handles: &'a std::collections::HashMap<(u32, u64, u64), u64>,
}

impl EventContext<'_> {
    /// Event `e` as [`crate::live::LiveSet`] reads it.
    pub fn mem_event(&self, e: &Ev) -> crate::live::MemEvent {
        let (proc, device) = self.streams[e.stream as usize];
        let (kind, mem) = (e.kind(), e.mem_kind());
        let handle = if crate::live::is_vmm_map(kind, mem) {
            self.vmm_map_handles.get(&(e.stream, e.ts, e.ptr)).copied()
        } else {
            None
        };
        crate::live::MemEvent {
            proc,
            device,
            kind,
            mem,
            api: e.api(),
            ptr: e.ptr,
            size: e.size,
            handle,
        }
    }
}

/// Per-pid records kept while loading, for splitting exec'd images afterwards.
#[derive(Default)]
pub(super) struct PidRecords {
    pub starts: Vec<ProcessStart>,
    pub ends: Vec<ProcessEnd>,
    /// (ts, cumulative dropped total).
    pub drops: Vec<(u64, u64)>,
    pub marker_ts: Vec<u64>,
}

/// Builds a [`Loaded`] from records in file order: [`load_reader`] feeds it a file's
/// records, `memwatch run` the records its capture sink writes, as it writes them
/// (`super::fold`), so both give the same [`Loaded`].
pub struct LoadBuilder {
    loaded: Loaded,
    /// (Touched by every event: a fast hash, and the last one looked up.)
    stream_index: foldhash::HashMap<(ProcKey, i32), u32>,
    last_stream: Option<((u32, i32), u32)>,
    /// The latest start time seen per (pid, tid). A thread's events reach the file in
    /// the order it made the calls, but the shim converts TSC ticks to CLOCK_MONOTONIC
    /// per flush, and on a loaded (virtual) machine two flushes' conversions can differ
    /// by microseconds: a free and the thread's next allocation could then swap places
    /// in time order. Clamping each thread's times to be non-decreasing keeps its calls
    /// in the order it made them. With it: how many events had been read when the
    /// thread's latest one was.
    thread_last_ts: foldhash::HashMap<(u32, u32), (u64, u64)>,
    /// Events read (of known kinds).
    events_read: u64,
    /// Backtraces whose allocation event was not read yet (the shim writes them just
    /// before it): (pid, tid, ts_ns, ptr) -> frames.
    pending_backtraces: std::collections::HashMap<(u32, u32, u64, u64), Vec<u64>>,
    records: std::collections::HashMap<u32, PidRecords>,
    module_maps: Vec<ModuleMap>,
}

impl LoadBuilder {
    /// An empty capture read from `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            loaded: Loaded {
                path: path.to_path_buf(),
                ..Loaded::default()
            },
            stream_index: Default::default(),
            last_stream: None,
            thread_last_ts: Default::default(),
            events_read: 0,
            pending_backtraces: Default::default(),
            records: Default::default(),
            module_maps: Vec::new(),
        }
    }

    /// The events read so far, in file order; a caller may take them out as they come
    /// (`super::fold` keeps them in time order) and hand them back to [`Self::finish`].
    pub fn events_mut(&mut self) -> &mut Vec<Ev> {
        &mut self.loaded.events
    }

    /// Each thread's latest event time so far (a thread's calls reach the file in the
    /// order it made them: its next events are not older, clock jitter aside), and how
    /// many events had been read when its latest one was.
    pub fn thread_times(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.thread_last_ts.values().copied()
    }

    /// Events read so far (of kinds this build knows).
    pub fn events_read(&self) -> u64 {
        self.events_read
    }

    /// The (process image, device) of each stream index so far (image 0 for every pid
    /// until [`Self::finish`] splits exec'd pids).
    pub fn streams(&self) -> &[(ProcKey, i32)] {
        &self.loaded.streams
    }

    /// What reading the events so far needs of the capture (streams, VMM handles).
    pub fn context(&self) -> EventContext<'_> {
        self.loaded.context()
    }

    /// The PJRT allocator's memory samples so far.
    pub fn pjrt_stats(&self) -> &[memwatch_wire::PjrtMemoryStats] {
        &self.loaded.pjrt.stats
    }

    /// The capture, with `events` as its event list and the reader's figures of the
    /// file. Also says whether a pid was split into exec'd images (its events' stream
    /// indices changed).
    pub fn finish(mut self, events: Vec<Ev>, file: FileFacts) -> (Loaded, bool) {
        self.loaded.events = events;
        let split = super::images::split(&mut self.loaded, &self.records, self.module_maps);
        self.loaded.frames = file.frames;
        self.loaded.unknown_frames += file.unknown_frames;
        self.loaded.file_bytes = file.bytes;
        self.loaded.damage = file.damage;
        (self.loaded, split)
    }

    /// While loading, every frame of a pid goes to image 0; `images::split` divides
    /// pids with several `process_start`s afterwards.
    fn key(&mut self, pid: u32) -> ProcKey {
        ProcKey { pid, image: 0 }
    }

    fn process(&mut self, pid: u32) -> &mut ProcessMeta {
        let key = self.key(pid);
        self.loaded
            .processes
            .entry(key)
            .or_insert_with(|| ProcessMeta {
                pid,
                image: key.image,
                ..ProcessMeta::default()
            })
    }

    fn stream(&mut self, pid: u32, device: i32) -> u32 {
        // A frame's events mostly come from one thread on one device.
        if let Some((k, i)) = self.last_stream {
            if k == (pid, device) {
                return i;
            }
        }
        let key = self.key(pid);
        if let Some(&i) = self.stream_index.get(&(key, device)) {
            self.last_stream = Some(((pid, device), i));
            return i;
        }
        // Every pid with events is reported, even when its process_start was lost.
        self.process(pid);
        let streams = &mut self.loaded.streams;
        *self.stream_index.entry((key, device)).or_insert_with(|| {
            streams.push((key, device));
            (streams.len() - 1) as u32
        })
    }

    fn event(&mut self, e: &Event) {
        let Some(kind) = e.kind() else {
            self.loaded.unknown_events += 1;
            return;
        };
        let stream = self.stream(e.pid, e.device);
        self.events_read += 1;
        let (last, seen) = self.thread_last_ts.entry((e.pid, e.tid)).or_insert((0, 0));
        *seen = self.events_read;
        // Clamp only conversion jitter; an event far older than the thread's last one
        // came from frames written out of order (e.g. the image before an exec, whose
        // main thread has the same tid) and keeps its time.
        let ts = if e.ts_ns.saturating_add(CLAMP_WINDOW_NS) < *last {
            e.ts_ns
        } else {
            e.ts_ns.max(*last)
        };
        *last = (*last).max(ts);
        let dur = if kind == EventKind::ApiSpan && e.duration_ns == 0 {
            e.aux
        } else {
            e.duration_ns
        };
        if crate::runtime::load::is_pjrt(e) {
            self.loaded.pjrt.events.push(*e);
        }
        if matches!(kind, EventKind::AllocFailed | EventKind::FreeFailed) {
            let failure = FailedCall {
                pid: e.pid,
                tid: e.tid,
                device: e.device,
                ts,
                api: e.api(),
                kind,
                mem_kind: e.mem_kind,
                size: e.size,
                result: e.result,
            };
            let p = self.process(e.pid);
            p.failures_total += 1;
            if p.failures.len() < MAX_FAILURES_KEPT {
                p.failures.push(failure);
            }
        }
        if self.loaded.min_event_ts.is_none_or(|t| ts < t) {
            self.loaded.min_event_ts = Some(ts);
        }
        if kind == EventKind::Alloc && !self.pending_backtraces.is_empty() {
            if let Some(frames) = self
                .pending_backtraces
                .remove(&(e.pid, e.tid, e.ts_ns, e.ptr))
            {
                self.loaded.backtraces.insert((stream, ts, e.ptr), frames);
            }
        }
        if crate::live::is_vmm_map(Some(kind), e.mem_kind()) {
            self.loaded
                .vmm_map_handles
                .insert((stream, ts, e.ptr), e.aux);
        }
        self.loaded.events.push(Ev {
            ts,
            dur,
            ptr: e.ptr,
            size: e.size,
            stream,
            api: e.api,
            kind: e.kind,
            mem: e.mem_kind,
        });
    }

    /// Folds one record (the next in file order).
    pub fn record(&mut self, record: &Record) {
        match record {
            Record::ProcessStart(s) => {
                self.records
                    .entry(s.pid)
                    .or_default()
                    .starts
                    .push(s.clone());
                let p = self.process(s.pid);
                p.starts += 1;
                p.ppid = s.ppid;
                p.argv.clone_from(&s.argv);
                p.hostname.clone_from(&s.hostname);
                p.shim_version.clone_from(&s.shim_version);
                if p.mono_anchor_ns.is_none_or(|a| s.mono_anchor_ns < a) {
                    p.mono_anchor_ns = Some(s.mono_anchor_ns);
                    p.wall_anchor_unix_ns = s.wall_anchor_unix_ns;
                }
            }
            Record::Events(events) => {
                for e in events {
                    self.event(e);
                }
            }
            Record::DeviceInfo(d) => {
                self.stream(d.pid, d.device);
                let meta = self.process(d.pid).devices.entry(d.device).or_default();
                meta.name.clone_from(&d.name);
                meta.vendor = d.vendor;
                meta.total_bytes = d.total_bytes;
                meta.identity = d.identity().merged(&meta.identity);
            }
            Record::Marker(m) => {
                if let Some(tag) = m.text.strip_prefix(TAG_PREFIX) {
                    let (k, v) = tag.split_once('=').unwrap_or((tag, ""));
                    self.loaded.tags.insert(k.to_string(), v.to_string());
                } else if let Some(Ok(props)) = DeviceProps::from_marker(m) {
                    let meta = self.process(m.pid).devices.entry(m.device).or_default();
                    meta.integrated = props.integrated.or(meta.integrated);
                    meta.host_memory_bytes = props.host_memory_bytes.or(meta.host_memory_bytes);
                } else {
                    if memwatch_wire::pre_attach::is_pre_attach(&m.text) {
                        self.loaded
                            .pre_attach_markers
                            .entry(m.pid)
                            .or_default()
                            .push((i64::from(m.device), m.text.clone()));
                    }
                    self.records
                        .entry(m.pid)
                        .or_default()
                        .marker_ts
                        .push(m.ts_ns);
                    self.process(m.pid).markers += 1
                }
            }
            Record::Dropped(d) => {
                self.records
                    .entry(d.pid)
                    .or_default()
                    .drops
                    .push((d.ts_ns, d.dropped_total));
                let p = self.process(d.pid);
                p.dropped_events = p.dropped_events.max(d.dropped_total);
            }
            Record::ProcessEnd(e) => {
                self.records.entry(e.pid).or_default().ends.push(*e);
                let p = self.process(e.pid);
                p.end_ts = Some(p.end_ts.map_or(e.ts_ns, |t| t.max(e.ts_ns)));
                p.exit_code = e.known_exit_code();
            }
            Record::DeviceSample(d) => self.loaded.device_samples.push(d.clone()),
            Record::DeviceReading(d) => self.loaded.device_readings.push(d.clone()),
            // PJRT executables and allocator statistics: read by `analysis::runtime`.
            Record::PjrtExecutable(x) => self.loaded.pjrt.executables.push(x.clone()),
            Record::PjrtMemoryStats(x) => self.loaded.pjrt.stats.push(*x),
            Record::Backtrace(b) => {
                self.pending_backtraces
                    .insert((b.pid, b.tid, b.ts_ns, b.ptr), b.frames.clone());
            }
            Record::ModuleMap(m) => self.module_maps.push(m.clone()),
            Record::Unknown { .. } => self.loaded.unknown_frames += 1,
        }
    }
}

/// Loads a capture from any reader. `progress` is called now and then with the bytes
/// consumed so far.
pub fn load_reader<R: Read>(
    src: R,
    path: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Loaded, CaptureError> {
    let mut reader = FrameReader::new(src, ReadMode::Salvage).map_err(|e| match e {
        WireError::Io(error) => CaptureError::Io {
            path: path.to_path_buf(),
            error,
        },
        other => CaptureError::NotACapture {
            path: path.to_path_buf(),
            error: other,
        },
    })?;
    let mut b = LoadBuilder::new(path);
    let mut last_progress = 0u64;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => b.record(&record),
            Ok(None) => break,
            Err(WireError::Io(error)) => {
                return Err(CaptureError::Io {
                    path: path.to_path_buf(),
                    error,
                })
            }
            // Salvage mode reports damage instead of failing; any other error is a bug
            // in the reader's contract, surfaced as a read error at that offset.
            Err(other) => {
                return Err(CaptureError::Read {
                    path: path.to_path_buf(),
                    offset: reader.offset(),
                    message: other.to_string(),
                })
            }
        }
        if reader.offset() - last_progress >= 8 << 20 {
            last_progress = reader.offset();
            progress(last_progress);
        }
    }
    progress(reader.offset());
    let file = FileFacts {
        frames: reader.frames_read(),
        unknown_frames: reader.unknown_frames(),
        bytes: reader.offset(),
        damage: reader
            .damage()
            .iter()
            .map(|d| DamageReport {
                offset: d.offset,
                kind: d.kind.to_string(),
                bytes_lost: d.bytes_skipped,
            })
            .collect(),
    };
    let events = std::mem::take(b.events_mut());
    Ok(b.finish(events, file).0)
}

/// What reading a capture file tells beyond its records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileFacts {
    /// Frames read, of known and unknown types.
    pub frames: u64,
    /// Frames of types this build does not know (skipped).
    pub unknown_frames: u64,
    /// The file's length, preamble included.
    pub bytes: u64,
    /// Damaged regions.
    pub damage: Vec<DamageReport>,
}

/// Opens and loads a capture file.
pub fn load_path(path: &Path, progress: &mut dyn FnMut(u64)) -> Result<Loaded, CaptureError> {
    let file = std::fs::File::open(path).map_err(|error| CaptureError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    load_reader(file, path, progress)
}
