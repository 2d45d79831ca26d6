//! Reading a device's live allocations: at its peak (what ingest stored when the peak
//! moved: `peak_allocs` rows, or an older daemon's blob) or at any instant (the nearest
//! checkpoint or the peak's allocations, then the stored events up to that instant
//! replayed: `replay`), each with the annotation in force when it was made, grouped
//! (`group`).

use std::collections::HashMap;
use std::sync::Arc;

use super::group::{group_live, note_for, Notes, NOTE_QUERY_BUDGET};
use super::model::Peak;
use crate::db::snapshot::{self, LiveAlloc};
use crate::db::{Store, StoreError};

/// A `peak_snapshots` row.
#[derive(sqlx::FromRow)]
struct Snapshot {
    peak_bytes: i64,
    peak_ts_ns: i64,
    allocs: Vec<u8>,
}

/// A `peak_allocs` row.
#[derive(sqlx::FromRow)]
struct PeakRow {
    pid: i64,
    tid: i64,
    ptr: i64,
    size: i64,
    ts_ns: i64,
    api: i64,
    mem_kind: i64,
}

/// What a replay needs of a run.
#[derive(sqlx::FromRow)]
struct RunClock {
    t0_mono_ns: i64,
    raw_pruned_to_ns: Option<i64>,
}

/// An annotation's time and text.
#[derive(sqlx::FromRow)]
struct Note {
    ts_ns: i64,
    text: String,
}

