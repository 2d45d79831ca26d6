//! A snapshot as capture records (`memwatch import SNAPSHOT.pickle`), so stores and
//! reports treat it like a capture:
//!
//! - segments are driver-level device memory: `cudaMalloc`/`cudaFree` events
//!   (`device` memory; expandable segments' pages `cuMemCreate`/`cuMemRelease`,
//!   `vmm_physical`), so device live bytes are `memory_reserved()`;
//! - blocks are `torch:alloc`/`torch:free` events of memory kind `torch_block` (inside
//!   the segments, not counted again), sized as handed out, freed when the caller
//!   released them, so their live bytes are `memory_allocated()`; `aux` is the block's
//!   stack number + 1 (0: none);
//! - OOMs are failed `torch:alloc` events (`size` requested, result 2 =
//!   `cudaErrorMemoryAllocation`, `aux` the free device bytes);
//! - each stack, before the first event that names it, is a marker
//!   `torch.stack N` followed by one frame per line (`name<TAB>file:line`, innermost
//!   first); `external_annotations` are markers `torch.annotation STAGE NAME`;
//! - the settings and the file are `memwatch.tag` markers (`source=pytorch-snapshot`,
//!   `torch.expandable_segments=…`, …);
//! - the segments and blocks at the dump are `torch.segment` markers
//!   ([`segment_marker`](super::segment_marker)) after each device's events, at its last
//!   entry's time. No device record: a snapshot names device ordinals only (no name, no
//!   memory size), and the node an import is stored under is no machine of it.
//!
//! The state before the trace's first entry comes first, at that entry's time. One
//! process (pid 0: the snapshot does not record it), devices one after the other, each
//! in time order. Times are PyTorch's clock (Unix ns), used as the monotonic clock too.

use memwatch_wire::{Api, Event, EventKind, Marker, MemKind, ProcessStart, Record};

use super::model::{Action, Annotation};
use super::replay::{self, Observer, ReplayError, Sim, Step};
use super::scan::{Scan, Trace};
use super::segment_marker::segment_markers;
use super::stacks::{Frame, StackId};
use crate::capture::load::TAG_PREFIX;

/// An event's kind, memory kind and API.
type What = (EventKind, MemKind, Api);

/// The first word of a stack's marker.
const STACK_MARKER: &str = "torch.stack ";

/// A `torch.stack N` marker read back: the stack's number (events' `aux` - 1) and its
/// frames, innermost first (a frame cut off by the marker's length is not among them).
pub fn parse_stack_marker(text: &str) -> Option<(u32, Vec<Frame>)> {
    let mut lines = text.lines();
    let n = lines
        .next()?
        .strip_prefix(STACK_MARKER)?
        .trim()
        .parse()
        .ok()?;
    let frames = lines
        .filter_map(|l| {
            let (name, place) = l.split_once('\t')?;
            let (file, line) = place.rsplit_once(':')?;
            Some(Frame {
                name: name.to_string(),
                filename: file.to_string(),
                line: line.parse().ok()?,
            })
        })
        .collect();
    Some((n, frames))
}

/// Events per events record.
const BATCH: usize = 8192;
/// Longest marker text the wire carries.
const MAX_TEXT: usize = 65_000;

/// What a conversion produced.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConvertSummary {
    pub records: u64,
    pub events: u64,
    pub stacks: u64,
    pub annotations: u64,
}

#[derive(Debug)]
pub enum ConvertError<E> {
    Io(std::io::Error),
    Emit(E),
}

