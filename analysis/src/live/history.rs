//! What a fold of time-ordered events through a [`LiveSet`] leaves behind for later
//! questions: each stream's peaks, and (optionally) when each device allocation was made
//! and released, so the allocations live at any instant can be listed without folding
//! again.
//!
//! Events are named by their position in the time-ordered list the fold walked (the
//! caller keeps that list). The report's fold records the peaks it prints (and, in
//! `memwatch run`, the lifetimes the OOM doctor reads); the doctor folds a history of
//! its own when it has no report's.

use super::set::{Change, LiveSet, MemEvent, Totals};
use super::Family;

/// Peaks of one stream (one process image on one device), as the fold reached them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamPeaks {
    /// Most device bytes live at once, and the time (as the events carry it) of the
    /// allocation that first reached it.
    pub device_bytes: u64,
    pub device_ts: u64,
    /// The same for pinned host memory made while this device was current.
    pub host_bytes: u64,
    pub host_ts: u64,
    /// Device bytes live in runtime-API segments (`cudaMalloc` / `hipMalloc`: what
    /// PyTorch's caching allocator reserves; [`is_runtime_segment`]) now, their most at
    /// once and the time of the allocation that first reached it.
    pub segments_bytes: u64,
    pub segments_peak_bytes: u64,
    pub segments_peak_ts: u64,
}

/// Whether an allocation is a runtime-API segment (the one rule:
/// `crate::capture::devices::MemoryKind::RuntimeMalloc`, without pool sizes).
pub fn is_runtime_segment(e: &MemEvent) -> bool {
    use crate::capture::devices::MemoryKind;
    MemoryKind::of(e.api, e.mem, e.size, &[]) == MemoryKind::RuntimeMalloc
}

/// What the history needs of an allocation still live in the fold's set: its position,
/// its stream and whether it is a runtime segment ([`is_runtime_segment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub pos: usize,
    pub stream: u32,
    pub segment: bool,
}

/// The fold's record; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct LiveHistory {
    /// By stream index.
    peaks: Vec<StreamPeaks>,
    /// Device allocations released (freed, or their pointer handed out again): (position
    /// of the allocation, position of the release), in release order. `None`: not kept.
    released: Option<Vec<(usize, usize)>>,
    /// Device allocations still live after the last event (their positions).
    live_at_end: Vec<usize>,
}

/// A point of a [`LiveHistory`] to go back to (see [`LiveHistory::rewind`]).
#[derive(Debug, Clone)]
pub struct HistoryMark {
    peaks: Vec<StreamPeaks>,
    released: usize,
}

impl LiveHistory {
    /// An empty history; `lifetimes`: keep when each device allocation was released, so
    /// [`Self::live_before`] can answer.
    pub fn new(lifetimes: bool) -> Self {
        Self {
            peaks: Vec::new(),
            released: lifetimes.then(Vec::new),
            live_at_end: Vec::new(),
        }
    }

    /// Folds `events` (in time order: a [`MemEvent`], its time and its stream index each)
    /// through a [`LiveSet`], keeping the lifetimes.
    pub fn fold(events: impl Iterator<Item = (MemEvent, u64, u32)>) -> Self {
        let mut history = Self::new(true);
        let mut live: LiveSet<Allocation> = LiveSet::new();
        for (pos, (e, ts, stream)) in events.enumerate() {
            let made = Allocation {
                pos,
                stream,
                segment: is_runtime_segment(&e),
            };
            let change = live.apply(&e, made);
            history.record(pos, stream, ts, &e, &change, |a| *a);
        }
        history.finish(live.iter().map(|(k, h)| (k.family, h.data.pos)));
        history
    }

