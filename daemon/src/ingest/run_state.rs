//! The in-memory state of one run while it is being ingested: the live allocations,
//! per-device live bytes, peak, rollup accumulators and the event chunks being built.
//!
//! Owns the meaning of events for live bytes: a successful alloc of a kind that occupies
//! device memory adds its size to its device; a free subtracts the size of the matching
//! alloc (same pid, pointer and address space) from the alloc's device. Everything else
//! is stored but changes nothing. It does no I/O: `ingest` loads and stores it.

use std::collections::{BTreeMap, HashMap};

use foldhash::HashMap as FastMap;

use memwatch_wire::{Event, EventKind, MemKind, EVENT_SIZE};

use super::rollup::{Accumulator, RollupRow};
use crate::db::chunk::{self, CHUNK_EVENTS};
use crate::db::snapshot::LiveAlloc;

/// Key of a live allocation: pid, address space, pointer. VMM reservations, mappings,
/// physical handles and pool objects live in their own spaces (a mapping has the same
/// address as its reservation); ordinary memory kinds share one.
pub type LiveKey = (u32, u8, u64);

fn space(mem_kind: u8) -> u8 {
    match MemKind::from_u8(mem_kind) {
        Some(
            MemKind::VmmPhysical | MemKind::VmmMap | MemKind::VmmReserve | MemKind::PoolObject,
        ) => mem_kind,
        _ => 0,
    }
}

/// One live allocation in memory.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    pub device: i32,
    pub alloc: LiveAlloc,
    /// Whether its bytes count towards the device's live bytes.
    pub counted: bool,
}

/// An event chunk being built for one device.
#[derive(Debug, Clone, Default)]
pub struct Chunk {
    pub events: Vec<u8>,
    pub deltas: Vec<u8>,
    pub n: usize,
    pub ts_first: u64,
    pub ts_last: u64,
    pub live_start: i64,
    pub live_min: i64,
    pub live_max: i64,
    pub live_end: i64,
}

enum Undo {
    Added(LiveKey),
    Removed(LiveKey, Live),
}

/// A failed allocation to record as an incident.
#[derive(Debug, Clone)]
pub struct Incident {
    pub event: Event,
    pub live_bytes: i64,
}

/// Per-device state of a run.
#[derive(Default)]
pub struct DevState {
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub peak_ts: u64,
    pub allocs: i64,
    pub frees: i64,
    pub failed: i64,
    pub acc: Accumulator,
    pub closed: Vec<RollupRow>,
    pub chunk: Option<Chunk>,
    pub full_chunks: Vec<Chunk>,
    /// Set when the peak moved since the last snapshot; `undo` then holds what happened
    /// after the peak, newest last.
    pub peak_moved: bool,
    undo: Vec<Undo>,
    pub dirty: bool,
}

/// State of one run.
pub struct RunState {
    pub run_id: i64,
    pub t0: u64,
    /// Keyed with a fast non-cryptographic hash: this map is touched by every event.
    pub live: FastMap<LiveKey, Live>,
    pub devices: BTreeMap<i32, DevState>,
    pub event_count: i64,
    pub last_ts: u64,
    pub dropped: HashMap<u32, u64>,
    pub incidents: Vec<Incident>,
    pub dirty: bool,
}

impl RunState {
    pub fn new(run_id: i64, t0: u64) -> Self {
        Self {
            run_id,
            t0,
            live: FastMap::default(),
            devices: BTreeMap::new(),
            event_count: 0,
            last_ts: t0,
            dropped: HashMap::new(),
            incidents: Vec::new(),
            dirty: false,
        }
    }

