//! What was live on a device at any instant: replaying the stored raw events, and the
//! live-set checkpoints (`live_checkpoints`, migration 0004) that keep that replay short.
//! Checkpoints are extended in the background by the daemon's checkpointer
//! (`crate::checkpointer`) and, for whatever it has not reached yet, before a replay; a
//! per-(run, device) lock keeps two extensions of one device from doing the work twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use memwatch_wire::frame::decode_event;
use memwatch_wire::{EventKind, EVENT_SIZE};
use sqlx::Row;

use super::snapshot::{self, LiveAlloc};
use super::{col_i64, Store, StoreError};

/// A lock held while one (run, device)'s checkpoints are extended.
type DeviceLock = Arc<tokio::sync::Mutex<()>>;

/// One lock per (run, device) whose checkpoints are being extended.
#[derive(Clone, Default)]
pub struct CheckpointLocks(Arc<Mutex<HashMap<(i64, i64), DeviceLock>>>);

impl CheckpointLocks {
    fn of(&self, run: i64, device: i64) -> DeviceLock {
        // A poisoned map only means another thread panicked while inserting; the map
        // itself is still usable.
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= 1024 {
            // Locks nobody holds or waits for (only the map refers to them).
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry((run, device)).or_default().clone()
    }
}

impl Store {
    /// Replays the stored events of `device` up to `t0 + at`: the counted allocations
    /// live then (those whose event moved the device's live bytes), and the absolute
    /// instant they are exact for. `start`: a known live set at an absolute time (the
    /// peak snapshot); events after it are replayed. `pruned_to`: the run's raw events up
    /// to then were deleted by retention; when the nearest known state is older than
    /// that, the events after it are incomplete, so that state is returned as it is, with
    /// its own instant (the run's start, with nothing live, when none is known).
    pub(super) async fn replay_live(
        &self,
        run: i64,
        device: i64,
        t0: i64,
        at: u64,
        start: Option<(i64, Vec<LiveAlloc>)>,
        pruned_to: Option<i64>,
    ) -> Result<(Vec<LiveAlloc>, i64), StoreError> {
        let hi = t0.saturating_add(at.min(i64::MAX as u64) as i64);
        // The nearest known state at or before `hi`: a checkpoint (everything in chunks up
        // to `after_chunk`, all at or before `hi`) or the peak snapshot (events up to `lo`).
        let cp = self.checkpoint_before(run, device, hi).await?;
        // (after chunk, replay events after this time, live set, the time it is exact at)
        let (mut after, lo, mut live, base_ts): (i64, i64, HashMap<(u32, u64), LiveAlloc>, i64) =
            match (cp, start) {
                (Some((chunk, ts_max, allocs)), s)
                    if s.as_ref().is_none_or(|(pt, _)| ts_max >= *pt) =>
                {
                    (chunk, i64::MIN, to_map(allocs), ts_max)
                }
                (_, Some((ts, allocs))) => (-1, ts, to_map(allocs), ts),
                (_, None) => (-1, i64::MIN, HashMap::new(), t0),
            };
        if pruned_to.is_some_and(|p| base_ts < p) {
            return Ok((live.into_values().collect(), base_ts.min(hi)));
        }
        loop {
            let rows = sqlx::query(
                "SELECT id, events, deltas FROM event_chunks WHERE run_id = $1 AND device = $2 \
                 AND id > $3 AND ts_first <= $4 AND ts_last > $5 ORDER BY id LIMIT 64",
            )
            .bind(run)
            .bind(device)
            .bind(after)
            .bind(hi)
            .bind(lo)
            .fetch_all(&self.pool)
            .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                after = col_i64(row, 0)?;
                let ev: Vec<u8> = row.try_get(1)?;
                let de: Vec<u8> = row.try_get(2)?;
                apply_chunk(&mut live, after, &ev, &de, lo, hi)?;
            }
        }
        Ok((live.into_values().collect(), hi))
    }

