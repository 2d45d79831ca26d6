//! Multi-resolution rollups of a device's live bytes, built while ingesting.
//!
//! Level `k` cuts time since the run's start into buckets of `2^(18 + 2k)` ns (262 µs at
//! level 0, ×4 per level, 16 levels: the coarsest bucket is about 80 days). Each bucket
//! keeps the minimum, maximum and last live-bytes value of the step function over the
//! bucket, so a timeline read from any level shows every peak (the maximum survives
//! downsampling). Owns only the arithmetic; `ingest` writes the rows.

/// Number of levels.
pub const LEVELS: usize = 16;
/// log2 of the level-0 bucket width in ns.
pub const BASE_SHIFT: u32 = 18;
/// log2 of the factor between levels.
pub const LEVEL_SHIFT: u32 = 2;

/// log2 of the bucket width of `level`.
pub fn shift(level: usize) -> u32 {
    BASE_SHIFT + LEVEL_SHIFT * level as u32
}

/// Bucket width of `level` in ns.
pub fn width(level: usize) -> u64 {
    1u64 << shift(level)
}

/// The coarsest level whose buckets are no wider than `want_ns`, or `None` when even
/// level 0 is too coarse (then the raw events are read).
pub fn level_for(want_ns: u64) -> Option<usize> {
    (0..LEVELS).rev().find(|&l| width(l) <= want_ns)
}

/// One bucket: min/max/last live bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub bucket: i64,
    pub lo: i64,
    pub hi: i64,
    pub last: i64,
}

/// A closed or open bucket of one level, ready to be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupRow {
    pub level: usize,
    pub b: Bucket,
}

/// The open bucket of every level for one device.
///
/// Buckets nest (a level-k bucket is four level-(k-1) buckets), so an event that falls in
/// level 0's open bucket falls in every level's: only level 0 is updated then, and a
/// coarser level takes in its finer level's bucket when that one closes. So `open[k]`
/// for k > 0 holds level k's bucket less what `open[k - 1]` (and below) holds; the full
/// bucket is the two folded together ([`Accumulator::open_rows`]). The rows are the
/// same as updating every level on every event, at a sixteenth of the work per event.
#[derive(Debug, Clone, Default)]
pub struct Accumulator {
    open: [Option<Bucket>; LEVELS],
}

/// A coarser level's stored part folded with its finer level's full bucket (the later
/// events, so its `last` wins).
fn fold(coarse: Option<Bucket>, fine: Option<Bucket>) -> Option<Bucket> {
    match (coarse, fine) {
        (Some(c), Some(f)) => Some(Bucket {
            bucket: c.bucket,
            lo: c.lo.min(f.lo),
            hi: c.hi.max(f.hi),
            last: f.last,
        }),
        (c, None) => c,
        (None, f) => f,
    }
}

impl Accumulator {
    /// Live bytes changed from `before` to `after` at `rel_ns` (ns since the run's start).
    /// Buckets that close are pushed to `closed` when given. An event older than a
    /// level's open bucket (processes interleave slightly) is folded into the open bucket.
    pub fn record(
        &mut self,
        rel_ns: u64,
        before: i64,
        after: i64,
        mut closed: Option<&mut Vec<RollupRow>>,
    ) {
        if let Some(open) = &mut self.open[0] {
            if (rel_ns >> shift(0)) as i64 <= open.bucket {
                open.lo = open.lo.min(after);
                open.hi = open.hi.max(after);
                open.last = after;
                return;
            }
        }
        // Level 0 moves on: the levels whose open bucket ends here close (finest first),
        // the first one that holds the event takes in the full bucket of the level
        // below it; every level below that opens a bucket with the event.
        let mut finer: Option<Bucket> = None;
        for level in 0..LEVELS {
            let b = (rel_ns >> shift(level)) as i64;
            let full = fold(self.open[level], finer);
            match full {
                Some(f) if b <= f.bucket => {
                    self.open[level] = fold(self.open[level], finer);
                    return;
                }
                _ => {
                    if let (Some(f), Some(out)) = (full, closed.as_deref_mut()) {
                        out.push(RollupRow { level, b: f });
                    }
                    finer = full;
                    self.open[level] = Some(Bucket {
                        bucket: b,
                        lo: before.min(after),
                        hi: before.max(after),
                        last: after,
                    });
                }
            }
        }
    }

