//! Allocation traces: the input of every allocator model.
//!
//! Owns the in-memory [`Trace`] (alloc/free events with dense buffer slots) and its three
//! readers: the JSON-lines interchange format of DESIGN.md, the JSON documents written by
//! `testdata/h200/bfc/bfc_validate.py` (ground-truth runs of the real allocator), and
//! memwatch capture files (`.mwcap`, via `memwatch-wire`'s `FrameReader`). It does not
//! replay anything (see `replay`) and does no file-system policy beyond reading the bytes
//! it is handed.

use std::collections::HashMap;
use std::io::{BufRead, Read};

use memwatch_wire::{EventKind, FrameReader, MemKind, ReadMode, Record};
use serde::Deserialize;

/// One trace event. Buffers live in dense slots (`0..Trace::slots`), reused once a
/// buffer is freed, so a replay keeps its live set in a small vector (as many entries as
/// buffers are ever live at once, which keeps it in cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes for buffer `slot`.
    Alloc { slot: u32, size: u64 },
    /// Release buffer `slot`.
    Free { slot: u32 },
}

/// Ground truth recorded next to an event (present in `bfc_validate.py` documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Whether the real allocation succeeded.
    pub ok: bool,
    /// The real allocator's `bytes_in_use` after the event.
    pub bytes_in_use: u64,
    /// The real allocator's `largest_free_block_bytes` after the event.
    pub largest_free_block_bytes: u64,
}

/// Where a trace came from and what it recorded about its run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceMeta {
    /// `jsonl`, `bfc_validate` or `mwcap`.
    pub format: &'static str,
    /// Pool limit the recording allocator ran with (`bytes_limit`), when recorded; for an
    /// OOM dump, the pool it had reserved at the failure (the sum of its regions).
    pub bytes_limit: Option<u64>,
    /// For an OOM dump: the limit its `Stats:` block states, which a growing pool may not
    /// have reached yet.
    pub stated_limit: Option<u64>,
    /// Whether the recording run preallocated its pool, when recorded.
    pub preallocate: Option<bool>,
    /// Index of the event that failed in the recording run, when recorded.
    pub oom_step: Option<usize>,
    /// Device total bytes, when the source states it (capture `DeviceInfo`).
    pub device_total_bytes: Option<u64>,
    /// Device name, when the source states it.
    pub device_name: Option<String>,
    /// What a capture could not deliver: damaged stretches the reader skipped, and
    /// events the shim dropped (full ring). A replay of such a trace misses allocations.
    pub gaps: CaptureGaps,
}

/// Losses in a capture that a replay cannot see past.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CaptureGaps {
    /// Damaged regions skipped (cut off, bad checksum, bad length, undecodable).
    pub damaged_regions: usize,
    /// Bytes skipped in those regions.
    pub damaged_bytes: u64,
    /// Byte offset of the first damaged region.
    pub first_damage_offset: Option<u64>,
    /// Events the shims reported dropped (the largest `dropped_total` per process).
    pub dropped_events: u64,
}

impl CaptureGaps {
    /// Whether anything was lost.
    pub fn any(&self) -> bool {
        self.damaged_regions > 0 || self.dropped_events > 0
    }

    /// One sentence for a warning, or None when nothing was lost.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.damaged_regions > 0 {
            parts.push(format!(
                "{} damaged region{} ({} bytes, the first at byte {}) skipped",
                self.damaged_regions,
                if self.damaged_regions == 1 { "" } else { "s" },
                self.damaged_bytes,
                self.first_damage_offset.unwrap_or(0)
            ));
        }
        if self.dropped_events > 0 {
            parts.push(format!(
                "{} event{} dropped by the shim",
                self.dropped_events,
                if self.dropped_events == 1 { "" } else { "s" }
            ));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "the capture is incomplete: {}; allocations and frees in the gaps are missing \
                 from the replay, so its figures may be too low (lost allocations) or too high \
                 (lost frees)",
                parts.join(", ")
            )
        })
    }
}

/// A whole allocation trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Events in order.
    pub ops: Vec<TraceOp>,
    /// Number of slots (the most buffers live at once).
    pub slot_count: usize,
    /// Original buffer id of each allocation, in order (the `id` field, or a capture's
    /// allocation number).
    pub alloc_ids: Vec<u64>,
    /// Tags (`tag` field) by allocation number, for the allocations that have one.
    pub alloc_tags: HashMap<usize, String>,
    /// Ground truth per event, when the source recorded it (same length as `ops`).
    pub observed: Option<Vec<Observed>>,
    /// Provenance.
    pub meta: TraceMeta,
}

