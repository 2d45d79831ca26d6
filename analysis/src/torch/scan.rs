//! Reading a snapshot file in one streaming pass: the segments at the dump, every
//! device's trace (stored compactly in a [`Spill`]), the settings and annotations, and
//! what the trace alone says about the state before it began (the ring buffer of
//! `_record_memory_history(max_entries=N)` keeps only the last N entries).
//!
//! Memory: the segments (the state at the dump), the distinct frames and stacks, a
//! window of trace entries and the blocks live within the trace; not the trace.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::Path;

use foldhash::HashMap as FastMap;

use super::decode;
use super::model::{Action, AllocatorSettings, Annotation, Entry, Segment};
use super::pickle::{self, Element, Kind, Limits, Route, Router, Streaming, Value};
use super::spill::{Range, Spill};
use super::stacks::{StackId, StackTable};
use super::SnapshotError;

/// One device's trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Index in `device_traces` (the CUDA device ordinal).
    pub device: i32,
    pub range: Range,
    pub first_time_us: Option<i64>,
    pub last_time_us: Option<i64>,
    pub actions: BTreeMap<&'static str, u64>,
    /// What the trace says about memory that was there before its first entry.
    pub before: Before,
    /// `alloc` entries recorded without a stack whose block is still held at the end of
    /// the trace, as (index in the trace, address), by index. With
    /// `_record_memory_history(context="state")` no trace entry has frames, but the
    /// dump's blocks do: these allocations are the dump's blocks, so their stacks are
    /// known (`replay` gives them the dump block's).
    pub stackless_live: Vec<(u64, u64)>,
}

/// Blocks and segments the trace releases without having created them: they existed
/// before its first entry.
#[derive(Debug, Clone, Default)]
pub struct Before {
    /// (address, requested bytes, already released by the caller when the trace began).
    pub blocks: Vec<(u64, u64, bool)>,
    /// (address, bytes) of `cudaMalloc` segments.
    pub segments: Vec<(u64, u64)>,
    /// (address, bytes) of expandable-segment pages.
    pub mapped: Vec<(u64, u64)>,
    /// Blocks allocated within the trace and still held at its end.
    pub live_blocks: HashSet<u64>,
    /// Segments allocated within the trace and still there at its end.
    pub live_segments: HashSet<u64>,
    /// Page ranges mapped within the trace and still mapped at its end.
    pub live_mapped: BTreeMap<u64, u64>,
}

/// Everything one pass over a snapshot collects.
pub struct Scan {
    pub file: String,
    pub file_bytes: u64,
    pub segments: Vec<Segment>,
    pub traces: Vec<Trace>,
    pub settings: AllocatorSettings,
    pub annotations: Vec<Annotation>,
    pub stacks: StackTable,
    pub spill: Spill,
    /// Actions this build does not know, with counts (skipped).
    pub unknown_actions: BTreeMap<String, u64>,
}

const ROOT: Route = Route(1);
const SEGMENTS: Route = Route(2);
const DEVICE_TRACES: Route = Route(3);
const ANNOTATIONS: Route = Route(4);
const ELEMENT: Route = Route(5);
const TRACE0: u32 = 16;

/// Per-device tracking of what the trace itself created, while reading.
#[derive(Default)]
struct Tracker {
    /// Blocks allocated within the trace and not yet returned to the cache: whether the
    /// caller released them, and the index of their `alloc` entry when it had no stack.
    blocks: FastMap<u64, (bool, Option<u64>)>,
    segments: FastMap<u64, u64>,
    /// Entries per action (by `Action as usize`), for `Trace::actions`.
    actions: [u64; Action::ALL.len()],
}

struct Reader {
    segments: Vec<Segment>,
    traces: Vec<Trace>,
    trackers: Vec<Tracker>,
    annotations: Vec<Annotation>,
    stacks: StackTable,
    spill: Spill,
    unknown_actions: BTreeMap<String, u64>,
}

impl Reader {
    fn trace(&mut self, device: usize) -> &mut Trace {
        while self.traces.len() <= device {
            let d = self.traces.len() as i32;
            self.traces.push(Trace {
                device: d,
                ..Trace::default()
            });
            self.trackers.push(Tracker::default());
        }
        &mut self.traces[device]
    }

    fn entry(&mut self, device: usize, index: usize, v: Element<'_>) -> Result<(), String> {
        let Some(e) = decode::entry(v, device, index, &mut self.stacks)? else {
            if let Some(name) = decode::unknown_action(v) {
                *self.unknown_actions.entry(name).or_default() += 1;
            }
            return Ok(());
        };
        self.push_entry(device, e)
    }

