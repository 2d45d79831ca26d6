//! Folding a capture while it is written, so that its report and the OOM doctor's live
//! set are ready moments after the program ends (`memwatch run`): the same [`Loaded`],
//! report and [`LiveHistory`] as reading the finished file back and folding it, with
//! little left to do at the end.
//!
//! Records come in file order (the capture sink hands over each frame it writes). They
//! build the [`Loaded`] as [`super::load`] would. Its events are put in time order (a
//! stable sort by `ts` of the file order, as [`super::analyze`] sorts them) and folded
//! into a [`ReportFold`] as soon as no event still to come can precede them. A thread's
//! calls reach the file in the order it made them, so events up to the latest time of
//! every thread still making calls are folded in batches; a thread silent for a while
//! (its latest event far behind the newest, and many events of others since: idle, or
//! inside a long call, as an API span is stamped when the call started but written when
//! it returned) is not waited for. Before each batch the fold is
//! checkpointed, and an event older than what was folded already sends the fold back to
//! the last checkpoint before its place (or to the start), puts it in place and folds
//! again from there; the time a thread may be silent before it is not waited for grows
//! with the lateness seen, so this stays rare. What is right never depends on timing:
//! any arrival order gives the result of sorting the whole file; only the work left for
//! the end does.
//!
//! Owns none of the rules it applies (loading, free matching, the report's figures): it
//! only decides when to fold what.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;

use memwatch_wire::Record;

use super::devices::{add_pool_sizes, PoolSizes};
use super::load::{Ev, FileFacts, LoadBuilder, Loaded};
use super::stats::{CaptureReport, ReportCheckpoint, ReportFold, ReportOptions};
use crate::live::LiveHistory;

/// New events between two attempts to fold: each attempt sorts them, so a batch is big
/// enough to sort efficiently and small enough to keep little for the end.
const BATCH_EVENTS: usize = 1 << 16;

/// A thread is not waited for once its latest event is this far behind the newest one
/// (ns)...
const FIRST_IDLE_NS: u64 = 100_000_000;

/// ... and this many events of other threads came since (a busy thread's events come
/// in bursts, one per flush of its buffer). Both double when an event comes after its
/// place was folded...
const FIRST_IDLE_EVENTS: u64 = 1 << 18;

/// ... up to these: an event later than this is put in place by going back to a
/// checkpoint, never by holding everything back longer.
const MAX_IDLE_NS: u64 = 2_000_000_000;
const MAX_IDLE_EVENTS: u64 = 1 << 26;

/// Buffers of runs taken whole kept for the next fresh events (fresh memory costs page
/// faults).
const SPARE_RUNS: usize = 4;

/// Checkpoints kept (the newest ones, one per folded batch; an event older than all of
/// them folds everything again).
const CHECKPOINTS: usize = 32;

/// What folding while the capture was written saved, and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoldStats {
    /// Events in the capture.
    pub events: u64,
    /// Events folded after the capture was complete ([`CaptureFold::finish`]).
    pub folded_at_end: u64,
    /// Events that arrived after events later than them were folded.
    pub late_events: u64,
    /// Events folded again because late ones had to be put before them.
    pub refolded: u64,
    /// Entries the checkpoints copied (live allocations, live PJRT buffers, per-stream
    /// figures): at most the events folded (see `CaptureFold::checkpoint`).
    pub copied: u64,
}

/// Why a fold gave up (then the file is read back, as without a fold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GaveUp {
    /// Holding the events would take more memory than the fold may use.
    #[error("more events than the fold may hold in memory")]
    TooManyEvents,
    /// A process exec'd another image (a second `process_start` of its pid): its
    /// streams are numbered in file order, which the fold does not keep.
    #[error("a process exec'd another image")]
    Exec,
}

