//! The allocations live at each device's peak, stored as rows of `peak_allocs` and kept
//! current with what changed since the peak stored last, so that a commit that moves
//! the peak writes about as many rows as allocations changed, not the whole live set
//! (3M live allocations were a 120 MB blob, built in memory and copied again by the
//! database, at every such commit).
//!
//! Owns the record of the keys that changed since the stored peak ([`PeakTrack`]; past a
//! quarter of the live set it gives up and the next peak is written whole, so it costs
//! at most a fraction of the live set's memory and a whole write happens only after
//! that many changes), the state at the peak ([`AtPeak`]) and the statements. Runs
//! rebuilt from the store write their next peak whole.

use foldhash::HashMap as FastMap;
use memwatch_analysis::live::{Family, LiveKey, LiveSet};

use super::run_state::Live;
use super::write::{group_len, push_values};
use super::Tx;
use crate::db::snapshot::{LiveAlloc, Origin};
use crate::db::{Backend, StoreError};

/// Keys tracked at least, however small the live set (below this a whole write is cheap
/// anyway).
const MIN_TRACKED: usize = 1 << 16;

/// Rows per multi-row statement (11 parameters each, under SQLite's 32,766).
const ROWS_PER_STATEMENT: usize = 1024;

/// What changed on one device since its peak was stored.
#[derive(Default)]
pub struct PeakTrack {
    /// Each key whose allocation changed, with whether it was live (on this device) at
    /// the stored peak.
    touched: FastMap<LiveKey, bool>,
    /// The next peak is written whole: too much changed, or the stored peak is not
    /// known to match what is tracked.
    rewrite: bool,
}

/// How a moved peak is stored.
pub enum PeakPlan {
    /// Every row of the device replaced.
    Rewrite,
    /// These keys changed since the stored peak (with whether each was live then); the
    /// other rows stay.
    Changed(Vec<(LiveKey, bool)>),
}

impl PeakTrack {
    /// `key` (device memory) changes now; `was_live`: whether it is live on this device
    /// before the change. `live`: allocations in the run's live set.
    #[inline]
    pub fn touch(&mut self, key: LiveKey, was_live: bool, live: usize) {
        if self.rewrite {
            return;
        }
        self.touched.entry(key).or_insert(was_live);
        if self.touched.len() > (live / 4).max(MIN_TRACKED) {
            self.rewrite_all();
        }
    }

    /// Gives up tracking: the next peak is written whole.
    pub fn rewrite_all(&mut self) {
        self.rewrite = true;
        self.touched = FastMap::default();
    }

    /// A new peak is being stored: returns how, and tracks from it on, `after_peak`
    /// being the keys that changed since it (with whether each was live at it).
    pub(super) fn restart(
        &mut self,
        after_peak: impl Iterator<Item = (LiveKey, bool)>,
        live: usize,
    ) -> PeakPlan {
        let plan = if self.rewrite {
            PeakPlan::Rewrite
        } else {
            PeakPlan::Changed(std::mem::take(&mut self.touched).into_iter().collect())
        };
        *self = PeakTrack::default();
        for (k, was) in after_peak {
            self.touch(k, was, live);
        }
        plan
    }
}

/// A device's live allocations at its peak: the live set now, with the keys that
/// changed since the peak as they were then.
pub struct AtPeak<'a> {
    live: &'a LiveSet<Origin>,
    device: i32,
    changed: FastMap<LiveKey, Option<Live>>,
}

impl<'a> AtPeak<'a> {
    pub(super) fn new(
        live: &'a LiveSet<Origin>,
        device: i32,
        changed: FastMap<LiveKey, Option<Live>>,
    ) -> Self {
        Self {
            live,
            device,
            changed,
        }
    }

    /// What was live at `key` on this device at the peak.
    pub fn get(&self, key: &LiveKey) -> Option<LiveAlloc> {
        if !key.family.on_device() {
            return None;
        }
        let held = match self.changed.get(key) {
            Some(at_peak) => at_peak.as_ref(),
            None => self.live.get(key).filter(|h| h.device == self.device),
        };
        held.map(|h| Origin::live_alloc(key, h))
    }

    /// Every allocation live on this device at the peak, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (LiveKey, LiveAlloc)> + '_ {
        let unchanged = self
            .live
            .iter()
            .filter(|(k, l)| l.device == self.device && k.family.on_device())
            .filter(|(k, _)| !self.changed.contains_key(k))
            .map(|(k, l)| (*k, Origin::live_alloc(k, l)));
        let released = self
            .changed
            .iter()
            .filter(|(k, _)| k.family.on_device())
            .filter_map(|(k, l)| l.as_ref().map(|l| (*k, Origin::live_alloc(k, l))));
        unchanged.chain(released)
    }
}

