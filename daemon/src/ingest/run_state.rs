//! The in-memory state of one run while it is being ingested: the live allocations,
//! per-device live bytes, peak, rollup accumulators and the event chunks being built.
//!
//! Live bytes follow `memwatch_analysis::live::LiveSet`, the one free-matching rule every
//! reader uses (`memwatch report`, `attach --live`, the daemon's replays): an allocation
//! is filed under its process image, memory family and pointer; a free releases the
//! allocation with the same key from the device it was made on; device bytes count every
//! family but pinned host memory. A pid's next `process_start` (an exec) ends its image,
//! which releases what that image held. Everything else is stored but changes nothing.
//! It does no I/O: `ingest` loads and stores it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use foldhash::HashMap as FastMap;

use memwatch_analysis::live::{Change, Held, ImageClock, LiveKey, LiveSet, MemEvent, ProcKey};
use memwatch_analysis::runtime::OutputOrder;
use memwatch_wire::{Event, EventKind, MemKind, EVENT_SIZE};

use super::peak_rows::{AtPeak, PeakPlan, PeakTrack};
use super::pool_samples::PoolSamples;
use super::rollup::{Accumulator, RollupRow};
use crate::codes;
use crate::db::chunk::{self, CHUNK_EVENTS};
use crate::db::snapshot::Origin;

/// A live allocation: where the live set filed it and what it was.
pub(super) type Live = Held<Origin>;

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

/// An allocation on `device` released by `event`, an allocation stored with another
/// device (`device_releases`).
#[derive(Debug, Clone)]
pub struct Release {
    pub device: i32,
    pub event: Event,
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
    /// What changed since the peak stored last (its rows are written as a difference).
    pub track: PeakTrack,
    pub dirty: bool,
}

/// State of one run.
pub struct RunState {
    pub run_id: i64,
    pub t0: u64,
    /// The live allocations of every process image, with their totals.
    live: LiveSet<Origin>,
    /// Which image of its pid a record read now belongs to.
    images: ImageClock,
    /// Whether a pid of this run exec'd (until then every record is its pid's image 0,
    /// and the clock need not be asked: it is on every event's path).
    exec_seen: bool,
    /// The device of each live PJRT buffer (`jax.Array` storage): not device
    /// allocations (they live inside the framework's pool, which the driver-level events
    /// count), but a buffer's destroy, which the shim records without a device, is filed
    /// under the device of its buffer like a free under its allocation's.
    buffers: FastMap<(ProcKey, u64), i32>,
    pub devices: BTreeMap<i32, DevState>,
    pub event_count: i64,
    pub last_ts: u64,
    pub dropped: HashMap<u32, u64>,
    pub incidents: Vec<Incident>,
    /// Releases of allocations by events of another device, not yet stored.
    pub releases: Vec<Release>,
    pub dirty: bool,
    /// Pids that started and have not ended: none left means the run is finished.
    pub running: HashSet<u32>,
    /// When a batch last had records for this run (memory is given back after a while).
    pub touched: Instant,
    /// Numbers execute outputs that carry no recorded index (older captures) across the
    /// run's batches: a call's outputs split over two batches keep counting.
    pub outputs: OutputOrder,
    /// The framework allocator's samples, for the live bytes of failed executes.
    pub pool: PoolSamples,
}

impl RunState {
    pub fn new(run_id: i64, t0: u64) -> Self {
        Self {
            run_id,
            t0,
            live: LiveSet::new(),
            images: ImageClock::default(),
            exec_seen: false,
            buffers: FastMap::default(),
            devices: BTreeMap::new(),
            event_count: 0,
            last_ts: t0,
            dropped: HashMap::new(),
            incidents: Vec::new(),
            releases: Vec::new(),
            dirty: false,
            running: HashSet::new(),
            touched: Instant::now(),
            outputs: OutputOrder::default(),
            pool: PoolSamples::default(),
        }
    }

    /// Applies one event of the image its pid runs now. With `emit` false (rebuilding
    /// after a restart) nothing is queued for storage: chunks, closed rollups, incidents
    /// and snapshots already are.
    pub fn apply(&mut self, e: &Event, emit: bool) {
        let proc_ = if self.exec_seen {
            self.images.key(e.pid)
        } else {
            ProcKey {
                pid: e.pid,
                image: 0,
            }
        };
        self.apply_as(e, proc_, emit);
    }