    fn push_entry(&mut self, device: usize, e: Entry) -> Result<(), String> {
        let pos = self.spill.len();
        self.spill
            .push(e)
            .map_err(|err| format!("cannot store the trace in a temporary file: {err}"))?;
        let t = self.trace(device);
        if t.range.len == 0 {
            t.range.start = pos;
        } else if t.range.start + t.range.len != pos {
            return Err(format!(
                "device_traces[{device}] continues after another device's entries"
            ));
        }
        let index = t.range.len;
        t.range.len += 1;
        // PyTorch's clock is Unix µs; 0 is an entry without `time_us` (older formats
        // have none): such a trace has no time.
        if e.time_us != 0 {
            t.first_time_us.get_or_insert(e.time_us);
            t.last_time_us = Some(e.time_us);
        }
        let tr = &mut self.trackers[device];
        tr.actions[e.action as usize] += 1;
        let before = &mut self.traces[device].before;
        match e.action {
            Action::Alloc => {
                let stackless = (e.stack == StackId::NONE).then_some(index);
                tr.blocks.insert(e.addr, (false, stackless));
            }
            Action::FreeRequested => match tr.blocks.get_mut(&e.addr) {
                Some((released, _)) => *released = true,
                None => {
                    before.blocks.push((e.addr, e.size, false));
                    tr.blocks.insert(e.addr, (true, None));
                }
            },
            Action::FreeCompleted => {
                if tr.blocks.remove(&e.addr).is_none() {
                    before.blocks.push((e.addr, e.size, true));
                }
            }
            Action::SegmentAlloc => {
                tr.segments.insert(e.addr, e.size);
            }
            Action::SegmentFree => {
                if tr.segments.remove(&e.addr).is_none() {
                    before.segments.push((e.addr, e.size));
                }
            }
            Action::SegmentMap => {
                insert_range(&mut before.live_mapped, e.addr, e.size);
            }
            Action::SegmentUnmap => {
                let inside = remove_range(&mut before.live_mapped, e.addr, e.size);
                // Pages unmapped that the trace never mapped were there before it.
                let mut at = e.addr;
                for (a, n) in inside {
                    if a > at {
                        before.mapped.push((at, a - at));
                    }
                    at = a.saturating_add(n);
                }
                let end = e.addr.saturating_add(e.size);
                if at < end {
                    before.mapped.push((at, end - at));
                }
            }
            Action::Oom | Action::Snapshot => {}
        }
        Ok(())
    }
}

/// Adds [addr, addr+size) to a set of disjoint ranges (start -> length).
pub(crate) fn insert_range(ranges: &mut BTreeMap<u64, u64>, addr: u64, size: u64) {
    remove_range(ranges, addr, size);
    ranges.insert(addr, size);
}

/// Removes [addr, addr+size) from a set of disjoint ranges; returns the pieces removed,
/// in address order.
pub(crate) fn remove_range(
    ranges: &mut BTreeMap<u64, u64>,
    addr: u64,
    size: u64,
) -> Vec<(u64, u64)> {
    let end = addr.saturating_add(size);
    let mut removed = Vec::new();
    let first = ranges
        .range(..addr)
        .next_back()
        .filter(|(&a, &n)| a.saturating_add(n) > addr)
        .map(|(&a, _)| a)
        .unwrap_or(addr);
    let touching: Vec<(u64, u64)> = ranges.range(first..end).map(|(&a, &n)| (a, n)).collect();
    for (a, n) in touching {
        ranges.remove(&a);
        let a_end = a.saturating_add(n);
        let (lo, hi) = (a.max(addr), a_end.min(end));
        if a < lo {
            ranges.insert(a, lo - a);
        }
        if hi < a_end {
            ranges.insert(hi, a_end - hi);
        }
        if lo < hi {
            removed.push((lo, hi - lo));
        }
    }
    removed
}

impl Router for Reader {
    fn top(&mut self, kind: Kind) -> Route {
        if kind == Kind::Dict {
            ROOT
        } else {
            Route::OTHER
        }
    }

    fn child(
        &mut self,
        parent: Route,
        key: Option<&Value>,
        index: usize,
        kind: Kind,
    ) -> Option<Route> {
        match parent {
            ROOT => Some(match (key.and_then(Value::as_str), kind) {
                (Some("segments"), Kind::List) => SEGMENTS,
                (Some("device_traces"), Kind::List) => DEVICE_TRACES,
                (Some("external_annotations"), Kind::List) => ANNOTATIONS,
                _ => Route::OTHER,
            }),
            DEVICE_TRACES => (kind == Kind::List)
                .then(|| Route(TRACE0.saturating_add(u32::try_from(index).unwrap_or(u32::MAX)))),
            SEGMENTS | ANNOTATIONS => (kind == Kind::Dict).then_some(ELEMENT),
            Route(r) if r >= TRACE0 => (kind == Kind::Dict).then_some(ELEMENT),
            _ => Some(Route::OTHER),
        }
    }

    fn streaming(&self, route: Route) -> Streaming {
        match route {
            // Trace entries refer back to the segments' frame lists: keep those.
            SEGMENTS => Streaming::Keep,
            ANNOTATIONS => Streaming::Lend,
            Route(r) if r >= TRACE0 => Streaming::Lend,
            _ => Streaming::No,
        }
    }