impl Trace {
    /// Number of buffer slots (the most buffers live at once).
    pub fn slots(&self) -> usize {
        self.slot_count
    }

    /// Number of allocations.
    pub fn buffers(&self) -> usize {
        self.alloc_ids.len()
    }

    /// Tag of allocation number `n`.
    pub fn tag(&self, n: usize) -> Option<&str> {
        self.alloc_tags.get(&n).map(String::as_str)
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the trace has no events.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Builds a trace from (id, Some(size)) = alloc / (id, None) = free pairs; used by
    /// tests, benchmarks and generators.
    pub fn from_pairs<I: IntoIterator<Item = (u64, Option<u64>)>>(
        pairs: I,
    ) -> Result<Self, TraceError> {
        let mut b = Builder::default();
        for (i, (id, size)) in pairs.into_iter().enumerate() {
            match size {
                Some(size) => b.alloc(id, size, None, i + 1)?,
                None => b.free(id, i + 1)?,
            }
        }
        Ok(b.finish("pairs"))
    }
}

/// Why a trace could not be read. Line numbers are 1-based; `line` is the event index + 1
/// for sources without lines.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: not valid JSON: {msg}")]
    Json { line: usize, msg: String },
    #[error("line {line}: field `{field}`: {msg}")]
    Field {
        line: usize,
        field: &'static str,
        msg: String,
    },
    #[error("line {line}: unknown op {op:?} (expected \"alloc\" or \"free\")")]
    UnknownOp { line: usize, op: String },
    #[error("line {line}: buffer id {id} is allocated again while still live")]
    DoubleAlloc { line: usize, id: u64 },
    #[error("line {line}: free of buffer id {id}, which is not live")]
    FreeNotLive { line: usize, id: u64 },
    #[error("the trace has no events")]
    Empty,
    #[error(
        "the log has no BFC out-of-memory dump (no `ran out of memory` report with chunk lines)"
    )]
    NoOomDump,
    #[error("capture: {0}")]
    Capture(String),
    #[error("capture has events of several devices ({devices}); pick one with --trace-device")]
    SeveralDevices { devices: String },
    #[error("the trace has events of several devices ({devices}); pick one with --trace-device")]
    SeveralTraceDevices { devices: String },
    #[error("line {line}: no `device`, while line {named} names one (name the device on every line, or on none)")]
    DeviceOnSomeLines { line: usize, named: usize },
    #[error("--trace-device {device}: no event of that device (the trace has {present})")]
    NoSuchDevice { device: i32, present: String },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The largest single allocation a trace may hold: 2^56 bytes (64 PiB), far beyond any
/// device, and small enough that allocator arithmetic (rounding, doubling region sizes,
/// sums over live buffers) cannot overflow.
pub const MAX_ALLOC_BYTES: u64 = 1 << 56;

/// The largest pool (capacity, `bytes_limit`) a replay models: 2^60 bytes (1 EiB), so that
/// a pool fits in the simulated 64-bit address space with room for its regions.
pub const MAX_POOL_BYTES: u64 = 1 << 60;

/// Incremental trace builder: assigns dense slots and checks alloc/free pairing.
#[derive(Default)]
struct Builder {
    ops: Vec<TraceOp>,
    slot_count: u32,
    free_slots: Vec<u32>,
    alloc_ids: Vec<u64>,
    alloc_tags: HashMap<usize, String>,
    live: HashMap<u64, u32>,
}

