//! API call statistics, capture-wide and per process image, folded event by event in
//! time order: each API's call durations (nearest-rank p50/p99, total, max), errors,
//! and how many calls of it were in progress at once, on how many (process, device)
//! pairs, with the stretches of time during which several were (the definitions are on
//! [`ApiStats`]). Checkpointed and rewound with the report's fold (`super::stats`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use memwatch_wire::{Api, EventKind};

use super::load::{Ev, ProcKey};
use super::stats::{ApiStats, DeviceStretch, MAX_STRETCHES};

/// Calls in progress per stream: dense (indexed by stream) for capture-wide overlap,
/// a short list for one process (which has few devices).
#[derive(Clone)]
enum StreamCounts {
    Dense { counts: Vec<u32>, distinct: u64 },
    Small(Vec<(u32, u32)>),
}

impl StreamCounts {
    fn inc(&mut self, s: u32) {
        match self {
            Self::Dense { counts, distinct } => {
                if s as usize >= counts.len() {
                    counts.resize(s as usize + 1, 0);
                }
                let c = &mut counts[s as usize];
                if *c == 0 {
                    *distinct += 1;
                }
                *c += 1;
            }
            Self::Small(v) => match v.iter_mut().find(|(k, _)| *k == s) {
                Some((_, c)) => *c += 1,
                None => v.push((s, 1)),
            },
        }
    }

    fn dec(&mut self, s: u32) {
        match self {
            Self::Dense { counts, distinct } => {
                let Some(c) = counts.get_mut(s as usize) else {
                    return;
                };
                *c = c.saturating_sub(1);
                if *c == 0 {
                    *distinct = distinct.saturating_sub(1);
                }
            }
            Self::Small(v) => {
                if let Some(i) = v.iter().position(|(k, _)| *k == s) {
                    v[i].1 -= 1;
                    if v[i].1 == 0 {
                        v.swap_remove(i);
                    }
                }
            }
        }
    }

    fn distinct(&self) -> u64 {
        match self {
            Self::Dense { distinct, .. } => *distinct,
            Self::Small(v) => v.len() as u64,
        }
    }
}

/// Sweep state for the overlap of one API's calls.
#[derive(Clone)]
struct Overlap {
    ends: BinaryHeap<Reverse<(u64, u32)>>,
    per_stream: StreamCounts,
    max_calls: u64,
    max_streams: u64,
    /// The multi-device stretch in progress: (from, most devices so far), raw ns.
    open: Option<(u64, u64)>,
    /// Closed stretches (raw ns), at most [`MAX_STRETCHES`].
    stretches: Vec<(u64, u64, u64)>,
    stretches_total: u64,
}

impl Overlap {
    fn new(per_stream: StreamCounts) -> Self {
        Self {
            ends: BinaryHeap::new(),
            per_stream,
            max_calls: 0,
            max_streams: 0,
            open: None,
            stretches: Vec::new(),
            stretches_total: 0,
        }
    }

    /// Takes the calls that ended by `t` off (all of them for `u64::MAX`), in end order.
    fn end_until(&mut self, t: u64) {
        while let Some(Reverse((end, s))) = self.ends.peek().copied() {
            if end > t {
                break;
            }
            self.ends.pop();
            self.per_stream.dec(s);
            if self.per_stream.distinct() < 2 {
                if let Some((from, most)) = self.open.take() {
                    self.stretches_total += 1;
                    if self.stretches.len() < MAX_STRETCHES {
                        self.stretches.push((from, end, most));
                    }
                }
            }
        }
    }

    /// Adds a call; calls must come in start order.
    fn add(&mut self, start: u64, dur: u64, stream: u32) {
        self.end_until(start);
        self.ends
            .push(Reverse((start.saturating_add(dur.max(1)), stream)));
        self.per_stream.inc(stream);
        self.max_calls = self.max_calls.max(self.ends.len() as u64);
        let devices = self.per_stream.distinct();
        self.max_streams = self.max_streams.max(devices);
        if devices >= 2 {
            let open = self.open.get_or_insert((start, devices));
            open.1 = open.1.max(devices);
        }
    }
}

struct ApiAcc {
    durations: Vec<u64>,
    errors: u64,
    overlap: Overlap,
}

/// Where an [`ApiAcc`] stood: durations are only added, so their count says it.
#[derive(Clone)]
struct ApiAccMark {
    durations: usize,
    errors: u64,
    overlap: Overlap,
}

impl ApiAcc {
    fn new(per_stream: StreamCounts) -> Self {
        Self {
            durations: Vec::new(),
            errors: 0,
            overlap: Overlap::new(per_stream),
        }
    }

    /// Adds a call; its duration is kept when `keep_duration` (the capture-wide
    /// accumulators take their processes' durations at the end).
    fn add(&mut self, e: &Ev, keep_duration: bool) {
        if keep_duration {
            self.durations.push(e.dur);
        }
        if matches!(
            e.kind(),
            Some(EventKind::AllocFailed | EventKind::FreeFailed)
        ) {
            self.errors += 1;
        }
        self.overlap.add(e.start(), e.dur, e.stream);
    }