/// A capture folded while written; see the module docs.
pub struct CaptureFold {
    builder: LoadBuilder,
    opts: ReportOptions,
    /// Events in time order; `report` has folded all of them.
    done: Vec<Ev>,
    /// Events not folded yet: sorted runs, each holding events that arrived after those
    /// of the runs before it.
    runs: VecDeque<Run>,
    /// Emptied buffers, for the next runs.
    spare: Vec<Vec<Ev>>,
    /// A batch that comes before folded events, being put in place.
    scratch: Vec<Ev>,
    report: ReportFold,
    /// The empty fold's checkpoint, and the newest ones (one before each batch).
    start: ReportCheckpoint,
    checkpoints: VecDeque<ReportCheckpoint>,
    newest_ts: u64,
    /// Events up to this time were taken to be folded (it only goes forward)...
    bound_ts: u64,
    /// ... when this was the newest time seen.
    bound_newest_ts: u64,
    idle_ns: u64,
    idle_events: u64,
    file: FileFacts,
    max_events: usize,
    batch_events: usize,
    /// Each pid's first `process_start` anchor.
    anchors: std::collections::HashMap<u32, u64>,
    /// The PJRT allocator's pool sizes so far (the per-device view's kinds depend on
    /// them), from the first `pjrt_stats_seen` samples.
    pool_sizes: PoolSizes,
    pjrt_stats_seen: usize,
    gave_up: Option<GaveUp>,
    stats: FoldStats,
}

struct Run {
    events: Vec<Ev>,
    /// Events before this one were taken.
    start: usize,
}

impl Run {
    fn rest(&self) -> &[Ev] {
        &self.events[self.start..]
    }
}

/// A capture folded to its end.
pub struct Folded {
    /// The capture, its events in time order.
    pub loaded: Loaded,
    pub report: CaptureReport,
    /// The fold's live set history, lifetimes kept (for the OOM doctor).
    pub history: LiveHistory,
    pub stats: FoldStats,
}

impl CaptureFold {
    /// An empty fold of the capture that will be at `path`, reported with `opts`. It
    /// gives up (drops what it holds; the file is read back instead, see
    /// [`Self::finish`]) past `max_events` events, or when a process exec's another
    /// image.
    pub fn new(path: &Path, opts: &ReportOptions, max_events: usize) -> Self {
        let report = ReportFold::new(opts, true);
        Self {
            builder: LoadBuilder::new(path),
            opts: opts.clone(),
            done: Vec::new(),
            runs: VecDeque::new(),
            spare: Vec::new(),
            scratch: Vec::new(),
            start: report.checkpoint(),
            report,
            checkpoints: VecDeque::new(),
            newest_ts: 0,
            bound_ts: 0,
            bound_newest_ts: 0,
            idle_ns: FIRST_IDLE_NS,
            idle_events: FIRST_IDLE_EVENTS,
            file: FileFacts {
                bytes: memwatch_wire::PREAMBLE_LEN as u64,
                ..FileFacts::default()
            },
            max_events,
            batch_events: BATCH_EVENTS,
            anchors: Default::default(),
            pool_sizes: PoolSizes::default(),
            pjrt_stats_seen: 0,
            gave_up: None,
            stats: FoldStats::default(),
        }
    }

    /// Folds every `n` new events instead of [`BATCH_EVENTS`] (at least 1): tests use
    /// small batches to go through late events and checkpoints on small captures.
    pub fn batch_events(mut self, n: usize) -> Self {
        self.batch_events = n.max(1);
        self
    }

    /// The next frame written to the file: `record`, and the size of the wire bytes it
    /// came in ([`WireSize::of`]).
    pub fn frame(&mut self, record: &Record, size: WireSize) {
        if self.gave_up.is_some() {
            return;
        }
        if let Record::ProcessStart(s) = record {
            // A shim that reconnects repeats its start, anchor included: not an exec.
            if *self.anchors.entry(s.pid).or_insert(s.mono_anchor_ns) != s.mono_anchor_ns {
                self.give_up(GaveUp::Exec);
                return;
            }
        }
        self.file.frames += size.frames;
        self.file.unknown_frames += size.frames.saturating_sub(1);
        self.file.bytes += size.bytes;
        self.builder.record(record);
        let new = self.builder.events_mut().len();
        if self.done.len() + self.runs.iter().map(|r| r.events.len()).sum::<usize>() + new
            > self.max_events
        {
            self.give_up(GaveUp::TooManyEvents);
            return;
        }
        if new >= self.batch_events {
            self.fold_ready();
        }
    }