    /// Records what the event `e` at `pos` (of `stream`, at `ts`) did; `allocation`
    /// tells what the history needs of the allocation a released entry's data names.
    pub fn record<T>(
        &mut self,
        pos: usize,
        stream: u32,
        ts: u64,
        e: &MemEvent,
        change: &Change<T>,
        allocation: impl Fn(&T) -> Allocation,
    ) {
        match change {
            Change::Alloc {
                family,
                replaced,
                now,
            } => {
                if let Some(old) = replaced {
                    let a = allocation(&old.data);
                    self.released(*family, a.pos, pos);
                    if family.on_device() && a.segment {
                        self.segment_released(a.stream, old.size);
                    }
                }
                self.allocated(stream, *family, now, ts);
                if family.on_device() && is_runtime_segment(e) {
                    self.segment_made(stream, e.size, ts);
                }
            }
            Change::Free { family, freed, .. } => {
                let a = allocation(&freed.data);
                self.released(*family, a.pos, pos);
                if family.on_device() && a.segment {
                    self.segment_released(a.stream, freed.size);
                }
            }
            _ => {}
        }
    }

    fn stream_peaks(&mut self, stream: u32) -> &mut StreamPeaks {
        let s = stream as usize;
        if s >= self.peaks.len() {
            self.peaks.resize(s + 1, StreamPeaks::default());
        }
        &mut self.peaks[s]
    }

    fn segment_made(&mut self, stream: u32, size: u64, ts: u64) {
        let p = self.stream_peaks(stream);
        p.segments_bytes = p.segments_bytes.saturating_add(size);
        if p.segments_bytes > p.segments_peak_bytes {
            p.segments_peak_bytes = p.segments_bytes;
            p.segments_peak_ts = ts;
        }
    }

    fn segment_released(&mut self, stream: u32, size: u64) {
        let p = self.stream_peaks(stream);
        p.segments_bytes = p.segments_bytes.saturating_sub(size);
    }

    fn allocated(&mut self, stream: u32, family: Family, now: &Totals, ts: u64) {
        let p = self.stream_peaks(stream);
        if family.on_device() {
            if now.device_bytes > p.device_bytes {
                p.device_bytes = now.device_bytes;
                p.device_ts = ts;
            }
        } else if now.host_bytes > p.host_bytes {
            p.host_bytes = now.host_bytes;
            p.host_ts = ts;
        }
    }

    fn released(&mut self, family: Family, alloc: usize, pos: usize) {
        if let Some(r) = &mut self.released {
            if family.on_device() {
                r.push((alloc, pos));
            }
        }
    }

    /// Ends the fold: `live` are the entries still in the live set (family, position of
    /// the allocation).
    pub fn finish(&mut self, live: impl Iterator<Item = (Family, usize)>) {
        self.live_at_end = live
            .filter(|(f, _)| f.on_device())
            .map(|(_, p)| p)
            .collect();
    }

    /// Reserves room for the lifetimes of `n` allocations at once (address space: pages
    /// are taken as releases fill them), so that the list never moves: growing a list
    /// of tens of MiB by doubling copies it into fresh pages each time. Nothing happens
    /// when lifetimes are not kept or the room cannot be had.
    pub fn reserve_lifetimes(&mut self, n: usize) {
        if let Some(r) = &mut self.released {
            let _ = r.try_reserve_exact(n.saturating_sub(r.len()));
        }
    }

    /// Whether the lifetimes are kept ([`Self::live_before`] answers).
    pub fn keeps_lifetimes(&self) -> bool {
        self.released.is_some()
    }

    /// The peaks of stream `stream` (zero for a stream without allocations).
    pub fn peaks(&self, stream: usize) -> StreamPeaks {
        self.peaks.get(stream).copied().unwrap_or_default()
    }