impl Builder {
    fn alloc(
        &mut self,
        id: u64,
        size: u64,
        tag: Option<String>,
        line: usize,
    ) -> Result<(), TraceError> {
        if self.live.contains_key(&id) {
            return Err(TraceError::DoubleAlloc { line, id });
        }
        if size > MAX_ALLOC_BYTES {
            return Err(TraceError::Field {
                line,
                field: "size",
                msg: format!(
                    "{size} bytes is larger than any device (the limit is 2^56 bytes, 64 PiB)"
                ),
            });
        }
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                let s = self.slot_count;
                self.slot_count = s.checked_add(1).ok_or(TraceError::Field {
                    line,
                    field: "id",
                    msg: "more than 4 billion live buffers".into(),
                })?;
                s
            }
        };
        if let Some(tag) = tag {
            self.alloc_tags.insert(self.alloc_ids.len(), tag);
        }
        self.alloc_ids.push(id);
        self.live.insert(id, slot);
        self.ops.push(TraceOp::Alloc { slot, size });
        Ok(())
    }

    fn free(&mut self, id: u64, line: usize) -> Result<(), TraceError> {
        match self.live.remove(&id) {
            Some(slot) => {
                self.ops.push(TraceOp::Free { slot });
                self.free_slots.push(slot);
                Ok(())
            }
            None => Err(TraceError::FreeNotLive { line, id }),
        }
    }

    fn finish(self, format: &'static str) -> Trace {
        Trace {
            ops: self.ops,
            slot_count: self.slot_count as usize,
            alloc_ids: self.alloc_ids,
            alloc_tags: self.alloc_tags,
            observed: None,
            meta: TraceMeta {
                format,
                ..Default::default()
            },
        }
    }
}

/// One JSON-lines event (DESIGN.md "Trace interchange").
#[derive(Deserialize)]
struct LineEvent {
    op: String,
    id: u64,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    device: Option<i32>,
}

/// Keeps the events of one device. Lines name their device on every line or on none; a
/// trace of several devices needs `device` (`--trace-device`), like a capture.
fn select_device(
    lines: Vec<(usize, LineEvent)>,
    device: Option<i32>,
) -> Result<Vec<(usize, LineEvent)>, TraceError> {
    let named = lines
        .iter()
        .find(|(_, e)| e.device.is_some())
        .map(|(n, _)| *n);
    let Some(named) = named else {
        return match device {
            None => Ok(lines),
            Some(d) => Err(TraceError::NoSuchDevice {
                device: d,
                present: "no `device` field".into(),
            }),
        };
    };
    if let Some((line, _)) = lines.iter().find(|(_, e)| e.device.is_none()) {
        return Err(TraceError::DeviceOnSomeLines { line: *line, named });
    }
    let want = pick_device(
        lines.iter().filter_map(|(_, e)| e.device),
        device,
        |devices| TraceError::SeveralTraceDevices { devices },
    )?;
    Ok(lines
        .into_iter()
        .filter(|(_, e)| e.device == Some(want))
        .collect())
}

