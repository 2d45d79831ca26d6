//! Allocation traces: the input of every allocator model.
//!
//! Owns the in-memory [`Trace`] (alloc/free events with dense buffer slots), the builder
//! every reader fills, choosing the device of a multi-device source, and [`read_any`],
//! which picks the reader by content. The readers: the JSON-lines interchange format of
//! DESIGN.md (`jsonl`), the JSON documents written by `testdata/h200/bfc/bfc_validate.py`
//! (ground-truth runs of the real allocator; `validate`), memwatch capture files
//! (`.mwcap`, via `memwatch-wire`'s `FrameReader`; `capture`) and BFC out-of-memory dumps
//! in XLA/JAX logs (`oom`). It does not
//! replay anything (see `replay`) and does no file-system policy beyond reading the bytes
//! it is handed.

use std::collections::HashMap;

mod capture;
mod jsonl;
mod oom;
#[cfg(test)]
mod tests;
mod validate;

pub use capture::read_capture;
pub use jsonl::read_jsonl;
pub use oom::{from_bfc_oom, read_oom_log};
pub use validate::{looks_like_validate_doc, read_validate_doc};

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