    fn mark(&self) -> ApiAccMark {
        ApiAccMark {
            durations: self.durations.len(),
            errors: self.errors,
            overlap: self.overlap.clone(),
        }
    }

    fn rewind(&mut self, m: &ApiAccMark) {
        self.durations.truncate(m.durations);
        self.errors = m.errors;
        self.overlap.clone_from(&m.overlap);
    }

    fn finish(mut self, api: u16, base: u64) -> ApiStats {
        let mut durations = std::mem::take(&mut self.durations);
        self.finish_with(api, base, &mut durations)
    }

    /// The statistics, `durations` being the calls' durations (reordered).
    fn finish_with(&mut self, api: u16, base: u64, durations: &mut [u64]) -> ApiStats {
        self.overlap.end_until(u64::MAX);
        let n = durations.len();
        // Nearest rank: the value a sort would put at `rank - 1`, found without sorting
        // (selection; p99's rank is never below p50's, so it is looked for to the right).
        let rank = |p: usize| (p * n).div_ceil(100).max(1) - 1;
        let (mut p50, mut p99) = (0, 0);
        if n > 0 {
            let (r50, r99) = (rank(50), rank(99));
            let (_, v50, right) = durations.select_nth_unstable(r50);
            p50 = *v50;
            p99 = if r99 == r50 {
                p50
            } else {
                *right.select_nth_unstable(r99 - r50 - 1).1
            };
        }
        ApiStats {
            api: Api::from_u16(api).name().to_string(),
            count: n as u64,
            errors: self.errors,
            total_ns: durations.iter().fold(0u64, |s, d| s.saturating_add(*d)),
            p50_ns: p50,
            p99_ns: p99,
            max_ns: durations.iter().copied().max().unwrap_or(0),
            max_concurrent: self.overlap.max_calls,
            max_concurrent_devices: self.overlap.max_streams,
            concurrent_device_stretches: self
                .overlap
                .stretches
                .iter()
                .map(|&(from, until, most)| DeviceStretch {
                    from_ns: from.saturating_sub(base),
                    until_ns: until.saturating_sub(base),
                    max_devices: most,
                })
                .collect(),
            concurrent_device_stretches_total: self.overlap.stretches_total,
        }
    }
}

/// API statistics, capture-wide and per process image, fed events in time order; APIs,
/// streams and processes are taken in as they first appear.
pub(super) struct ApiTable {
    /// API number -> dense index (`u16::MAX`: not seen).
    dense: Vec<u16>,
    apis: Vec<u16>,
    /// Process of each stream, as a dense index into `procs`.
    proc_of_stream: Vec<u32>,
    procs: Vec<ProcKey>,
    global: Vec<ApiAcc>,
    /// `[proc][api]`, created on first use.
    per_proc: Vec<Vec<Option<ApiAcc>>>,
}

/// Where an [`ApiTable`] stood. APIs and processes taken in since stay known (the
/// events folded again bring them back); their figures start again from nothing.
#[derive(Clone)]
pub(super) struct ApiMark {
    global: Vec<ApiAccMark>,
    per_proc: Vec<Vec<Option<ApiAccMark>>>,
}