    /// The positions of the device allocations live just before the event at `pos` (made
    /// before it, released at it or later, or never), in no particular order. `None`
    /// when the lifetimes were not kept.
    pub fn live_before(&self, pos: usize) -> Option<impl Iterator<Item = usize> + '_> {
        let released = self.released.as_ref()?;
        // Released in order of position: those released before `pos` are a prefix.
        let from = released.partition_point(|&(_, r)| r < pos);
        let gone_later = released[from..]
            .iter()
            .filter(move |&&(a, _)| a < pos)
            .map(|&(a, _)| a);
        let never = self.live_at_end.iter().copied().filter(move |&a| a < pos);
        Some(gone_later.chain(never))
    }

    /// Where the fold stands now.
    pub fn mark(&self) -> HistoryMark {
        HistoryMark {
            peaks: self.peaks.clone(),
            released: self.released.as_ref().map_or(0, Vec::len),
        }
    }

    /// Goes back to `mark` (taken from this history, which has only grown since).
    pub fn rewind(&mut self, mark: &HistoryMark) {
        self.peaks.clone_from(&mark.peaks);
        if let Some(r) = &mut self.released {
            r.truncate(mark.released);
        }
        self.live_at_end.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::ProcKey;
    use memwatch_wire::{Api, EventKind, MemKind};

    fn ev(kind: EventKind, mem: MemKind, device: i32, ptr: u64, size: u64) -> MemEvent {
        MemEvent {
            proc: ProcKey { pid: 7, image: 0 },
            device,
            kind: Some(kind),
            mem: Some(mem),
            api: Api::Unknown,
            ptr,
            size,
            handle: None,
        }
    }

    /// Lists what a plain fold's live set holds just before each event and compares it
    /// with the history's answer.
    #[test]
    fn live_before_every_event_matches_a_fold_stopped_there() {
        use EventKind::{Alloc, Free};
        use MemKind::{Device, HostPinned, VmmPhysical};
        let events = vec![
            ev(Alloc, Device, 0, 0x10, 100),
            ev(Alloc, HostPinned, 0, 0x20, 5),
            ev(Alloc, Device, 1, 0x30, 300),
            ev(Free, Device, 0, 0x10, 0),
            // The same pointer handed out twice: the first is released by the second.
            ev(Alloc, Device, 0, 0x30, 40),
            ev(Alloc, VmmPhysical, 0, 0x40, 2048),
            ev(Free, HostPinned, 0, 0x20, 0),
            ev(Free, Device, 0, 0x99, 0),
            ev(Alloc, Device, 0, 0x10, 7),
        ];
        let h = LiveHistory::fold(
            events
                .iter()
                .enumerate()
                .map(|(i, e)| (*e, i as u64 * 10, e.device as u32)),
        );
        for stop in 0..=events.len() {
            let mut live: LiveSet<usize> = LiveSet::new();
            for (i, e) in events[..stop].iter().enumerate() {
                live.apply(e, i);
            }
            let mut want: Vec<usize> = live
                .iter()
                .filter(|(k, _)| k.family.on_device())
                .map(|(_, h)| h.data)
                .collect();
            want.sort_unstable();
            let mut got: Vec<usize> = h.live_before(stop).expect("kept").collect();
            got.sort_unstable();
            assert_eq!(got, want, "before event {stop}");
        }
        assert_eq!(h.peaks(0).device_bytes, 40 + 2048 + 7);
        assert_eq!(h.peaks(0).host_bytes, 5);
        assert_eq!((h.peaks(1).device_bytes, h.peaks(1).device_ts), (300, 20));
        assert_eq!(h.peaks(5), StreamPeaks::default());
    }

    #[test]
    fn rewinding_forgets_what_came_after_the_mark() {
        let mut h = LiveHistory::new(true);
        let mut live: LiveSet<usize> = LiveSet::new();
        let a = ev(EventKind::Alloc, MemKind::Device, 0, 1, 10);
        let f = ev(EventKind::Free, MemKind::Device, 0, 1, 0);
        let at = |pos| Allocation {
            pos,
            stream: 0,
            segment: false,
        };
        let c = live.apply(&a, 0);
        h.record(0, 0, 5, &a, &c, |p| at(*p));
        let mark = h.mark();
        let c = live.apply(&f, 1);
        h.record(1, 0, 6, &f, &c, |p| at(*p));
        let big = ev(EventKind::Alloc, MemKind::Device, 0, 2, 99);
        let c = live.apply(&big, 2);
        h.record(2, 0, 7, &big, &c, |p| at(*p));
        assert_eq!(h.peaks(0).device_bytes, 99);
        h.rewind(&mark);
        assert_eq!(h.peaks(0).device_bytes, 10);
        h.finish([(Family::Device, 0)].into_iter());
        assert_eq!(h.live_before(1).expect("kept").collect::<Vec<_>>(), vec![0]);
        assert!(LiveHistory::new(false).live_before(0).is_none());
    }
}