    /// Whether the fold gave up, and why.
    pub fn gave_up(&self) -> Option<GaveUp> {
        self.gave_up
    }

    /// Drops everything held; later frames are ignored.
    fn give_up(&mut self, why: GaveUp) {
        self.gave_up = Some(why);
        self.builder = LoadBuilder::new(Path::new(""));
        self.done = Vec::new();
        self.runs = VecDeque::new();
        self.spare = Vec::new();
        self.scratch = Vec::new();
        self.checkpoints = VecDeque::new();
        self.report = ReportFold::new(&self.opts, false);
        self.start = self.report.checkpoint();
    }

    /// Sorts the fresh events into a run, and folds what no thread still making calls
    /// can precede.
    fn fold_ready(&mut self) {
        if self.done.capacity() == 0 {
            self.reserve_done();
        }
        self.take_fresh();
        let horizon = self.newest_ts.saturating_sub(self.idle_ns);
        let recent = self.builder.events_read().saturating_sub(self.idle_events);
        let bound = self
            .builder
            .thread_times()
            .filter(|&(t, seen)| t >= horizon || seen >= recent)
            .map(|(t, _)| t)
            .min()
            .unwrap_or(horizon);
        if bound > self.bound_ts {
            self.bound_ts = bound;
            self.bound_newest_ts = self.newest_ts;
        }
        self.take_pool_sizes();
        self.fold_until(Some(self.bound_ts));
    }

    /// Reserves room for as many events as the fold may hold, once: address space only
    /// (pages are taken as events fill them), so that the folded events never move.
    /// Growing a vector of hundreds of MiB by doubling copies it each time into fresh
    /// pages the kernel must zero, which was most of the fold's work on a 10M-event
    /// capture. Where the room cannot be had, the vector grows as usual. The same for
    /// the allocations' lifetimes (at most one per event).
    fn reserve_done(&mut self) {
        if self.done.try_reserve_exact(self.max_events).is_ok() {
            self.report.reserve_lifetimes(self.max_events);
        }
    }

    /// Takes in the pool sizes of the PJRT samples read since the last call; a new one
    /// can change the kind of an allocation already folded, so everything folded is
    /// folded again from the start (a pool size is known early in a run, so this is
    /// rare and cheap).
    fn take_pool_sizes(&mut self) {
        let stats = self.builder.pjrt_stats();
        if stats.len() == self.pjrt_stats_seen {
            return;
        }
        let added = add_pool_sizes(&mut self.pool_sizes, &stats[self.pjrt_stats_seen..]);
        self.pjrt_stats_seen = stats.len();
        if !added || !self.report.set_pool_sizes(&self.pool_sizes) || self.done.is_empty() {
            return;
        }
        self.report.restore(&self.start);
        self.checkpoints.clear();
        self.stats.refolded += self.done.len() as u64;
        self.report.add_all(&self.done, self.builder.context());
    }

    /// Moves the events read since the last batch into a run of their own, sorted.
    fn take_fresh(&mut self) {
        let spare = self.spare.pop().unwrap_or_default();
        let mut fresh = std::mem::replace(self.builder.events_mut(), spare);
        if let Some(t) = fresh.iter().map(|e| e.ts).max() {
            self.newest_ts = self.newest_ts.max(t);
        }
        if fresh.is_empty() {
            self.spare.push(fresh);
            return;
        }
        fresh.sort_by_key(|e| e.ts);
        self.runs.push_back(Run {
            events: fresh,
            start: 0,
        });
    }