impl Store {
    /// The allocations live at `device`'s peak, grouped.
    pub async fn peak(
        &self,
        run: i64,
        device: i64,
        top: usize,
    ) -> Result<Option<Peak>, StoreError> {
        let Some(t0) = self.run_t0(run).await? else {
            return Ok(None);
        };
        let t0 = t0 as i64;
        let Some(row) = sqlx::query_as::<_, Snapshot>(
            "SELECT peak_bytes, peak_ts_ns, allocs FROM peak_snapshots WHERE run_id = $1 AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let allocs = self.peak_allocs(run, device, &row.allocs).await?;
        // The annotation in force for each allocation: indexed lookups per annotation
        // interval that holds live allocations, not a scan of all the run's annotations
        // per allocation (which took ~1 s at the peak of a 100M-event run with markers).
        let notes = self.notes_for(run, &allocs).await?;
        let (peak_bytes, peak_ts) = (row.peak_bytes, row.peak_ts_ns);
        Ok(Some(group_live(
            run,
            device,
            peak_bytes,
            (peak_ts - t0).max(0),
            t0,
            allocs.into_iter().zip(notes).collect(),
            top,
        )))
    }

    /// What was live on `device` at `at` ns after the run's start (`None`: at the peak,
    /// the same as [`Store::peak`]), grouped; `top` largest allocations listed. At an
    /// instant, the run's raw events up to it are replayed; where retention deleted them,
    /// the answer is the nearest exact state before (a checkpoint, the peak snapshot or
    /// the run's start) and `peak_ts_ns` says which instant that is. `Ok(None)` for a run
    /// or snapshot that does not exist.
    pub async fn live_at(
        &self,
        run: i64,
        device: i64,
        at: Option<u64>,
        top: usize,
    ) -> Result<Option<Peak>, StoreError> {
        let Some(t) = at else {
            return self.peak(run, device, top).await;
        };
        let Some((allocs, as_of, t0)) = self.live_allocs_at(run, device, t).await? else {
            return Ok(None);
        };
        let bytes = allocs.iter().map(|a| a.size as i64).sum();
        let ts = (as_of - t0).max(0);
        let notes = self.notes_for(run, &allocs).await?;
        let allocs = allocs.into_iter().zip(notes).collect();
        Ok(Some(group_live(run, device, bytes, ts, t0, allocs, top)))
    }

    /// The allocations live on `device` at `t` ns after the run's start, as [`Store::live_at`]
    /// replays them, not grouped: (allocations, the instant they are exact for, the run's
    /// start), both in monotonic ns. `Ok(None)` for a run that does not exist.
    pub(crate) async fn live_allocs_at(
        &self,
        run: i64,
        device: i64,
        t: u64,
    ) -> Result<Option<(Vec<LiveAlloc>, i64, i64)>, StoreError> {
        let Some(RunClock {
            t0_mono_ns: t0,
            raw_pruned_to_ns: pruned_to,
        }) = sqlx::query_as("SELECT t0_mono_ns, raw_pruned_to_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        // Start from the peak snapshot when the instant is after the peak (only the
        // events between them are replayed), else from the run's start.
        let snap: Option<Snapshot> = sqlx::query_as(
            "SELECT peak_bytes, peak_ts_ns, allocs FROM peak_snapshots WHERE run_id = $1 AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_optional(&self.pool)
        .await?;
        let start = match snap {
            Some(row) if row.peak_ts_ns <= t0.saturating_add(t.min(i64::MAX as u64) as i64) => {
                Some((
                    row.peak_ts_ns,
                    self.peak_allocs(run, device, &row.allocs).await?,
                ))
            }
            _ => None,
        };
        self.extend_checkpoints(run, device).await?;
        let (allocs, as_of) = self
            .replay_live(run, device, t0, t, start, pruned_to)
            .await?;
        Ok(Some((allocs, as_of, t0)))
    }

    /// The allocations live at `device`'s peak: the `peak_allocs` rows, and those of the
    /// blob `allocs` of its `peak_snapshots` row (written whole by older daemons; empty
    /// since), in time order (then pid, pointer).
    async fn peak_allocs(
        &self,
        run: i64,
        device: i64,
        blob: &[u8],
    ) -> Result<Vec<LiveAlloc>, StoreError> {
        let mut allocs = snapshot::decode(blob)?;
        let rows: Vec<PeakRow> = sqlx::query_as(
            "SELECT pid, tid, ptr, size, ts_ns, api, mem_kind FROM peak_allocs \
             WHERE run_id = $1 AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_all(&self.pool)
        .await?;
        allocs.extend(rows.into_iter().map(|r| LiveAlloc {
            pid: r.pid as u32,
            tid: r.tid as u32,
            ptr: r.ptr as u64,
            size: r.size as u64,
            ts_ns: r.ts_ns as u64,
            api: r.api as u16,
            mem_kind: r.mem_kind as u8,
        }));
        allocs.sort_unstable_by_key(|a| (a.ts_ns, a.pid, a.ptr, a.tid, a.size));
        Ok(allocs)
    }

    /// The annotation in force for each allocation (the pid's latest at or before the
    /// allocation). Looks up only the annotation intervals that hold live allocations
    /// (two indexed queries per interval), so a run with hundreds of thousands of markers
    /// is not read whole; falls back to reading them all when the allocations are spread
    /// over more than [`NOTE_QUERY_BUDGET`] / 2 intervals.
    async fn notes_for(
        &self,
        run: i64,
        allocs: &[LiveAlloc],
    ) -> Result<Vec<Option<Arc<str>>>, StoreError> {
        let mut idx: Vec<usize> = (0..allocs.len()).collect();
        idx.sort_by_key(|&i| (allocs[i].pid, allocs[i].ts_ns));
        let mut out = vec![None; allocs.len()];
        // (pid, interval start, interval end (exclusive), the note in force there)
        let mut cur: Option<(u32, i64, i64, Option<Arc<str>>)> = None;
        let mut queries = 0usize;
        for i in idx {
            let a = &allocs[i];
            let ts = a.ts_ns.min(i64::MAX as u64) as i64;
            let hit = matches!(&cur, Some((p, lo, hi, _)) if *p == a.pid && ts >= *lo && ts < *hi);
            if !hit {
                if queries >= NOTE_QUERY_BUDGET {
                    let notes = self.notes_by_pid(run).await?;
                    return Ok(allocs
                        .iter()
                        .map(|a| note_for(&notes, a.pid, a.ts_ns).map(Arc::from))
                        .collect());
                }
                queries += 2;
                let prev: Option<Note> = sqlx::query_as(&format!(
                    "SELECT ts_ns, text FROM annotations WHERE run_id = $1 AND pid = $2 \
                     AND ts_ns <= $3 AND {} ORDER BY ts_ns DESC, id DESC LIMIT 1",
                    crate::codes::GROUPING_MARKER
                ))
                .bind(run)
                .bind(i64::from(a.pid))
                .bind(ts)
                .fetch_optional(&self.pool)
                .await?;
                let next: Option<i64> = sqlx::query_scalar(&format!(
                    "SELECT ts_ns FROM annotations WHERE run_id = $1 AND pid = $2 \
                     AND ts_ns > $3 AND {} ORDER BY ts_ns LIMIT 1",
                    crate::codes::GROUPING_MARKER
                ))
                .bind(run)
                .bind(i64::from(a.pid))
                .bind(ts)
                .fetch_optional(&self.pool)
                .await?;
                let (lo, note) = match prev {
                    Some(n) => (n.ts_ns, Some(Arc::from(n.text))),
                    None => (i64::MIN, None),
                };
                let hi = next.unwrap_or(i64::MAX);
                cur = Some((a.pid, lo, hi, note));
            }
            out[i] = cur.as_ref().and_then(|c| c.3.clone());
        }
        Ok(out)
    }

    /// A run's annotations per pid, sorted by time: (ts, text).
    async fn notes_by_pid(&self, run: i64) -> Result<Notes, StoreError> {
        #[derive(sqlx::FromRow)]
        struct PidNote {
            pid: i64,
            ts_ns: i64,
            text: String,
        }
        let rows: Vec<PidNote> = sqlx::query_as(&format!(
            "SELECT pid, ts_ns, text FROM annotations WHERE run_id = $1 AND {} ORDER BY ts_ns, id",
            crate::codes::GROUPING_MARKER
        ))
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let mut m: Notes = HashMap::new();
        for r in rows {
            m.entry(r.pid as u32)
                .or_default()
                .push((r.ts_ns as u64, r.text));
        }
        Ok(m)
    }
}