fn family_code(f: Family) -> i64 {
    match f {
        Family::Device => 0,
        Family::Host => 1,
        Family::VmmHandle => 2,
    }
}

/// Stores `device`'s peak: its figures in `peak_snapshots` (with an empty blob: the
/// allocations are the rows) and its allocations in `peak_allocs`, as `plan` says,
/// a statement of at most [`ROWS_PER_STATEMENT`] rows at a time.
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_peak(
    tx: &mut Tx,
    backend: Backend,
    run: i64,
    device: i32,
    peak_bytes: i64,
    peak_ts: i64,
    plan: PeakPlan,
    at: &AtPeak<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO peak_snapshots (run_id, device, peak_bytes, peak_ts_ns, allocs) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, device) DO UPDATE SET \
         peak_bytes = excluded.peak_bytes, peak_ts_ns = excluded.peak_ts_ns, \
         allocs = excluded.allocs",
    )
    .bind(run)
    .bind(i64::from(device))
    .bind(peak_bytes)
    .bind(peak_ts)
    .bind(Vec::<u8>::new())
    .execute(&mut **tx)
    .await?;
    match plan {
        PeakPlan::Rewrite => {
            sqlx::query("DELETE FROM peak_allocs WHERE run_id = $1 AND device = $2")
                .bind(run)
                .bind(i64::from(device))
                .execute(&mut **tx)
                .await?;
            let mut rows = Vec::with_capacity(ROWS_PER_STATEMENT);
            let mut all = at.iter();
            loop {
                rows.clear();
                rows.extend(all.by_ref().take(ROWS_PER_STATEMENT));
                if rows.is_empty() {
                    return Ok(());
                }
                upsert(tx, backend, run, device, &rows).await?;
            }
        }
        PeakPlan::Changed(keys) => {
            let (mut rows, mut gone) = (Vec::new(), Vec::new());
            for part in keys.chunks(ROWS_PER_STATEMENT) {
                rows.clear();
                gone.clear();
                for (k, was_live) in part {
                    match at.get(k) {
                        Some(a) => rows.push((*k, a)),
                        None if *was_live => gone.push(*k),
                        None => {}
                    }
                }
                upsert(tx, backend, run, device, &rows).await?;
                delete(tx, backend, run, device, &gone).await?;
            }
            Ok(())
        }
    }
}

/// Inserts or replaces `rows`.
async fn upsert(
    tx: &mut Tx,
    backend: Backend,
    run: i64,
    device: i32,
    rows: &[(LiveKey, LiveAlloc)],
) -> Result<(), StoreError> {
    let mut rest = rows;
    while !rest.is_empty() {
        let (group, tail) = rest.split_at(group_len(rest.len(), ROWS_PER_STATEMENT));
        rest = tail;
        let mut sql = String::from(
            "INSERT INTO peak_allocs (run_id, device, pid, image, family, ptr, tid, size, \
             ts_ns, api, mem_kind) VALUES ",
        );
        push_values(&mut sql, backend, group.len(), 11);
        sql.push_str(
            " ON CONFLICT (run_id, device, pid, image, family, ptr) DO UPDATE SET \
             tid = excluded.tid, size = excluded.size, ts_ns = excluded.ts_ns, \
             api = excluded.api, mem_kind = excluded.mem_kind",
        );
        let mut q = sqlx::query(&sql);
        for (k, a) in group {
            q = q
                .bind(run)
                .bind(i64::from(device))
                .bind(i64::from(k.proc.pid))
                .bind(i64::from(k.proc.image))
                .bind(family_code(k.family))
                .bind(k.ptr as i64)
                .bind(i64::from(a.tid))
                .bind(a.size as i64)
                .bind(a.ts_ns as i64)
                .bind(i64::from(a.api))
                .bind(i64::from(a.mem_kind));
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Deletes the rows of `keys`.
async fn delete(
    tx: &mut Tx,
    backend: Backend,
    run: i64,
    device: i32,
    keys: &[LiveKey],
) -> Result<(), StoreError> {
    let mut rest = keys;
    while !rest.is_empty() {
        let (group, tail) = rest.split_at(group_len(rest.len(), ROWS_PER_STATEMENT));
        rest = tail;
        let mut sql = String::from(
            "DELETE FROM peak_allocs WHERE (run_id, device, pid, image, family, ptr) IN (VALUES ",
        );
        push_values(&mut sql, backend, group.len(), 6);
        sql.push(')');
        let mut q = sqlx::query(&sql);
        for k in group {
            q = q
                .bind(run)
                .bind(i64::from(device))
                .bind(i64::from(k.proc.pid))
                .bind(i64::from(k.proc.image))
                .bind(family_code(k.family))
                .bind(k.ptr as i64);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