    /// The open buckets (stored with an upsert at each commit).
    pub fn open_rows(&self) -> impl Iterator<Item = RollupRow> + '_ {
        let mut finer: Option<Bucket> = None;
        self.open.iter().enumerate().filter_map(move |(level, b)| {
            let full = fold(*b, finer);
            finer = full;
            full.map(|b| RollupRow { level, b })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_choice() {
        assert_eq!(level_for(1000), None);
        assert_eq!(level_for(width(0)), Some(0));
        assert_eq!(level_for(width(3) + 1), Some(3));
        assert_eq!(level_for(u64::MAX), Some(LEVELS - 1));
    }

    /// Every level updated on every event: what [`Accumulator`] must give.
    #[derive(Default)]
    struct EveryLevel {
        open: [Option<Bucket>; LEVELS],
    }

    impl EveryLevel {
        fn record(&mut self, rel_ns: u64, before: i64, after: i64, closed: &mut Vec<RollupRow>) {
            for (level, slot) in self.open.iter_mut().enumerate() {
                let b = (rel_ns >> shift(level)) as i64;
                match slot {
                    Some(open) if b <= open.bucket => {
                        open.lo = open.lo.min(after);
                        open.hi = open.hi.max(after);
                        open.last = after;
                    }
                    _ => {
                        if let Some(open) = slot.as_ref() {
                            closed.push(RollupRow { level, b: *open });
                        }
                        *slot = Some(Bucket {
                            bucket: b,
                            lo: before.min(after),
                            hi: before.max(after),
                            last: after,
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn the_nested_update_gives_the_rows_of_updating_every_level() {
        // Steps from 1 ns to well past the coarsest bucket, some events older than the
        // open bucket, a pseudo-random walk of live bytes.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for run in 0..40 {
            let (mut fast, mut slow) = (Accumulator::default(), EveryLevel::default());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let (mut t, mut live) = (0u64, 0i64);
            for i in 0..2_000 {
                let r = next();
                let step = match r % 7 {
                    0 => 1u64 << (18 + (r >> 8) % 40).min(62),
                    1 | 2 => (r >> 3) % (1 << 20),
                    _ => (r >> 3) % 4_096,
                };
                t = t.saturating_add(step);
                let at = if r % 11 == 0 {
                    t.saturating_sub(r % (1 << 22))
                } else {
                    t
                };
                let before = live;
                live += (r >> 20) as i64 % 1_000 - 480;
                fast.record(at, before, live, Some(&mut a));
                slow.record(at, before, live, &mut b);
                if i % 97 == 0 {
                    let open: Vec<RollupRow> = fast.open_rows().collect();
                    let want: Vec<RollupRow> = slow
                        .open
                        .iter()
                        .enumerate()
                        .filter_map(|(level, b)| b.map(|b| RollupRow { level, b }))
                        .collect();
                    assert_eq!(open, want, "run {run} event {i}");
                }
            }
            assert_eq!(a, b, "run {run}");
        }
    }

    #[test]
    fn peaks_survive_and_buckets_close() {
        let mut acc = Accumulator::default();
        let mut closed = Vec::new();
        acc.record(10, 0, 100, Some(&mut closed));
        acc.record(20, 100, 5000, Some(&mut closed));
        acc.record(30, 5000, 50, Some(&mut closed));
        assert!(closed.is_empty());
        let l0: Vec<_> = acc.open_rows().filter(|r| r.level == 0).collect();
        assert_eq!(
            l0[0].b,
            Bucket {
                bucket: 0,
                lo: 0,
                hi: 5000,
                last: 50
            }
        );
        acc.record(width(0) + 1, 50, 60, Some(&mut closed));
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].b.hi, 5000);
        let l1: Vec<_> = acc.open_rows().filter(|r| r.level == 1).collect();
        assert_eq!(
            l1[0].b,
            Bucket {
                bucket: 0,
                lo: 0,
                hi: 5000,
                last: 60
            }
        );
    }
}
