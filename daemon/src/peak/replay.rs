//! What was live on a device at any instant: the stored raw events of that device
//! replayed from the nearest known state before the instant (a live-set checkpoint, the
//! peak snapshot, or the run's start). Shared by the live-at query and the checkpoints.

use std::collections::HashMap;

use memwatch_wire::EventKind;

use crate::codes;
use crate::db::snapshot::LiveAlloc;
use crate::db::{chunk, Store, StoreError};

/// A stored chunk as the replay reads it.
#[derive(sqlx::FromRow)]
pub(super) struct ChunkRow {
    pub id: i64,
    pub events: Vec<u8>,
    pub deltas: Vec<u8>,
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
            let rows: Vec<ChunkRow> = sqlx::query_as(
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
                after = row.id;
                apply_chunk(&mut live, row, lo, hi)?;
            }
        }
        Ok((live.into_values().collect(), hi))
    }
}

/// A live set keyed as the replay files it.
pub(super) type LiveMap = HashMap<(u32, u64), LiveAlloc>;

pub(super) fn to_map(allocs: Vec<LiveAlloc>) -> LiveMap {
    allocs.into_iter().map(|a| ((a.pid, a.ptr), a)).collect()
}

/// Applies the events of one stored chunk with `lo < ts <= hi` to `live` (counted
/// allocations only: those whose delta moved the device's live bytes). Returns the
/// number of events in the chunk.
pub(super) fn apply_chunk(
    live: &mut LiveMap,
    row: &ChunkRow,
    lo: i64,
    hi: i64,
) -> Result<usize, StoreError> {
    for (e, delta) in chunk::with_deltas(row.id, &row.events, &row.deltas)? {
        let ts = e.ts_ns.min(i64::MAX as u64) as i64;
        if ts > hi || ts <= lo {
            continue;
        }
        match codes::event_kind(e.kind) {
            Some(EventKind::Alloc) if delta > 0 => {
                live.insert((e.pid, e.ptr), LiveAlloc::of(&e));
            }
            Some(EventKind::Free) if delta < 0 => {
                live.remove(&(e.pid, e.ptr));
            }
            _ => {}
        }
    }
    Ok(chunk::event_count(&row.events))
}