/// Emits the records of `scan`, in order, into `emit`. `hostname` goes into the
/// process record.
pub fn to_records<E>(
    scan: &Scan,
    hostname: &str,
    emit: &mut dyn FnMut(Record) -> Result<(), E>,
) -> Result<ConvertSummary, ConvertError<E>> {
    let start_us = replay::start_time_us(scan).unwrap_or(0);
    let mut c = Converter {
        scan,
        emit,
        events: Vec::with_capacity(BATCH),
        sent: vec![false; scan.stacks.stack_count()],
        annotations: {
            let mut a: Vec<&Annotation> = scan.annotations.iter().collect();
            a.sort_by_key(|a| (a.device, a.time_us));
            a
        },
        next_annotation: 0,
        device: 0,
        start_us,
        last_us: start_us,
        summary: ConvertSummary::default(),
    };
    let name = std::path::Path::new(&scan.file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| scan.file.clone());
    let entries: u64 = scan.traces.iter().map(|t| t.range.len).sum();
    c.record(Record::ProcessStart(ProcessStart {
        pid: 0,
        ppid: 0,
        mono_anchor_ns: ns(start_us),
        wall_anchor_unix_ns: ns(start_us),
        shim_version: "memwatch import (PyTorch memory snapshot)".into(),
        hostname: hostname.to_string(),
        argv: vec!["pytorch-memory-snapshot".into(), name.clone()],
        pid_ns: None,
    }))
    .map_err(ConvertError::Emit)?;
    let s = &scan.settings;
    let mut tags = vec![
        ("source".to_string(), "pytorch-snapshot".to_string()),
        ("snapshot".into(), name),
        ("snapshot_bytes".into(), scan.file_bytes.to_string()),
        ("torch.trace_entries".into(), entries.to_string()),
    ];
    if let Some(e) = s.expandable_segments {
        tags.push(("torch.expandable_segments".into(), e.to_string()));
    }
    if let Some(conf) = s.conf.as_ref().filter(|c| !c.is_empty()) {
        tags.push(("torch.PYTORCH_CUDA_ALLOC_CONF".into(), conf.clone()));
    }
    if let Some(m) = s.max_split_size {
        tags.push(("torch.max_split_size".into(), m.to_string()));
    }
    for (k, v) in tags {
        c.marker(start_us, -1, format!("{TAG_PREFIX}{k}={v}"))
            .map_err(ConvertError::Emit)?;
    }
    replay::replay(scan, &mut c).map_err(|e| match e {
        ReplayError::Io(e) => ConvertError::Io(e),
        ReplayError::Observer(e) => ConvertError::Emit(e),
    })?;
    // Annotations of devices without state.
    c.annotations_until(i32::MAX, i64::MAX)
        .map_err(ConvertError::Emit)?;
    c.flush().map_err(ConvertError::Emit)?;
    Ok(c.summary)
}

fn ns(us: i64) -> u64 {
    u64::try_from(us).unwrap_or(0).saturating_mul(1000)
}

struct Converter<'a, E> {
    scan: &'a Scan,
    emit: &'a mut dyn FnMut(Record) -> Result<(), E>,
    events: Vec<Event>,
    sent: Vec<bool>,
    annotations: Vec<&'a Annotation>,
    next_annotation: usize,
    device: i32,
    /// The snapshot's first trace time, and the current device's last entry's.
    start_us: i64,
    last_us: i64,
    summary: ConvertSummary,
}

impl<E> Converter<'_, E> {
    fn record(&mut self, r: Record) -> Result<(), E> {
        self.summary.records += 1;
        (self.emit)(r)
    }

    fn flush(&mut self) -> Result<(), E> {
        if self.events.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.events, Vec::with_capacity(BATCH));
        self.summary.events += batch.len() as u64;
        self.record(Record::Events(batch))
    }

    fn marker(&mut self, time_us: i64, device: i32, text: String) -> Result<(), E> {
        self.flush()?;
        self.record(Record::Marker(Marker {
            pid: 0,
            tid: 0,
            ts_ns: ns(time_us),
            device,
            text,
        }))
    }

    /// Annotation markers of devices up to `device` and times up to `time_us`.
    fn annotations_until(&mut self, device: i32, time_us: i64) -> Result<(), E> {
        while let Some(a) = self.annotations.get(self.next_annotation).copied() {
            if (a.device, a.time_us) > (device, time_us) {
                break;
            }
            self.next_annotation += 1;
            self.summary.annotations += 1;
            let text = format!("torch.annotation {} {}", a.stage, a.name);
            self.marker(a.time_us, a.device, text)?;
        }
        Ok(())
    }

    /// The stack's marker, the first time it is named; the value for `aux`.
    fn stack(&mut self, id: StackId, time_us: i64) -> Result<u64, E> {
        if !id.is_known() {
            return Ok(0);
        }
        let i = id.0 as usize;
        if !self.sent.get(i).copied().unwrap_or(true) {
            self.sent[i] = true;
            self.summary.stacks += 1;
            let mut text = format!("{STACK_MARKER}{}", id.0);
            let frames: Vec<_> = self.scan.stacks.frames(id).collect();
            for (n, f) in frames.iter().enumerate() {
                let line = format!("\n{}\t{}:{}", f.name, f.filename, f.line);
                if text.len() + line.len() > MAX_TEXT - 40 {
                    text.push_str(&format!("\n… {} more frames", frames.len() - n));
                    break;
                }
                text.push_str(&line);
            }
            self.marker(time_us, self.device, text)?;
        }
        Ok(u64::from(id.0) + 1)
    }

    /// The device's segments at the dump, each after the markers of its stacks.
    fn segments(&mut self, device: i32) -> Result<(), E> {
        let scan = self.scan;
        let at = self.last_us;
        for seg in scan.segments.iter().filter(|s| s.device == device) {
            self.stack(seg.stack, at)?;
            for b in &seg.blocks {
                self.stack(b.stack, at)?;
            }
            for text in segment_markers(seg, MAX_TEXT) {
                self.marker(at, device, text)?;
            }
        }
        Ok(())
    }

    /// One event of `what` (kind, memory kind, API) at the step's time.
    fn event(&mut self, s: &Step, what: What, ptr: u64, size: u64, aux: u64) -> Result<(), E> {
        let (kind, mem, api) = what;
        self.events.push(Event {
            ts_ns: ns(s.time_us),
            ptr,
            size,
            stream: s.stream,
            aux,
            duration_ns: 0,
            pid: 0,
            tid: 0,
            result: if kind == EventKind::AllocFailed { 2 } else { 0 },
            device: self.device,
            kind: kind as u8,
            mem_kind: mem as u8,
            api: api as u16,
        });
        if self.events.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }
}

