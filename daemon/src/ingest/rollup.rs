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
#[derive(Debug, Clone, Default)]
pub struct Accumulator {
    open: [Option<Bucket>; LEVELS],
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
        for (level, slot) in self.open.iter_mut().enumerate() {
            let b = (rel_ns >> shift(level)) as i64;
            match slot {
                Some(open) if b <= open.bucket => {
                    open.lo = open.lo.min(after);
                    open.hi = open.hi.max(after);
                    open.last = after;
                }
                _ => {
                    if let (Some(open), Some(out)) = (slot.as_ref(), closed.as_deref_mut()) {
                        out.push(RollupRow { level, b: *open });
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

    /// The open buckets (stored with an upsert at each commit).
    pub fn open_rows(&self) -> impl Iterator<Item = RollupRow> + '_ {
        self.open
            .iter()
            .enumerate()
            .filter_map(|(level, b)| b.map(|b| RollupRow { level, b }))
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