    /// Applies one event. With `emit` false (rebuilding after a restart) nothing is
    /// queued for storage: chunks, closed rollups, incidents and snapshots already are.
    pub fn apply(&mut self, e: &Event, emit: bool) {
        let kind = EventKind::from_u8(e.kind);
        let mut device = e.device;
        let mut delta: i64 = 0;
        let mut undo = None;
        match kind {
            Some(EventKind::Alloc) => {
                let key = (e.pid, space(e.mem_kind), e.ptr);
                let counted =
                    MemKind::from_u8(e.mem_kind).is_some_and(MemKind::occupies_device_memory);
                let live = Live {
                    device,
                    counted,
                    alloc: LiveAlloc::of(e),
                };
                // An alloc at an address still live (a free we never saw): replace it.
                if let Some(old) = self.live.insert(key, live) {
                    if old.counted {
                        let d = self.devices.entry(old.device).or_default();
                        let before = d.live_bytes;
                        d.live_bytes -= old.alloc.size as i64;
                        let after = d.live_bytes;
                        let rel = e.ts_ns.saturating_sub(self.t0);
                        d.acc
                            .record(rel, before, after, emit.then_some(&mut d.closed));
                    }
                }
                if counted {
                    delta = e.size as i64;
                }
                undo = Some(Undo::Added(key));
                // Counted as `memwatch report` counts: memory that occupies the device
                // (pinned host memory, VMM maps and reserves are not allocations of it).
                if counted {
                    self.devices.entry(device).or_default().allocs += 1;
                }
            }
            Some(EventKind::Free) => {
                let sp = space(e.mem_kind);
                let mut key = (e.pid, sp, e.ptr);
                let mut found = self.live.remove(&key);
                if found.is_none() && sp != 0 {
                    key = (e.pid, 0, e.ptr);
                    found = self.live.remove(&key);
                }
                let freed_device_memory = found.as_ref().is_some_and(|o| o.counted);
                if let Some(old) = found {
                    device = old.device;
                    if old.counted {
                        delta = -(old.alloc.size as i64);
                    }
                    undo = Some(Undo::Removed(key, old));
                }
                // As `memwatch report`: frees of counted allocations this run saw.
                if freed_device_memory {
                    self.devices.entry(device).or_default().frees += 1;
                }
            }
            Some(EventKind::AllocFailed) => {
                let d = self.devices.entry(device).or_default();
                d.failed += 1;
                if emit {
                    let live_bytes = d.live_bytes;
                    self.incidents.push(Incident {
                        event: *e,
                        live_bytes,
                    });
                }
            }
            _ => {}
        }
        self.event_count += 1;
        self.last_ts = self.last_ts.max(e.ts_ns);
        self.dirty = true;
        let rel = e.ts_ns.saturating_sub(self.t0);
        let d = self.devices.entry(device).or_default();
        d.dirty = true;
        let before = d.live_bytes;
        let after = before + delta;
        d.live_bytes = after;
        if delta != 0 {
            d.acc
                .record(rel, before, after, emit.then_some(&mut d.closed));
            if after > d.peak_bytes {
                d.peak_bytes = after;
                d.peak_ts = e.ts_ns;
                if emit {
                    d.peak_moved = true;
                    d.undo.clear();
                }
            } else if d.peak_moved {
                if let Some(u) = undo {
                    d.undo.push(u);
                }
            }
        }
        if emit {
            let c = d.chunk.get_or_insert_with(|| Chunk {
                events: Vec::with_capacity(CHUNK_EVENTS * EVENT_SIZE),
                deltas: Vec::with_capacity(CHUNK_EVENTS * 8),
                ts_first: e.ts_ns,
                ts_last: e.ts_ns,
                live_start: before,
                live_min: before,
                live_max: before,
                ..Chunk::default()
            });
            chunk::push_event(&mut c.events, e);
            chunk::push_delta(&mut c.deltas, delta);
            c.n += 1;
            c.ts_first = c.ts_first.min(e.ts_ns);
            c.ts_last = c.ts_last.max(e.ts_ns);
            c.live_min = c.live_min.min(after);
            c.live_max = c.live_max.max(after);
            c.live_end = after;
            if c.n >= CHUNK_EVENTS {
                if let Some(full) = d.chunk.take() {
                    d.full_chunks.push(full);
                }
            }
        }
    }

    /// The allocations live at `device`'s peak, when the peak moved since the last call
    /// (then the undo log is consumed).
    pub fn take_peak_snapshot(&mut self, device: i32) -> Option<Vec<LiveAlloc>> {
        let d = self.devices.get_mut(&device)?;
        if !d.peak_moved {
            return None;
        }
        d.peak_moved = false;
        let undo = std::mem::take(&mut d.undo);
        let mut at_peak: FastMap<LiveKey, Live> = self
            .live
            .iter()
            .filter(|(_, l)| l.device == device && l.counted)
            .map(|(k, l)| (*k, *l))
            .collect();
        for u in undo.into_iter().rev() {
            match u {
                Undo::Added(k) => {
                    at_peak.remove(&k);
                }
                Undo::Removed(k, l) => {
                    if l.counted {
                        at_peak.insert(k, l);
                    }
                }
            }
        }
        let mut v: Vec<LiveAlloc> = at_peak.into_values().map(|l| l.alloc).collect();
        v.sort_by_key(|a| (a.ts_ns, a.pid, a.ptr));
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: u64, kind: EventKind, ptr: u64, size: u64) -> Event {
        Event {
            ts_ns: ts,
            ptr,
            size,
            pid: 1,
            tid: 1,
            device: 0,
            kind: kind as u8,
            mem_kind: MemKind::Device as u8,
            ..Event::default()
        }
    }

    #[test]
    fn live_bytes_peak_and_snapshot() {
        let mut s = RunState::new(1, 0);
        s.apply(&ev(1, EventKind::Alloc, 0x10, 100), true);
        s.apply(&ev(2, EventKind::Alloc, 0x20, 50), true);
        s.apply(&ev(3, EventKind::Free, 0x10, 0), true);
        s.apply(&ev(4, EventKind::Alloc, 0x30, 10), true);
        let d = &s.devices[&0];
        assert_eq!(d.live_bytes, 60);
        assert_eq!(d.peak_bytes, 150);
        assert_eq!(d.peak_ts, 2);
        let snap = s.take_peak_snapshot(0).unwrap();
        let ptrs: Vec<u64> = snap.iter().map(|a| a.ptr).collect();
        assert_eq!(ptrs, vec![0x10, 0x20]);
        assert!(s.take_peak_snapshot(0).is_none());
    }

    #[test]
    fn vmm_map_and_reserve_do_not_collide() {
        let mut s = RunState::new(1, 0);
        let mut r = ev(1, EventKind::Alloc, 0x1000, 4096);
        r.mem_kind = MemKind::VmmReserve as u8;
        let mut p = ev(2, EventKind::Alloc, 0x77, 4096);
        p.mem_kind = MemKind::VmmPhysical as u8;
        let mut m = ev(3, EventKind::Alloc, 0x1000, 4096);
        m.mem_kind = MemKind::VmmMap as u8;
        for e in [r, p, m] {
            s.apply(&e, true);
        }
        assert_eq!(s.devices[&0].live_bytes, 4096);
        let mut rel = ev(4, EventKind::Free, 0x77, 0);
        rel.mem_kind = MemKind::VmmPhysical as u8;
        s.apply(&rel, true);
        assert_eq!(s.devices[&0].live_bytes, 0);
        assert_eq!(s.live.len(), 2);
    }
}