    /// The latest live-set checkpoint of `device` whose events all happened at or before
    /// `hi`: (after_chunk, ts_max, allocations).
    pub(super) async fn checkpoint_before(
        &self,
        run: i64,
        device: i64,
        hi: i64,
    ) -> Result<Option<(i64, i64, Vec<LiveAlloc>)>, StoreError> {
        let r = sqlx::query(
            "SELECT after_chunk, ts_max, allocs FROM live_checkpoints WHERE run_id = $1 \
             AND device = $2 AND ts_max <= $3 ORDER BY after_chunk DESC LIMIT 1",
        )
        .bind(run)
        .bind(device)
        .bind(hi)
        .fetch_optional(&self.pool)
        .await?;
        match r {
            Some(r) => {
                let blob: Vec<u8> = r.try_get(2)?;
                Ok(Some((
                    col_i64(&r, 0)?,
                    col_i64(&r, 1)?,
                    snapshot::decode(&blob)?,
                )))
            }
            None => Ok(None),
        }
    }

    /// Extends `device`'s live-set checkpoints over the chunks stored since the last one:
    /// one every [`CHECKPOINT_EVENTS`] events, so that what was live at any instant is
    /// at most that many events of replay away. Returns how many were written. Costs one
    /// pass over the new chunks; the checkpointer calls it in the background and
    /// `live_at` before replaying (then only the tail the checkpointer has not reached).
    pub async fn extend_checkpoints(&self, run: i64, device: i64) -> Result<usize, StoreError> {
        self.extend_checkpoints_every(run, device, CHECKPOINT_EVENTS, CHECKPOINT_PER_LIVE)
            .await
    }

    /// [`Store::extend_checkpoints`] with another spacing: at least `every` events and
    /// `per_live` events per live allocation between checkpoints (tests use small ones).
    pub async fn extend_checkpoints_every(
        &self,
        run: i64,
        device: i64,
        every: usize,
        per_live: usize,
    ) -> Result<usize, StoreError> {
        let lock = self.checkpoint_locks.of(run, device);
        let _held = lock.lock().await;
        // The newest checkpoint: the latest with any time at all.
        let (mut after, mut ts_max, mut live) =
            match self.checkpoint_before(run, device, i64::MAX).await? {
                Some((chunk, ts, allocs)) => (chunk, ts, to_map(allocs)),
                None => (-1, i64::MIN, HashMap::new()),
            };
        let mut since = 0usize;
        let mut written = 0usize;
        loop {
            let rows = sqlx::query(
                "SELECT id, events, deltas, ts_last FROM event_chunks WHERE run_id = $1 \
                 AND device = $2 AND id > $3 ORDER BY id LIMIT 64",
            )
            .bind(run)
            .bind(device)
            .bind(after)
            .fetch_all(&self.pool)
            .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                after = col_i64(row, 0)?;
                let ev: Vec<u8> = row.try_get(1)?;
                let de: Vec<u8> = row.try_get(2)?;
                ts_max = ts_max.max(col_i64(row, 3)?);
                since += apply_chunk(&mut live, after, &ev, &de, i64::MIN, i64::MAX)?;
                // With the default per_live, checkpoints stay under a byte per event
                // however many allocations are live.
                if since >= every.max(1).max(live.len() * per_live) {
                    let allocs: Vec<LiveAlloc> = live.values().copied().collect();
                    sqlx::query(
                        "INSERT INTO live_checkpoints (run_id, device, after_chunk, ts_max, \
                         live_bytes, allocs) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    )
                    .bind(run)
                    .bind(device)
                    .bind(after)
                    .bind(ts_max)
                    .bind(allocs.iter().map(|a| a.size as i64).sum::<i64>())
                    .bind(snapshot::encode(&allocs))
                    .execute(&self.pool)
                    .await?;
                    since = 0;
                    written += 1;
                }
            }
        }
        Ok(written)
    }
}

