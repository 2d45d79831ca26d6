//! The framework view's rollup arithmetic: value series (a step function, e.g. bytes in
//! use) and count series (executions) cut into buckets of `2^(18 + 2k)` ns at every level
//! `k` from a base level up, each bucket keeping min / max / last (counts: number and busy
//! ns), so a chart read at any level shows every peak. Pure: fed changes in time order,
//! it hands back the rows `build` writes.

use std::collections::HashMap;

use crate::ingest::rollup::{shift, LEVELS};

use super::series;

/// One `framework_rollups` row (without run and device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    pub series: i64,
    pub level: i64,
    pub bucket: i64,
    pub lo: i64,
    pub hi: i64,
    pub last: i64,
}

#[derive(Clone, Copy)]
struct Open {
    bucket: i64,
    lo: i64,
    hi: i64,
    last: i64,
}

/// The base level for a run `duration_ns` long: the finest whose buckets number at most
/// 2^14 over the run (a chart reads a few thousand at most).
pub(crate) fn base_level(duration_ns: u64) -> usize {
    (0..LEVELS)
        .find(|&l| duration_ns >> shift(l) <= 1 << 14)
        .unwrap_or(LEVELS - 1)
}

/// Builds the rows of every series from changes given in time order (times relative to
/// the run's start).
pub(crate) struct Rollups {
    base: usize,
    top: usize,
    index: HashMap<i64, usize>,
    values: Vec<i64>,
    open: Vec<[Option<Open>; LEVELS]>,
    names: Vec<i64>,
    done: Vec<Row>,
}

impl Rollups {
    /// Rollups from level `base` up to the first level whose one bucket holds
    /// `duration_ns` (and one more, so the whole run reads as a single bucket).
    pub(crate) fn new(base: usize, duration_ns: u64) -> Self {
        let top = (base..LEVELS)
            .find(|&l| duration_ns >> shift(l) == 0)
            .map_or(LEVELS - 1, |l| (l + 1).min(LEVELS - 1));
        Self {
            base,
            top,
            index: HashMap::new(),
            values: Vec::new(),
            open: Vec::new(),
            names: Vec::new(),
            done: Vec::new(),
        }
    }

    fn slot(&mut self, s: i64) -> usize {
        if let Some(&i) = self.index.get(&s) {
            return i;
        }
        let i = self.values.len();
        self.index.insert(s, i);
        self.values.push(0);
        self.open.push([None; LEVELS]);
        self.names.push(s);
        i
    }

    /// The current value of a value series (0 before its first change).
    pub(crate) fn value(&self, s: i64) -> i64 {
        self.index.get(&s).map_or(0, |&i| self.values[i])
    }

    /// Value series `s` becomes `value` at `t`.
    pub(crate) fn set(&mut self, s: i64, t: u64, value: i64) {
        let i = self.slot(s);
        let prev = self.values[i];
        self.values[i] = value;
        for level in self.base..=self.top {
            let b = (t >> shift(level)) as i64;
            match &mut self.open[i][level] {
                Some(o) if o.bucket == b => {
                    o.lo = o.lo.min(value);
                    o.hi = o.hi.max(value);
                    o.last = value;
                }
                slot => {
                    if let Some(o) = slot.take() {
                        self.done.push(row(s, level, o));
                    }
                    *slot = Some(Open {
                        bucket: b,
                        lo: prev.min(value),
                        hi: prev.max(value),
                        last: value,
                    });
                }
            }
        }
    }

    /// Value series `s` changes by `delta` at `t`.
    pub(crate) fn add(&mut self, s: i64, t: u64, delta: i64) {
        let v = self.value(s).saturating_add(delta);
        self.set(s, t, v);
    }

    /// Count series `s` gains one occurrence at `t`, busy for `busy_ns`.
    pub(crate) fn count(&mut self, s: i64, t: u64, busy_ns: i64) {
        debug_assert!(series::is_count(s));
        let i = self.slot(s);
        for level in self.base..=self.top {
            let b = (t >> shift(level)) as i64;
            match &mut self.open[i][level] {
                Some(o) if o.bucket == b => {
                    o.lo += 1;
                    o.hi = o.hi.saturating_add(busy_ns);
                }
                slot => {
                    if let Some(o) = slot.take() {
                        self.done.push(row(s, level, o));
                    }
                    *slot = Some(Open {
                        bucket: b,
                        lo: 1,
                        hi: busy_ns,
                        last: 0,
                    });
                }
            }
        }
    }

    /// Every row, the open buckets closed.
    pub(crate) fn finish(mut self) -> Vec<Row> {
        for (i, levels) in self.open.iter().enumerate() {
            for (level, o) in levels.iter().enumerate() {
                if let Some(o) = o {
                    self.done.push(row(self.names[i], level, *o));
                }
            }
        }
        self.done
    }
}

fn row(series: i64, level: usize, o: Open) -> Row {
    Row {
        series,
        level: level as i64,
        bucket: o.bucket,
        lo: o.lo,
        hi: o.hi,
        last: o.last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::rollup::width;

    #[test]
    fn a_short_spike_survives_at_every_level() {
        let dur = 10 * width(6);
        let base = base_level(dur);
        let mut r = Rollups::new(base, dur);
        r.set(series::IN_USE, 5, 100);
        // A 1 ns spike to 1 GiB in the middle of the run, back to 100 at once.
        let mid = dur / 2;
        r.set(series::IN_USE, mid, 1 << 30);
        r.set(series::IN_USE, mid + 1, 100);
        r.set(series::IN_USE, dur - 1, 50);
        let rows = r.finish();
        for level in base..LEVELS {
            let at: Vec<&Row> = rows.iter().filter(|x| x.level == level as i64).collect();
            if at.is_empty() {
                continue;
            }
            assert!(
                at.iter().any(|x| x.hi == 1 << 30),
                "level {level} lost the spike"
            );
            assert_eq!(
                at.iter().map(|x| x.bucket).max().map(|b| b as u64),
                Some((dur - 1) >> shift(level))
            );
        }
    }

    #[test]
    fn counts_add_up_per_bucket() {
        let mut r = Rollups::new(0, width(3));
        for k in 0..10u64 {
            r.count(series::EXECUTIONS, k * 10, 7);
        }
        let rows = r.finish();
        let l0: Vec<&Row> = rows.iter().filter(|x| x.level == 0).collect();
        assert_eq!(l0.len(), 1);
        assert_eq!((l0[0].lo, l0[0].hi), (10, 70));
    }
}