    fn element(&mut self, route: Route, index: usize, value: Element<'_>) -> Result<(), String> {
        match route {
            SEGMENTS => {
                let s = decode::segment(&value.to_value(), index, &mut self.stacks)?;
                self.segments.push(s);
            }
            ANNOTATIONS => self.annotations.push(decode::annotation(value, index)?),
            Route(r) if r >= TRACE0 => self.entry((r - TRACE0) as usize, index, value)?,
            _ => {}
        }
        Ok(())
    }
}

/// Reads a snapshot file.
pub fn scan_path(path: &Path) -> Result<Scan, SnapshotError> {
    let file = std::fs::File::open(path).map_err(|error| SnapshotError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    scan_reader(file, path, file_bytes)
}

/// Reads a snapshot from `input`; `path` names it in errors.
pub fn scan_reader<R: Read>(input: R, path: &Path, file_bytes: u64) -> Result<Scan, SnapshotError> {
    let mut r = Reader {
        segments: Vec::new(),
        traces: Vec::new(),
        trackers: Vec::new(),
        annotations: Vec::new(),
        stacks: StackTable::default(),
        spill: Spill::default(),
        unknown_actions: BTreeMap::new(),
    };
    // The pickle reader buffers its input itself.
    let top =
        pickle::load(input, &mut r, &Limits::default()).map_err(|e| SnapshotError::Pickle {
            path: path.to_path_buf(),
            error: e,
        })?;
    let bad = |what: String| SnapshotError::Format {
        path: path.to_path_buf(),
        what,
    };
    if !matches!(top, Value::Dict(_)) {
        return Err(bad(format!(
            "the pickle holds a {}, not a memory snapshot (a dict with 'segments' and \
             'device_traces' from torch.cuda.memory._dump_snapshot)",
            top.type_name()
        )));
    }
    let (Some(segments), Some(traces)) = (top.get("segments"), top.get("device_traces")) else {
        return Err(bad(
            "no 'segments' and 'device_traces': not a torch.cuda.memory._dump_snapshot() \
             pickle"
                .into(),
        ));
    };
    // Lists the router could not stream (an unusual layout) are whole here: read them
    // now, after the streamed ones.
    let segs = segments
        .as_seq()
        .ok_or_else(|| bad(format!("'segments' is a {}", segments.type_name())))?;
    for (i, s) in segs.iter().enumerate() {
        let index = r.segments.len() + i;
        let seg = decode::segment(s, index, &mut r.stacks).map_err(&bad)?;
        r.segments.push(seg);
    }
    let devs = traces
        .as_seq()
        .ok_or_else(|| bad(format!("'device_traces' is a {}", traces.type_name())))?;
    for (d, t) in devs.iter().enumerate() {
        r.trace(d);
        let entries = t
            .as_seq()
            .ok_or_else(|| bad(format!("device_traces[{d}] is a {}", t.type_name())))?;
        for (i, e) in entries.iter().enumerate() {
            r.entry(d, i, Element::Value(e)).map_err(&bad)?;
        }
    }
    if let Some(a) = top.get("external_annotations").and_then(Value::as_seq) {
        for (i, v) in a.iter().enumerate() {
            r.annotations
                .push(decode::annotation(Element::Value(v), i).map_err(&bad)?);
        }
    }
    let settings = decode::settings(top.get("allocator_settings")).map_err(&bad)?;
    r.spill
        .seal()
        .map_err(|e| bad(format!("cannot store the trace in a temporary file: {e}")))?;
    for (t, tr) in r.traces.iter_mut().zip(&r.trackers) {
        // Blocks whose free is still pending hold their place too.
        t.before.live_blocks = tr.blocks.keys().copied().collect();
        t.stackless_live = tr
            .blocks
            .iter()
            .filter_map(|(&addr, &(_, index))| Some((index?, addr)))
            .collect();
        t.stackless_live.sort_unstable();
        t.before.live_segments = tr.segments.keys().copied().collect();
        t.actions = Action::ALL
            .iter()
            .zip(tr.actions)
            .filter(|&(_, n)| n > 0)
            .map(|(a, n)| (a.name(), n))
            .collect();
    }
    r.stacks.done_reading();
    Ok(Scan {
        file: path.display().to_string(),
        file_bytes,
        segments: r.segments,
        traces: r.traces,
        settings,
        annotations: r.annotations,
        stacks: r.stacks,
        spill: r.spill,
        unknown_actions: r.unknown_actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_split_and_merge() {
        let mut r = BTreeMap::new();
        insert_range(&mut r, 100, 100);
        insert_range(&mut r, 300, 50);
        assert_eq!(remove_range(&mut r, 150, 175), vec![(150, 50), (300, 25)]);
        assert_eq!(
            r.into_iter().collect::<Vec<_>>(),
            vec![(100, 50), (325, 25)]
        );
    }
}