    /// Takes the events up to `bound` (all: `None`) out of the runs and folds them: after
    /// the folded events, or, when some come before them, from the last checkpoint
    /// before their place.
    fn fold_until(&mut self, bound: Option<u64>) {
        let within = |e: &Ev| bound.is_none_or(|b| e.ts <= b);
        let ends: Vec<usize> = self
            .runs
            .iter()
            .map(|r| r.start + r.rest().partition_point(within))
            .collect();
        let first = self
            .runs
            .iter()
            .zip(&ends)
            .filter(|(r, &end)| r.start < end)
            .map(|(r, _)| r.events[r.start].ts)
            .min();
        let Some(first) = first else {
            return;
        };
        let from = match self.done.last().map(|e| e.ts) {
            Some(t) if first < t => {
                let mut batch = std::mem::take(&mut self.scratch);
                batch.clear();
                merge_runs(&mut self.runs, &ends, &mut batch);
                let from = self.rewind_for(&batch, t);
                let folded = self.done.split_off(from);
                self.stats.refolded += folded.len() as u64;
                merge_into(&mut self.done, &folded, &batch);
                self.scratch = batch;
                from
            }
            _ => {
                self.checkpoint();
                let from = self.done.len();
                merge_runs(&mut self.runs, &ends, &mut self.done);
                from
            }
        };
        // Runs taken whole are kept for the next fresh events.
        while self.runs.front().is_some_and(|r| r.start == r.events.len()) {
            if let Some(mut r) = self.runs.pop_front() {
                if self.spare.len() < SPARE_RUNS {
                    r.events.clear();
                    self.spare.push(r.events);
                }
            }
        }
        debug_assert_eq!(self.report.len(), from);
        self.report.add_all(&self.done, self.builder.context());
    }

    /// A batch (in time order, later in the file than what was folded) has events before
    /// the last folded one's time `t`: goes back to the last checkpoint before the place
    /// of its earliest and returns that position; waits longer for silent threads.
    fn rewind_for(&mut self, batch: &[Ev], t: u64) -> usize {
        let first = batch.first().map_or(t, |e| e.ts);
        // Where the earliest goes: after every folded event of its time or earlier
        // (those came first in the file).
        let at = self.done.partition_point(|e| e.ts <= first);
        self.stats.late_events += batch.partition_point(|b| b.ts < t) as u64;
        // Waiting for threads silent for up to `needed` would have kept it in place.
        let needed = self.bound_newest_ts.saturating_sub(first);
        self.idle_ns = self.idle_ns.max(needed.saturating_mul(2)).min(MAX_IDLE_NS);
        self.idle_events = self.idle_events.saturating_mul(2).min(MAX_IDLE_EVENTS);
        while self.checkpoints.back().is_some_and(|c| c.position() > at) {
            self.checkpoints.pop_back();
        }
        let c = self.checkpoints.back().unwrap_or(&self.start);
        self.report.restore(c);
        c.position()
    }

    /// Checkpoints the fold before a batch, unless fewer events were folded since the
    /// last checkpoint than a checkpoint copies: then the copies never cost more than
    /// the fold (a run that keeps a million buffers live would otherwise copy them
    /// before every batch) and the kept checkpoints hold no more entries than the
    /// events folded.
    fn checkpoint(&mut self) {
        let last = self
            .checkpoints
            .back()
            .map_or(self.start.position(), |c| c.position());
        let since = self.report.len().saturating_sub(last);
        if since < self.report.checkpoint_size() {
            return;
        }
        if self.checkpoints.len() == CHECKPOINTS {
            self.checkpoints.pop_front();
        }
        self.stats.copied += self.report.checkpoint_size() as u64;
        self.checkpoints.push_back(self.report.checkpoint());
    }

    /// Folds the rest (the capture is complete) and finishes the report; if the fold
    /// gave up, says why (then read the file back).
    pub fn finish(mut self) -> Result<Folded, GaveUp> {
        if let Some(why) = self.gave_up {
            return Err(why);
        }
        let refolded = self.stats.refolded;
        self.take_fresh();
        self.take_pool_sizes();
        let held: usize = self.runs.iter().map(|r| r.rest().len()).sum();
        self.fold_until(None);
        let mut stats = self.stats;
        stats.folded_at_end = held as u64 + (stats.refolded - refolded);
        let (loaded, split) = self.builder.finish(self.done, self.file);
        if split {
            // Not reached: a second image's start made the fold give up.
            return Err(GaveUp::Exec);
        }
        stats.events = loaded.events.len() as u64;
        let (mut report, history) = self.report.finish(&loaded);
        report.tags = loaded.tags.clone();
        Ok(Folded {
            loaded,
            report,
            history,
            stats,
        })
    }
}