/// The device whose events to replay, among those `present`: the one asked for (which
/// must be there, unless nothing is), else the only one; several without a choice are
/// `several(list)`, none is [`TraceError::Empty`].
fn pick_device(
    present: impl Iterator<Item = i32>,
    asked: Option<i32>,
    several: impl FnOnce(String) -> TraceError,
) -> Result<i32, TraceError> {
    let mut devices: Vec<i32> = present.collect();
    devices.sort_unstable();
    devices.dedup();
    let list = || {
        devices
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (asked, devices.as_slice()) {
        (Some(d), []) => Ok(d),
        (Some(d), _) if devices.contains(&d) => Ok(d),
        (Some(d), _) => Err(TraceError::NoSuchDevice {
            device: d,
            present: format!("device {}", list()),
        }),
        (None, []) => Err(TraceError::Empty),
        (None, [only]) => Ok(*only),
        (None, _) => Err(several(list())),
    }
}

/// Reads the JSON-lines interchange format (all of it, or the events of `device`). Blank
/// lines are skipped.
pub fn read_jsonl<R: BufRead>(src: R, device: Option<i32>) -> Result<Trace, TraceError> {
    let mut lines = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let line_no = i + 1;
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let ev: LineEvent = serde_json::from_str(text).map_err(|e| json_err(line_no, &e))?;
        lines.push((line_no, ev));
    }
    let mut b = Builder::default();
    for (line_no, ev) in select_device(lines, device)? {
        match ev.op.as_str() {
            "alloc" => {
                let size = ev.size.ok_or(TraceError::Field {
                    line: line_no,
                    field: "size",
                    msg: "missing (an alloc needs a size in bytes)".into(),
                })?;
                b.alloc(ev.id, size, ev.tag, line_no)?;
            }
            "free" => b.free(ev.id, line_no)?,
            other => {
                return Err(TraceError::UnknownOp {
                    line: line_no,
                    op: other.to_string(),
                })
            }
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(b.finish("jsonl"))
}

fn json_err(line: usize, e: &serde_json::Error) -> TraceError {
    let msg = e.to_string();
    // serde reports "missing field `size`" / "invalid type ..." as data errors: name the field.
    if e.is_data() {
        for field in ["op", "id", "size", "tag", "device"] {
            if msg.contains(&format!("`{field}`")) {
                return TraceError::Field { line, field, msg };
            }
        }
    }
    TraceError::Json { line, msg }
}

#[derive(Deserialize)]
struct ValidateDoc {
    #[serde(default)]
    env: HashMap<String, String>,
    #[serde(default)]
    initial_stats: HashMap<String, serde_json::Value>,
    #[serde(default)]
    oom_step: Option<usize>,
    steps: Vec<ValidateStep>,
}

#[derive(Deserialize)]
struct ValidateStep {
    op: String,
    id: u64,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    bytes_in_use: Option<u64>,
    #[serde(default)]
    largest_free_block_bytes: Option<u64>,
}

fn yes() -> bool {
    true
}

/// Whether a text is a `bfc_validate.py` output (one JSON object with `steps`) rather
/// than JSON lines (whose first line is an event object with `op`).
pub fn looks_like_validate_doc(text: &str) -> bool {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(first) {
        return m.contains_key("steps") && !m.contains_key("op");
    }
    // A pretty-printed document spans several lines.
    first.starts_with('{') && text.contains("\"steps\"") && !first.contains("\"op\"")
}

/// Reads a `bfc_validate.py` document: its steps become the trace, its recorded stats the
/// ground truth. A failed allocation stays in the trace (the replay must fail there too);
/// a later free of that id would be a bug of the recorder and is rejected.
pub fn read_validate_doc(text: &str) -> Result<Trace, TraceError> {
    let doc: ValidateDoc = serde_json::from_str(text).map_err(|e| TraceError::Json {
        line: e.line(),
        msg: e.to_string(),
    })?;
    let mut b = Builder::default();
    let mut observed = Vec::with_capacity(doc.steps.len());
    let mut all_observed = true;
    for (i, st) in doc.steps.iter().enumerate() {
        let line = i + 1;
        match st.op.as_str() {
            "alloc" => {
                let size = st.size.ok_or(TraceError::Field {
                    line,
                    field: "size",
                    msg: "missing in an alloc step".into(),
                })?;
                b.alloc(st.id, size, None, line)?;
                if !st.ok {
                    // The real allocation failed: the buffer never became live, but its
                    // slot stays taken (a replay that succeeds there would keep it).
                    b.live.remove(&st.id);
                }
            }
            "free" => b.free(st.id, line)?,
            other => {
                return Err(TraceError::UnknownOp {
                    line,
                    op: other.to_string(),
                })
            }
        }
        match (st.bytes_in_use, st.largest_free_block_bytes) {
            (Some(u), Some(l)) => observed.push(Observed {
                ok: st.ok,
                bytes_in_use: u,
                largest_free_block_bytes: l,
            }),
            _ => all_observed = false,
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    let mut t = b.finish("bfc_validate");
    if all_observed {
        t.observed = Some(observed);
    }
    t.meta.bytes_limit = doc
        .initial_stats
        .get("bytes_limit")
        .and_then(|v| v.as_u64());
    if let Some(limit) = t.meta.bytes_limit.filter(|l| *l > MAX_POOL_BYTES) {
        return Err(TraceError::Field {
            line: 1,
            field: "initial_stats.bytes_limit",
            msg: format!("{limit} bytes is larger than any device (the limit is 2^60 bytes)"),
        });
    }
    let prealloc = doc
        .env
        .get("XLA_PYTHON_CLIENT_PREALLOCATE")
        .or_else(|| doc.env.get("XLA_CLIENT_PREALLOCATE"))
        .map(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"));
    t.meta.preallocate = Some(prealloc.unwrap_or(true));
    t.meta.oom_step = doc.oom_step;
    Ok(t)
}

/// Reads a memwatch capture: successful allocations and frees of memory kinds that occupy
/// device memory, of one device (`device`, or the only one present). Damaged frames are
/// skipped (salvage mode), like every other capture reader.
pub fn read_capture<R: Read>(src: R, device: Option<i32>) -> Result<Trace, TraceError> {
    let mut reader =
        FrameReader::new(src, ReadMode::Salvage).map_err(|e| TraceError::Capture(e.to_string()))?;
    let mut events = Vec::new();
    let mut infos: HashMap<i32, (u64, String)> = HashMap::new();
    let mut dropped: HashMap<u32, u64> = HashMap::new();
    while let Some(rec) = reader
        .next_record()
        .map_err(|e| TraceError::Capture(e.to_string()))?
    {
        match rec {
            Record::Events(evs) => events.extend(evs),
            Record::DeviceInfo(d) => {
                infos.insert(d.device, (d.total_bytes, d.name));
            }
            Record::Dropped(d) => {
                let n = dropped.entry(d.pid).or_default();
                *n = (*n).max(d.dropped_total);
            }
            _ => {}
        }
    }
    let gaps = CaptureGaps {
        damaged_regions: reader.damage().len(),
        damaged_bytes: reader.damage().iter().map(|d| d.bytes_skipped).sum(),
        first_damage_offset: reader.damage().first().map(|d| d.offset),
        dropped_events: dropped.values().sum(),
    };
    let relevant = |e: &memwatch_wire::Event| {
        matches!(e.kind(), Some(EventKind::Alloc) | Some(EventKind::Free))
            && e.mem_kind().is_some_and(MemKind::occupies_device_memory)
    };
    let device = pick_device(
        events.iter().filter(|e| relevant(e)).map(|e| e.device),
        device,
        |devices| TraceError::SeveralDevices { devices },
    )?;
    let mut b = Builder::default();
    // Key frees by (pid, ptr): pointers are per process.
    let mut ptr_ids: HashMap<(u32, u64), u64> = HashMap::new();
    let mut next_id = 0u64;
    for (i, e) in events.iter().enumerate() {
        if !relevant(e) || e.device != device {
            continue;
        }
        match e.kind() {
            Some(EventKind::Alloc) => {
                let id = next_id;
                next_id += 1;
                if let Some(old) = ptr_ids.insert((e.pid, e.ptr), id) {
                    // The pointer was reused without a recorded free (dropped events): end
                    // the old buffer first so the live set stays truthful.
                    b.free(old, i + 1)?;
                }
                b.alloc(id, e.size, None, i + 1)?;
            }
            Some(EventKind::Free) => {
                // Frees of pointers allocated before the capture started are ignored.
                if let Some(id) = ptr_ids.remove(&(e.pid, e.ptr)) {
                    b.free(id, i + 1)?;
                }
            }
            _ => {}
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    let mut t = b.finish("mwcap");
    t.meta.gaps = gaps;
    if let Some((total, name)) = infos.get(&device) {
        t.meta.device_total_bytes = Some(*total);
        t.meta.device_name = Some(name.clone());
    }
    Ok(t)
}

/// Builds a trace from a BFC out-of-memory dump: the live set at the failure (every
/// in-use chunk, in address order, which is the lower end's allocation order) followed by
/// the request that failed. Replaying it asks "how much memory would this moment need?".
/// Chunk sizes are exact (the dump prints them); requested sizes are used when printed.
pub fn from_bfc_oom(oom: &crate::log::BfcOom) -> Result<Trace, TraceError> {
    if let Some((covered, pool)) = oom.chunk_dump_gap() {
        return Err(TraceError::Field {
            line: oom.chunk_dump_end().line,
            field: "chunk dump",
            msg: if oom.regions.is_empty() {
                "its chunks follow no `Next region of size` line, so whether the dump is whole \
                 (and the live set at the failure) is unknown"
                    .to_string()
            } else {
                format!(
                    "cut off here: the chunks cover {covered} of the {pool}-byte pool, so the live set at the failure is unknown"
                )
            },
        });
    }
    let mut b = Builder::default();
    let mut chunks: Vec<&crate::log::Chunk> = oom.chunks.iter().filter(|c| c.in_use).collect();
    chunks.sort_by_key(|c| c.address);
    for (i, c) in chunks.iter().enumerate() {
        let tag = c
            .executable
            .clone()
            .or_else(|| c.annotation.clone())
            .or_else(|| c.op.clone())
            .or_else(|| Some(format!("chunk@{:#x}", c.address)));
        b.alloc(i as u64, c.requested_size.unwrap_or(c.size), tag, c.at.line)?;
    }
    if oom.rounded_bytes == 0 {
        return Err(TraceError::Field {
            line: oom.at.line,
            field: "rounded to",
            msg: "the OOM line states no request size".into(),
        });
    }
    b.alloc(
        chunks.len() as u64,
        oom.rounded_bytes,
        Some("failed request".into()),
        oom.at.line,
    )?;
    let mut t = b.finish("bfc_oom_dump");
    t.meta.bytes_limit = oom.pool_bytes();
    t.meta.stated_limit = oom.limit_above_pool();
    if let Some(pool) = t.meta.bytes_limit.filter(|p| *p > MAX_POOL_BYTES) {
        return Err(TraceError::Field {
            line: oom.at.line,
            field: "Next region of size",
            msg: format!("a {pool}-byte pool is larger than any device (the limit is 2^60 bytes)"),
        });
    }
    let has_gap = oom
        .chunks
        .iter()
        .any(|c| c.tag.as_deref() == Some("central_gap"));
    t.meta.preallocate = Some(oom.regions.len() <= 1 && (has_gap || oom.end.is_some()));
    Ok(t)
}

/// Reads the last BFC out-of-memory dump of an XLA/JAX log (see [`from_bfc_oom`]).
pub fn read_oom_log(text: &str, name: &std::path::Path) -> Result<Trace, TraceError> {
    let mut report = crate::log::LogReport::default();
    crate::log::parse_log(text.as_bytes(), name, &mut report)
        .map_err(|e| TraceError::Capture(e.to_string()))?;
    let oom = report.ooms.last().ok_or(TraceError::NoOomDump)?;
    from_bfc_oom(oom)
}

/// Reads any supported trace from bytes, choosing the reader by content: the capture
/// magic, a `bfc_validate` document, JSON lines (text starting with `{`), else an
/// XLA/JAX log with a BFC out-of-memory dump.
pub fn read_any(bytes: &[u8], device: Option<i32>) -> Result<Trace, TraceError> {
    if bytes.starts_with(&memwatch_wire::MAGIC) {
        return read_capture(bytes, device);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| TraceError::Json {
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&c| c == b'\n')
            .count(),
        msg: "not UTF-8 text".into(),
    })?;
    let no_devices = |format: &str| match device {
        Some(d) => Err(TraceError::NoSuchDevice {
            device: d,
            present: format!("no devices: {format} describe one device's allocator"),
        }),
        None => Ok(()),
    };
    if looks_like_validate_doc(text) {
        no_devices("bfc_validate documents")?;
        return read_validate_doc(text);
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if !first.starts_with('{') && text.contains("ran out of memory") {
        no_devices("OOM dumps")?;
        return read_oom_log(text, std::path::Path::new("trace"));
    }
    read_jsonl(text.as_bytes(), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes and pools beyond any device are input errors; at the limits every model
    /// replays without overflowing (sizes near 2^63 panicked in debug builds and wrapped
    /// in release builds).
    #[test]
    fn sizes_beyond_any_device_are_rejected_and_the_limits_replay() {
        let over = format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{}}}\n", 1u64 << 63);
        let e = read_jsonl(over.as_bytes(), None).unwrap_err();
        assert!(e.to_string().contains("larger than any device"), "{e}");
        let at = MAX_ALLOC_BYTES;
        let t = read_jsonl(
            format!(
                "{{\"op\":\"alloc\",\"id\":1,\"size\":{at}}}\n{{\"op\":\"alloc\",\"id\":2,\"size\":{at}}}\n{{\"op\":\"free\",\"id\":1}}\n"
            )
            .as_bytes(),
            None,
        )
        .unwrap();
        for kind in crate::alloc::AllocatorKind::ALL {
            for preallocate in [false, true] {
                let spec = crate::alloc::ModelSpec {
                    kind,
                    limit: MAX_POOL_BYTES,
                    preallocate,
                    granularity: 2 << 20,
                    device_free_bytes: None,
                };
                let r =
                    crate::alloc::replay::replay_spec(&t, &spec, Default::default(), &mut |_| {});
                assert!(r.is_ok(), "{kind:?}");
            }
        }
    }

    /// A recorded pool beyond any device (a bfc_validate document's `bytes_limit`, an OOM
    /// dump's regions) is an input error too.
    #[test]
    fn pools_beyond_any_device_are_rejected() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed11.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        assert!(read_validate_doc(&text).is_ok());
        let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        doc["initial_stats"]["bytes_limit"] = serde_json::json!(MAX_POOL_BYTES + 1);
        let e = read_validate_doc(&doc.to_string()).unwrap_err();
        assert!(e.to_string().contains("bytes_limit"), "{e}");
        let oom = crate::log::BfcOom {
            rounded_bytes: 256,
            regions: vec![MAX_POOL_BYTES + 1],
            region_chunk_bytes: vec![MAX_POOL_BYTES + 1],
            ..Default::default()
        };
        let e = from_bfc_oom(&oom).unwrap_err();
        assert!(e.to_string().contains("larger than any device"), "{e}");
    }

    #[test]
    fn jsonl_roundtrip_and_slots() {
        let t = read_jsonl(
            "{\"op\":\"alloc\",\"id\":7,\"size\":1048576,\"tag\":\"w\"}\n\n{\"op\":\"free\",\"id\":7}\n{\"op\":\"alloc\",\"id\":7,\"size\":5}\n"
                .as_bytes(),
            None,
        )
        .unwrap();
        assert_eq!(
            t.ops,
            vec![
                TraceOp::Alloc {
                    slot: 0,
                    size: 1048576
                },
                TraceOp::Free { slot: 0 },
                TraceOp::Alloc { slot: 0, size: 5 }
            ]
        );
        assert_eq!(t.tag(0), Some("w"));
        assert_eq!(t.tag(1), None);
        assert_eq!(t.alloc_ids, vec![7, 7]);
        assert_eq!(t.slots(), 1);
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let e = read_jsonl(
            "{\"op\":\"alloc\",\"id\":1,\"size\":4}\n{oops\n".as_bytes(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("line 2: not valid JSON"), "{e}");
        let e = read_jsonl("{\"op\":\"alloc\",\"id\":1}\n".as_bytes(), None).unwrap_err();
        assert!(e.to_string().contains("line 1: field `size`"), "{e}");
        let e =
            read_jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":-4}\n".as_bytes(), None).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e = read_jsonl("{\"op\":\"free\",\"id\":3}\n".as_bytes(), None).unwrap_err();
        assert!(matches!(e, TraceError::FreeNotLive { line: 1, id: 3 }));
        let e = read_jsonl("{\"op\":\"grow\",\"id\":3}\n".as_bytes(), None).unwrap_err();
        assert!(matches!(e, TraceError::UnknownOp { line: 1, .. }));
        let e = read_jsonl("\n\n".as_bytes(), None).unwrap_err();
        assert!(matches!(e, TraceError::Empty));
    }

    /// `memwatch report --trace` names the device on every line; a replay of such a trace
    /// must keep one device's events, never pool two devices together.
    #[test]
    fn jsonl_device_field_selects_one_device() {
        let two = "{\"op\":\"alloc\",\"id\":1,\"size\":100,\"device\":0}\n\
                   {\"op\":\"alloc\",\"id\":2,\"size\":7,\"device\":1}\n\
                   {\"op\":\"free\",\"id\":1,\"device\":0}\n\
                   {\"op\":\"alloc\",\"id\":3,\"size\":50,\"device\":0}\n";
        let e = read_jsonl(two.as_bytes(), None).unwrap_err();
        assert!(
            matches!(&e, TraceError::SeveralTraceDevices { devices } if devices == "0, 1"),
            "{e}"
        );
        let t = read_jsonl(two.as_bytes(), Some(0)).unwrap();
        assert_eq!((t.len(), t.buffers()), (3, 2));
        let t = read_jsonl(two.as_bytes(), Some(1)).unwrap();
        assert_eq!((t.len(), t.buffers()), (1, 1));
        let e = read_jsonl(two.as_bytes(), Some(5)).unwrap_err();
        assert!(e.to_string().contains("device 0, 1"), "{e}");
        let mixed = "{\"op\":\"alloc\",\"id\":1,\"size\":1,\"device\":0}\n\
                     {\"op\":\"free\",\"id\":1}\n";
        let e = read_jsonl(mixed.as_bytes(), None).unwrap_err();
        assert!(
            matches!(e, TraceError::DeviceOnSomeLines { line: 2, named: 1 }),
            "{e}"
        );
        let plain = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n";
        assert_eq!(read_jsonl(plain.as_bytes(), None).unwrap().len(), 1);
        let e = read_jsonl(plain.as_bytes(), Some(0)).unwrap_err();
        assert!(e.to_string().contains("no `device` field"), "{e}");
    }
}
