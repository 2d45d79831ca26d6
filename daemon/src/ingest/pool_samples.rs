//! The framework allocator's bytes in use over time, per (pid, device) of one run, as
//! stored so far (`pjrt_memory_stats`): answers "the last sample at or before t" in
//! memory for the incident of a failed execute, the answer the database would give.
//!
//! Bounded: each (pid, device) keeps its latest [`KEEP`] samples by time; older ones are
//! dropped, and a question about a time before them is answered [`Lookup::Ask`] (the
//! caller asks the database). A run rebuilt from the database starts knowing only up to
//! which time samples were stored ([`PoolSamples::stored_up_to`]): questions that the
//! samples seen since cannot answer are asked too.

use std::collections::{BTreeMap, HashMap};

use super::Tx;
use crate::db::StoreError;

/// Samples kept per (pid, device): the allocator is sampled about every 10 ms, and a
/// failed execute asks about its own time, so only a late record looks further back.
const KEEP: usize = 4096;

/// The answer of [`PoolSamples::last_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lookup {
    /// The bytes in use of the last sample at or before the time, or `None`: no sample
    /// was stored up to then.
    Known(Option<i64>),
    /// Not known here: ask the database.
    Ask,
}

#[derive(Default)]
struct Samples {
    /// Bytes in use by sample time (the later sample of one time wins, as the
    /// database's newest row of equal times).
    at: BTreeMap<i64, i64>,
    /// Every sample stored later than this is in `at`; some at or before it may not be.
    floor: Option<i64>,
}

/// See the module docs.
#[derive(Default)]
pub(super) struct PoolSamples {
    keys: HashMap<(i64, i64), Samples>,
}

/// The latest stored sample time of one (pid, device).
#[derive(sqlx::FromRow)]
struct StoredUpTo {
    pid: i64,
    device: i64,
    latest: i64,
}

impl PoolSamples {
    /// Learns up to when samples of run `run` are stored (a run rebuilt from the
    /// database).
    pub(super) async fn load_stored(&mut self, tx: &mut Tx, run: i64) -> Result<(), StoreError> {
        let rows: Vec<StoredUpTo> = sqlx::query_as(
            "SELECT pid, device, MAX(ts_ns) AS latest FROM pjrt_memory_stats WHERE run_id = $1 \
             GROUP BY pid, device",
        )
        .bind(run)
        .fetch_all(&mut **tx)
        .await?;
        for r in rows {
            self.stored_up_to(r.pid, r.device, r.latest);
        }
        Ok(())
    }

    /// Samples up to `ts` of (pid, device) are stored but not held here (a run rebuilt
    /// from the database).
    pub(super) fn stored_up_to(&mut self, pid: i64, device: i64, ts: i64) {
        let s = self.keys.entry((pid, device)).or_default();
        s.floor = Some(s.floor.map_or(ts, |f| f.max(ts)));
        s.at.retain(|t, _| *t > ts);
    }

    /// A sample stored now.
    pub(super) fn record(&mut self, pid: i64, device: i64, ts: i64, bytes_in_use: i64) {
        let s = self.keys.entry((pid, device)).or_default();
        if s.floor.is_some_and(|f| ts <= f) {
            return;
        }
        s.at.insert(ts, bytes_in_use);
        if s.at.len() > KEEP {
            if let Some((t, _)) = s.at.pop_first() {
                s.floor = Some(s.floor.map_or(t, |f| f.max(t)));
            }
        }
    }

    /// Bytes in use of the last sample of (pid, device) at or before `t`.
    pub(super) fn last_at(&self, pid: i64, device: i64, t: i64) -> Lookup {
        let Some(s) = self.keys.get(&(pid, device)) else {
            return Lookup::Known(None);
        };
        match (s.at.range(..=t).next_back(), s.floor) {
            (Some((ts, b)), floor) if floor.is_none_or(|f| *ts > f) => Lookup::Known(Some(*b)),
            (_, None) => Lookup::Known(None),
            _ => Lookup::Ask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: every sample in storage order; the newest of the latest time <= t.
    fn reference(all: &[(i64, i64)], t: i64) -> Option<i64> {
        let mut best: Option<(i64, i64)> = None;
        for &(ts, b) in all {
            if ts <= t && best.is_none_or(|(bt, _)| ts >= bt) {
                best = Some((ts, b));
            }
        }
        best.map(|x| x.1)
    }

    #[test]
    fn answers_what_the_database_would_or_asks_it() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..40 {
            let mut p = PoolSamples::default();
            let mut all: Vec<(i64, i64)> = Vec::new();
            // A rebuilt run: samples stored before, known only by their latest time.
            if round % 3 == 0 {
                for _ in 0..50 {
                    all.push((rnd(20_000) as i64, rnd(1000) as i64));
                }
                let top = all.iter().map(|x| x.0).max().unwrap_or(0);
                p.stored_up_to(1, 0, top);
            }
            let n = 2 * KEEP + rnd(3000) as usize;
            let (mut asked, mut known) = (0, 0);
            for i in 0..n {
                // Mostly in time order, some late, some at equal times.
                let ts = match rnd(10) {
                    0 => rnd(i as u64 * 10 + 1) as i64,
                    1 => all.last().map_or(0, |x| x.0),
                    _ => i as i64 * 10 + rnd(10) as i64,
                };
                let b = rnd(1 << 30) as i64;
                all.push((ts, b));
                p.record(1, 0, ts, b);
                let t = match rnd(4) {
                    0 => rnd(i as u64 * 10 + 20) as i64,
                    _ => i as i64 * 10 + rnd(20) as i64,
                };
                match p.last_at(1, 0, t) {
                    Lookup::Known(v) => {
                        known += 1;
                        assert_eq!(v, reference(&all, t), "round {round} sample {i} t {t}");
                    }
                    Lookup::Ask => asked += 1,
                }
                assert!(p.keys[&(1, 0)].at.len() <= KEEP);
            }
            assert!(known > asked, "round {round}: {known} known, {asked} asked");
            assert_eq!(p.last_at(2, 0, 5), Lookup::Known(None));
        }
    }
}