/// Appends `a` and `b` (each in time order) to `out` in time order; equal times take
/// `a`'s first.
fn merge_into(out: &mut Vec<Ev>, a: &[Ev], b: &[Ev]) {
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j].ts < a[i].ts {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// Appends the events of each run up to its `ends` entry to `out`, in time order (equal
/// times: the earlier run first, so file order is kept).
fn merge_runs(runs: &mut VecDeque<Run>, ends: &[usize], out: &mut Vec<Ev>) {
    let total: usize = runs.iter().zip(ends).map(|(r, &end)| end - r.start).sum();
    out.reserve(total);
    let mut heads: BinaryHeap<Reverse<(u64, usize)>> = runs
        .iter()
        .enumerate()
        .filter(|(i, r)| r.start < ends[*i])
        .map(|(i, r)| Reverse((r.events[r.start].ts, i)))
        .collect();
    while let Some(Reverse((_, i))) = heads.pop() {
        let r = &mut runs[i];
        let end = ends[i];
        // Take this run's events while they come before the next run's head.
        let limit = heads.peek().map(|Reverse(h)| *h);
        let from = r.start;
        let mut to = from + 1;
        while to < end {
            match limit {
                Some(next) if (r.events[to].ts, i) > next => break,
                _ => to += 1,
            }
        }
        out.extend_from_slice(&r.events[from..to]);
        r.start = to;
        if to < end {
            heads.push(Reverse((r.events[to].ts, i)));
        }
    }
}

/// The wire bytes one record came in, as a capture sink receives them: whole frames,
/// those of types this build does not know first, the record's last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireSize {
    pub frames: u64,
    pub bytes: u64,
}

impl WireSize {
    /// Counts the frames of `bytes` by their lengths (each frame: a little-endian
    /// payload length, then type, payload and CRC: length + 8 bytes).
    pub fn of(bytes: &[u8]) -> Self {
        let mut frames = 0;
        let mut at = 0usize;
        while let Some(len) = bytes.get(at..at + 4) {
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            at = at.saturating_add(len).saturating_add(8);
            frames += 1;
        }
        Self {
            frames,
            bytes: bytes.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_counted_by_their_lengths() {
        assert_eq!(WireSize::of(&[]), WireSize::default());
        // Two frames: payload lengths 1 and 3 (type byte included), each + 8 bytes.
        let mut b = vec![1, 0, 0, 0, 9, 0, 0, 0, 0];
        b.extend([3, 0, 0, 0, 2, 7, 7, 0, 0, 0, 0]);
        assert_eq!(
            WireSize::of(&b),
            WireSize {
                frames: 2,
                bytes: 20
            }
        );
    }

    fn ev(ts: u64) -> Ev {
        Ev {
            ts,
            dur: 0,
            ptr: 0,
            size: 0,
            stream: 0,
            api: 0,
            kind: 0,
            mem: 0,
        }
    }

    #[test]
    fn merging_keeps_the_first_list_first_on_equal_times() {
        let mut out = Vec::new();
        let mut a = vec![ev(1), ev(3), ev(3)];
        a[1].ptr = 1;
        a[2].ptr = 2;
        let mut b = vec![ev(0), ev(3), ev(9)];
        b[1].ptr = 3;
        merge_into(&mut out, &a, &b);
        let got: Vec<(u64, u64)> = out.iter().map(|e| (e.ts, e.ptr)).collect();
        assert_eq!(got, vec![(0, 0), (1, 0), (3, 1), (3, 2), (3, 3), (9, 0)]);
    }
}