impl ApiTable {
    pub(super) fn new() -> Self {
        Self {
            dense: vec![u16::MAX; 1 << 16],
            apis: Vec::new(),
            proc_of_stream: Vec::new(),
            procs: Vec::new(),
            global: Vec::new(),
            per_proc: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, e: &Ev, streams: &[(ProcKey, i32)]) {
        let mut a = self.dense[e.api as usize];
        if a == u16::MAX {
            a = self.apis.len() as u16;
            self.dense[e.api as usize] = a;
            self.apis.push(e.api);
            self.global.push(ApiAcc::new(StreamCounts::Dense {
                counts: vec![0; streams.len()],
                distinct: 0,
            }));
        }
        let a = a as usize;
        self.global[a].add(e, false);
        if e.stream as usize >= self.proc_of_stream.len() {
            self.take_streams(streams);
        }
        let row = &mut self.per_proc[self.proc_of_stream[e.stream as usize] as usize];
        if a >= row.len() {
            row.resize_with(a + 1, || None);
        }
        row[a]
            .get_or_insert_with(|| ApiAcc::new(StreamCounts::Small(Vec::new())))
            .add(e, true);
    }

    /// Takes in the streams not seen yet.
    fn take_streams(&mut self, streams: &[(ProcKey, i32)]) {
        for &(proc_, _) in &streams[self.proc_of_stream.len()..] {
            let p = match self.procs.iter().position(|k| *k == proc_) {
                Some(p) => p,
                None => {
                    self.procs.push(proc_);
                    self.per_proc.push(Vec::new());
                    self.procs.len() - 1
                }
            };
            self.proc_of_stream.push(p as u32);
        }
    }

    pub(super) fn mark(&self) -> ApiMark {
        ApiMark {
            global: self.global.iter().map(ApiAcc::mark).collect(),
            per_proc: self
                .per_proc
                .iter()
                .map(|row| row.iter().map(|a| a.as_ref().map(ApiAcc::mark)).collect())
                .collect(),
        }
    }

    pub(super) fn rewind(&mut self, m: &ApiMark) {
        let mut marks = m.global.iter();
        for acc in &mut self.global {
            match marks.next() {
                Some(mark) => acc.rewind(mark),
                None => {
                    *acc = ApiAcc::new(StreamCounts::Dense {
                        counts: Vec::new(),
                        distinct: 0,
                    })
                }
            }
        }
        let mut rows = m.per_proc.iter();
        for row in &mut self.per_proc {
            let mut marks = rows.next().map(|r| r.iter()).into_iter().flatten();
            for slot in row.iter_mut() {
                match (slot.as_mut(), marks.next().and_then(Option::as_ref)) {
                    (Some(acc), Some(mark)) => acc.rewind(mark),
                    _ => *slot = None,
                }
            }
        }
    }

    /// Capture-wide list and per-process-image lists, each ordered by API number.
    pub(super) fn finish(self, base: u64) -> (Vec<ApiStats>, HashMap<ProcKey, Vec<ApiStats>>) {
        let mut order: Vec<usize> = (0..self.apis.len()).collect();
        order.sort_by_key(|&i| self.apis[i]);
        let mut global: Vec<Option<ApiAcc>> = self.global.into_iter().map(Some).collect();
        let mut per_proc = self.per_proc;
        let mut all = Vec::new();
        let mut per_pid: HashMap<ProcKey, Vec<ApiStats>> = HashMap::new();
        for &a in &order {
            if let Some(mut acc) = global[a].take() {
                // Every process's durations of this API (their order does not matter:
                // one process's are used where they are).
                let mut of_procs = per_proc
                    .iter_mut()
                    .filter_map(|row| row.get_mut(a).and_then(Option::as_mut));
                let stats = match (of_procs.next(), of_procs.next()) {
                    (Some(one), None) => acc.finish_with(self.apis[a], base, &mut one.durations),
                    _ => {
                        let mut all_durations: Vec<u64> = per_proc
                            .iter()
                            .filter_map(|row| row.get(a).and_then(Option::as_ref))
                            .flat_map(|acc| acc.durations.iter().copied())
                            .collect();
                        acc.finish_with(self.apis[a], base, &mut all_durations)
                    }
                };
                all.push(stats);
            }
            for (p, pid) in self.procs.iter().enumerate() {
                if let Some(acc) = per_proc[p].get_mut(a).and_then(Option::take) {
                    per_pid
                        .entry(*pid)
                        .or_default()
                        .push(acc.finish(self.apis[a], base));
                }
            }
        }
        (all, per_pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::MemKind;

    fn ev(ts: u64, dur: u64, stream: u32) -> Ev {
        Ev {
            ts,
            dur,
            ptr: 0,
            size: 0,
            stream,
            api: Api::HipStreamCreate.code(),
            kind: EventKind::ApiSpan.code(),
            mem: MemKind::None.code(),
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut acc = ApiAcc::new(StreamCounts::Small(Vec::new()));
        for d in (1..=100).rev() {
            acc.add(&ev(d * 1000, d, 0), true);
        }
        let s = acc.finish(Api::HipStreamCreate.code(), 0);
        assert_eq!(
            (s.p50_ns, s.p99_ns, s.max_ns, s.total_ns),
            (50, 99, 100, 5050)
        );
        let one = {
            let mut a = ApiAcc::new(StreamCounts::Small(Vec::new()));
            a.add(&ev(0, 7, 0), true);
            a.finish(0, 0)
        };
        assert_eq!((one.p50_ns, one.p99_ns), (7, 7));
    }

    #[test]
    fn overlap_is_half_open_and_counts_streams() {
        for counts in [
            StreamCounts::Small(Vec::new()),
            StreamCounts::Dense {
                counts: vec![0; 3],
                distinct: 0,
            },
        ] {
            overlap_case(Overlap::new(counts));
        }
    }

    fn overlap_case(mut o: Overlap) {
        o.add(0, 10, 0);
        o.add(10, 10, 1); // starts exactly when the first ends: no overlap
        assert_eq!((o.max_calls, o.max_streams), (1, 1));
        o.add(12, 0, 1); // zero-length call counts as 1 ns
        o.add(12, 5, 2);
        assert_eq!((o.max_calls, o.max_streams), (3, 2));
        // Streams 1 and 2 overlap from 12 until stream 2's call ends (17).
        o.add(30, 10, 0);
        o.add(35, 10, 1);
        o.add(36, 2, 2);
        o.end_until(u64::MAX);
        assert_eq!(o.stretches, vec![(12, 17, 2), (35, 40, 3)]);
        assert_eq!(o.stretches_total, 2);
    }
}