    /// Applies one event of process image `proc_`.
    pub fn apply_as(&mut self, e: &Event, proc_: ProcKey, emit: bool) {
        let mut device = e.device;
        let mut delta: i64 = 0;
        let mut undo = None;
        // An allocation of this device that this event's allocation replaced.
        let mut replaced_here = None;
        // Counted as `memwatch report` counts: allocations and frees of device memory.
        let (mut allocs, mut frees) = (0, 0);
        let key = |family| LiveKey {
            proc: proc_,
            family,
            ptr: e.ptr,
        };
        // Only allocations and frees move the live set (LiveSet::apply answers NotMemory
        // for every other kind): the rest does not go through it.
        let change = match codes::event_kind(e.kind) {
            Some(EventKind::Alloc | EventKind::Free) => {
                self.live.apply(&MemEvent::of_wire(proc_, e), Origin::of(e))
            }
            _ => Change::NotMemory,
        };
        match change {
            Change::Alloc {
                family, replaced, ..
            } => {
                // An alloc at a key still live (a free we never saw) replaced it.
                if let Some(old) = replaced {
                    if family.on_device() {
                        let d = self.devices.entry(old.device).or_default();
                        let before = d.live_bytes;
                        d.live_bytes -= old.size as i64;
                        let after = d.live_bytes;
                        let rel = e.ts_ns.saturating_sub(self.t0);
                        d.acc
                            .record(rel, before, after, emit.then_some(&mut d.closed));
                        // Its counters are stored again even when no event of its own
                        // follows.
                        d.dirty = true;
                        if emit {
                            d.track.touch(key(family), true, self.live.len());
                        }
                        if old.device == device {
                            replaced_here = Some(Undo::Removed(key(family), old));
                        } else {
                            // Not an event of that device: its own undo log and its
                            // replays learn of the release here.
                            if d.peak_moved {
                                d.undo.push(Undo::Removed(key(family), old));
                            }
                            if emit {
                                self.releases.push(Release {
                                    device: old.device,
                                    event: *e,
                                });
                            }
                        }
                    }
                }
                undo = Some(Undo::Added(key(family)));
                // Counted as `memwatch report` counts: memory that occupies the device
                // (pinned host memory is not an allocation of it).
                if family.on_device() {
                    delta = e.size as i64;
                    allocs = 1;
                    if emit {
                        let was = replaced.is_some_and(|old| old.device == device);
                        let live = self.live.len();
                        let d = self.devices.entry(device).or_default();
                        d.track.touch(key(family), was, live);
                    }
                }
            }
            Change::Free { family, freed, .. } => {
                device = freed.device;
                // As `memwatch report`: frees of device memory this run saw.
                if family.on_device() {
                    delta = -(freed.size as i64);
                    frees = 1;
                    if emit {
                        let live = self.live.len();
                        let d = self.devices.entry(device).or_default();
                        d.track.touch(key(family), true, live);
                    }
                }
                undo = Some(Undo::Removed(key(family), freed));
            }
            Change::NotMemory if codes::event_kind(e.kind) == Some(EventKind::AllocFailed) => {
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
            Change::Untracked if codes::mem_kind(e.mem_kind) == Some(MemKind::PjrtBuffer) => {
                match codes::event_kind(e.kind) {
                    Some(EventKind::Alloc) => {
                        self.buffers.insert((proc_, e.ptr), e.device);
                    }
                    Some(EventKind::Free) => {
                        if let Some(d) = self.buffers.remove(&(proc_, e.ptr)) {
                            device = d;
                        }
                    }
                    _ => {}
                }
            }
            Change::NotMemory
            | Change::UnmatchedFree { .. }
            // A VMM handle released while still mapped (or a retained / imported
            // reference): nothing is given back until its last unmap.
            | Change::HandleReference(_)
            | Change::NullFree
            | Change::Untracked => {}
        }
        self.event_count += 1;
        self.last_ts = self.last_ts.max(e.ts_ns);
        self.dirty = true;
        let rel = e.ts_ns.saturating_sub(self.t0);
        let d = self.devices.entry(device).or_default();
        d.dirty = true;
        d.allocs += allocs;
        d.frees += frees;
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
                // Newest last: the replaced allocation went before this one came.
                d.undo.extend(replaced_here);
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

    /// A `process_start` of `pid` at `ts` was read. When it is the pid's next image (an
    /// exec), the image before it ended: what it held is released, each device's open
    /// chunk is closed (the next chunk starts from the lower live bytes), and the new
    /// image's number is returned for the caller to store.
    pub fn process_start(&mut self, pid: u32, ts: u64, emit: bool) -> Option<u32> {
        let ended = self.images.process_start(pid)?;
        self.exec_seen = true;
        self.release(ended, ts, emit);
        Some(self.images.key(pid).image)
    }

    /// Releases everything process image `proc_` holds, at `ts`.
    pub fn release(&mut self, proc_: ProcKey, ts: u64, emit: bool) {
        let rel = ts.saturating_sub(self.t0);
        self.buffers.retain(|(p, _), _| *p != proc_);
        for (key, held) in self.live.release_process(proc_) {
            if !key.family.on_device() {
                continue;
            }
            let d = self.devices.entry(held.device).or_default();
            let before = d.live_bytes;
            d.live_bytes -= held.size as i64;
            d.acc
                .record(rel, before, d.live_bytes, emit.then_some(&mut d.closed));
            if emit {
                d.track.touch(key, true, self.live.len());
            }
            if d.peak_moved {
                d.undo.push(Undo::Removed(key, held));
            }
            if let Some(c) = d.chunk.take() {
                d.full_chunks.push(c);
            }
            d.dirty = true;
            self.dirty = true;
        }
    }

    /// Replays a pid's exec, as stored, after a restart: the image clock moves on and
    /// the image before it is released.
    pub fn replay_exec(&mut self, pid: u32, ts: u64) {
        self.process_start(pid, ts, false);
    }

    /// A pid announced itself (`process_start` stored before a restart).
    pub fn replay_announce(&mut self, pid: u32) {
        self.images.process_start(pid);
    }

    /// The allocations live at `device`'s peak and how to store them, when the peak
    /// moved since the last call (then the undo log is consumed, and what changes from
    /// now on is tracked against this peak). Read straight from the live set: the undo
    /// log says which keys were not as they are now (the oldest entry of a key is its
    /// state at the peak), so no copy of the live set is made (with millions of live
    /// allocations, a copy was most of the daemon's memory).
    pub fn take_peak(&mut self, device: i32) -> Option<(PeakPlan, AtPeak<'_>)> {
        let d = self.devices.get_mut(&device)?;
        if !d.peak_moved {
            return None;
        }
        d.peak_moved = false;
        let undo = std::mem::take(&mut d.undo);
        // Each key's state at the peak: `None`, not live then (added after it); `Some`,
        // live then as held (released after it).
        let mut changed: FastMap<LiveKey, Option<Live>> = FastMap::default();
        for u in undo.into_iter().rev() {
            match u {
                Undo::Added(k) => changed.insert(k, None),
                Undo::Removed(k, l) => changed.insert(k, Some(l)),
            };
        }
        let plan = d.track.restart(
            changed
                .iter()
                .filter(|(k, _)| k.family.on_device())
                .map(|(k, l)| (*k, l.is_some())),
            self.live.len(),
        );
        Some((plan, AtPeak::new(&self.live, device, changed)))
    }

    /// The stored peaks are not known to match what is tracked (a run rebuilt from the
    /// store): each device's next peak is written whole.
    pub fn rewrite_peaks(&mut self) {
        for d in self.devices.values_mut() {
            d.track.rewrite_all();
        }
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

    /// (pointer, size) of what `take_peak` says was live at the peak, by pointer.
    fn at_peak(s: &mut RunState, device: i32) -> Vec<(u64, u64)> {
        let (_, at) = s.take_peak(device).unwrap();
        let mut v: Vec<(u64, u64)> = at.iter().map(|(_, a)| (a.ptr, a.size)).collect();
        v.sort_unstable();
        v
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
        let ptrs: Vec<u64> = at_peak(&mut s, 0).iter().map(|a| a.0).collect();
        assert_eq!(ptrs, vec![0x10, 0x20]);
        assert!(s.take_peak(0).is_none());
    }

    #[test]
    fn vmm_maps_and_reserves_are_not_live_allocations() {
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
        assert!(s.live.is_empty());
    }

    #[test]
    fn an_allocation_handed_out_again_on_another_device_releases_the_old_one() {
        let mut s = RunState::new(1, 0);
        s.apply(&ev(1, EventKind::Alloc, 0x10, 100), true);
        let mut again = ev(2, EventKind::Alloc, 0x10, 40);
        again.device = 1;
        s.apply(&again, true);
        assert_eq!(
            (s.devices[&0].live_bytes, s.devices[&1].live_bytes),
            (0, 40)
        );
        assert!(s.devices[&0].dirty);
        assert_eq!(s.releases.len(), 1);
        assert_eq!((s.releases[0].device, s.releases[0].event.ts_ns), (0, 2));
        // Device 0's peak snapshot still holds what was live at its peak.
        let snap = at_peak(&mut s, 0);
        assert_eq!(snap.iter().map(|a| a.1).collect::<Vec<_>>(), vec![100]);
    }

    #[test]
    fn a_peak_snapshot_keeps_an_allocation_replaced_after_the_peak() {
        let mut s = RunState::new(1, 0);
        s.apply(&ev(1, EventKind::Alloc, 0x10, 100), true);
        s.apply(&ev(2, EventKind::Alloc, 0x20, 50), true);
        s.apply(&ev(3, EventKind::Free, 0x20, 0), true);
        s.apply(&ev(4, EventKind::Alloc, 0x10, 10), true);
        assert_eq!(s.devices[&0].live_bytes, 10);
        assert_eq!(at_peak(&mut s, 0), vec![(0x10, 100), (0x20, 50)]);
    }

    #[test]
    fn an_exec_releases_what_the_old_image_held() {
        let mut s = RunState::new(1, 0);
        assert_eq!(s.process_start(1, 0, true), None);
        s.apply(&ev(1, EventKind::Alloc, 0x10, 100), true);
        assert_eq!(s.process_start(1, 5, true), Some(1));
        assert_eq!(s.devices[&0].live_bytes, 0);
        // The new image's free of the same pointer does not match the old image's alloc.
        s.apply(&ev(6, EventKind::Free, 0x10, 0), true);
        s.apply(&ev(7, EventKind::Alloc, 0x10, 30), true);
        let d = &s.devices[&0];
        assert_eq!((d.live_bytes, d.peak_bytes, d.frees), (30, 100, 0));
        assert_eq!(d.full_chunks.len(), 1, "the exec closed the open chunk");
    }
}