impl<E> Observer for Converter<'_, E> {
    type Error = E;

    fn device_start(&mut self, sim: &Sim, _: Option<&Trace>) -> Result<(), E> {
        self.device = sim.device;
        self.last_us = self.start_us;
        Ok(())
    }

    fn after(&mut self, _sim: &Sim, s: &Step) -> Result<(), E> {
        self.last_us = self.last_us.max(s.time_us);
        if s.ignored {
            return Ok(());
        }
        self.annotations_until(self.device, s.time_us)?;
        use EventKind::{Alloc, AllocFailed, Free};
        match s.action {
            Action::SegmentAlloc => {
                let aux = self.stack(s.stack, s.time_us)?;
                self.event(
                    s,
                    (Alloc, MemKind::Device, Api::CudaMalloc),
                    s.addr,
                    s.size,
                    aux,
                )
            }
            Action::SegmentFree => {
                self.event(s, (Free, MemKind::Device, Api::CudaFree), s.addr, s.size, 0)
            }
            Action::SegmentMap => {
                let aux = self.stack(s.stack, s.time_us)?;
                self.event(
                    s,
                    (Alloc, MemKind::VmmPhysical, Api::CuMemCreate),
                    s.addr,
                    s.size,
                    aux,
                )
            }
            Action::SegmentUnmap => {
                for &(a, n) in &s.unmapped {
                    self.event(s, (Free, MemKind::VmmPhysical, Api::CuMemRelease), a, n, 0)?;
                }
                for &(a, n) in &s.remapped {
                    self.event(s, (Alloc, MemKind::VmmPhysical, Api::CuMemCreate), a, n, 0)?;
                }
                Ok(())
            }
            Action::Alloc => {
                let aux = self.stack(s.stack, s.time_us)?;
                self.event(
                    s,
                    (Alloc, MemKind::TorchBlock, Api::TorchAlloc),
                    s.addr,
                    s.size,
                    aux,
                )
            }
            Action::FreeRequested => self.event(
                s,
                (Free, MemKind::TorchBlock, Api::TorchFree),
                s.addr,
                s.size,
                0,
            ),
            Action::Oom => {
                self.stack(s.stack, s.time_us)?;
                self.event(
                    s,
                    (AllocFailed, MemKind::TorchBlock, Api::TorchAlloc),
                    0,
                    s.requested,
                    s.device_free,
                )
            }
            Action::FreeCompleted | Action::Snapshot => Ok(()),
        }
    }

    fn device_end(&mut self, sim: &Sim, _: &replay::EndCheck) -> Result<(), E> {
        self.annotations_until(sim.device, i64::MAX)?;
        self.flush()?;
        self.segments(sim.device)
    }
}