/// Events between two live-set checkpoints (`live_checkpoints`): replaying this many
/// takes about 40 ms on a 2-core VM.
pub const CHECKPOINT_EVENTS: usize = 200_000;

/// Events per live allocation between two checkpoints, at least (a checkpoint stores
/// every live allocation: this keeps them under a byte per event).
pub const CHECKPOINT_PER_LIVE: usize = 64;

fn to_map(allocs: Vec<LiveAlloc>) -> HashMap<(u32, u64), LiveAlloc> {
    allocs.into_iter().map(|a| ((a.pid, a.ptr), a)).collect()
}

/// Applies the events of one stored chunk with `lo < ts <= hi` to `live` (counted
/// allocations only: those whose delta moved the device's live bytes). Returns the
/// number of events in the chunk.
fn apply_chunk(
    live: &mut HashMap<(u32, u64), LiveAlloc>,
    chunk: i64,
    ev: &[u8],
    de: &[u8],
    lo: i64,
    hi: i64,
) -> Result<usize, StoreError> {
    if ev.len() / EVENT_SIZE != de.len() / 8 {
        return Err(StoreError::Corrupt(format!(
            "event chunk {chunk}: {} events but {} deltas",
            ev.len() / EVENT_SIZE,
            de.len() / 8
        )));
    }
    for (e, d) in ev.chunks_exact(EVENT_SIZE).zip(de.chunks_exact(8)) {
        let mut slot = [0u8; EVENT_SIZE];
        slot.copy_from_slice(e);
        let e = decode_event(&slot);
        let ts = e.ts_ns.min(i64::MAX as u64) as i64;
        if ts > hi || ts <= lo {
            continue;
        }
        let mut db = [0u8; 8];
        db.copy_from_slice(d);
        let delta = i64::from_le_bytes(db);
        match EventKind::from_u8(e.kind) {
            Some(EventKind::Alloc) if delta > 0 => {
                live.insert((e.pid, e.ptr), LiveAlloc::of(&e));
            }
            Some(EventKind::Free) if delta < 0 => {
                live.remove(&(e.pid, e.ptr));
            }
            _ => {}
        }
    }
    Ok(ev.len() / EVENT_SIZE)
}

impl Store {
    /// The newest stored chunk of each (run, device): `(run, device, chunk id)`. With
    /// `after`, only devices that received chunks with a larger id. Without it, the query
    /// reads the `event_chunks_by_time` index only (the chunks' blobs stay on disk).
    pub async fn newest_chunks(
        &self,
        after: Option<i64>,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        let rows = match after {
            None => {
                sqlx::query(
                    "SELECT run_id, device, MAX(id) FROM event_chunks GROUP BY run_id, device",
                )
                .fetch_all(&self.pool)
                .await?
            }
            Some(a) => {
                sqlx::query(
                    "SELECT run_id, device, MAX(id) FROM event_chunks WHERE id > $1 \
                     GROUP BY run_id, device",
                )
                .bind(a)
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter()
            .map(|r| Ok((col_i64(r, 0)?, col_i64(r, 1)?, col_i64(r, 2)?)))
            .collect()
    }

    /// Events stored for `device` after its newest live-set checkpoint (all of them when
    /// it has none): how much replay a request at the run's end would need.
    pub async fn events_after_checkpoint(&self, run: i64, device: i64) -> Result<i64, StoreError> {
        let r = sqlx::query(
            "SELECT CAST(COALESCE(SUM(n_events), 0) AS BIGINT) FROM event_chunks WHERE run_id = $1 \
             AND device = $2 AND id > COALESCE((SELECT MAX(after_chunk) FROM live_checkpoints \
             WHERE run_id = $1 AND device = $2), -1)",
        )
        .bind(run)
        .bind(device)
        .fetch_one(&self.pool)
        .await?;
        col_i64(&r, 0)
    }
}
