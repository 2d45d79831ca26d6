//! Live-set checkpoints (`live_checkpoints`, migration 0004): every device's live
//! allocations after every ~[`CHECKPOINT_EVENTS`] stored events, so that "what was live
//! at this instant" replays at most that many events. Extended in the background by the
//! checkpointer (`checkpointer`) and, for whatever it has not reached yet, before a
//! replay; a per-(run, device) lock keeps two extensions of one device from doing the
//! work twice.

use super::replay::{ChunkRow, Replay};
use crate::db::snapshot::{self, LiveAlloc};
use crate::db::{Store, StoreError};

/// Events between two live-set checkpoints (`live_checkpoints`): replaying this many
/// takes about 40 ms on a 2-core VM.
pub const CHECKPOINT_EVENTS: usize = 200_000;

/// Events per live allocation between two checkpoints, at least (a checkpoint stores
/// every live allocation: this keeps them under a byte per event).
pub const CHECKPOINT_PER_LIVE: usize = 64;

/// Most allocations a checkpoint extension holds in its replay: past them it stops (a
/// checkpoint of that many allocations needs [`CHECKPOINT_PER_LIVE`] times as many events
/// after the one before, and a replay of a live set that large would cost as much
/// memory as ingest's own).
pub const MAX_EXTEND_LIVE: usize = 1 << 20;

/// What one extension did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extended {
    /// Checkpoints written.
    pub written: usize,
    /// Allocations live on the device where the replay ended (or stopped).
    pub live: usize,
    /// It stopped at [`MAX_EXTEND_LIVE`] before the newest chunk.
    pub stopped: bool,
}

/// A `live_checkpoints` row.
#[derive(sqlx::FromRow)]
struct Checkpoint {
    after_chunk: i64,
    ts_max: i64,
    allocs: Vec<u8>,
}

/// The newest chunk of one (run, device).
#[derive(sqlx::FromRow)]
struct Newest {
    run_id: i64,
    device: i64,
    newest: i64,
}

impl Store {
    /// The latest live-set checkpoint of `device` whose events all happened at or before
    /// `hi`: (after_chunk, ts_max, allocations).
    pub(super) async fn checkpoint_before(
        &self,
        run: i64,
        device: i64,
        hi: i64,
    ) -> Result<Option<(i64, i64, Vec<LiveAlloc>)>, StoreError> {
        let r: Option<Checkpoint> = sqlx::query_as(
            "SELECT after_chunk, ts_max, allocs FROM live_checkpoints WHERE run_id = $1 \
             AND device = $2 AND ts_max <= $3 ORDER BY after_chunk DESC LIMIT 1",
        )
        .bind(run)
        .bind(device)
        .bind(hi)
        .fetch_optional(&self.pool)
        .await?;
        match r {
            Some(r) => Ok(Some((
                r.after_chunk,
                r.ts_max,
                snapshot::decode(&r.allocs)?,
            ))),
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
        Ok(self
            .extend_checkpoints_within(run, device, every, per_live)
            .await?
            .written)
    }

    /// [`Store::extend_checkpoints_every`], saying how far it got; stops once the replay
    /// holds more than [`MAX_EXTEND_LIVE`] allocations.
    pub async fn extend_checkpoints_within(
        &self,
        run: i64,
        device: i64,
        every: usize,
        per_live: usize,
    ) -> Result<Extended, StoreError> {
        let lock = self.checkpoint_locks.of(run, device);
        let _held = lock.lock().await;
        let mut replay = Replay::new(self, run, device).await?;
        // The newest checkpoint: the latest with any time at all.
        let (mut after, mut ts_max) = match self.checkpoint_before(run, device, i64::MAX).await? {
            Some((chunk, ts, allocs)) => {
                replay.load(allocs);
                replay.skip_until(ts);
                (chunk, ts)
            }
            None => (-1, i64::MIN),
        };
        let mut since = 0usize;
        let mut written = 0usize;
        loop {
            let rows: Vec<TimedChunk> = sqlx::query_as(
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
                after = row.chunk.id;
                ts_max = ts_max.max(row.ts_last);
                since += replay.apply_chunk(&row.chunk, i64::MIN, i64::MAX)?;
                // With the default per_live, checkpoints stay under a byte per event
                // however many allocations are live.
                if since >= every.max(1).max(replay.device_allocs() * per_live) {
                    replay.end_at(ts_max);
                    let allocs: Vec<LiveAlloc> = replay.allocations();
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
                if replay.device_allocs() > MAX_EXTEND_LIVE {
                    return Ok(Extended {
                        written,
                        live: replay.device_allocs(),
                        stopped: true,
                    });
                }
            }
            if rows.len() < 64 {
                break;
            }
        }
        Ok(Extended {
            written,
            live: replay.device_allocs(),
            stopped: false,
        })
    }

    /// The newest stored chunk of each (run, device): `(run, device, chunk id)`. With
    /// `after`, only devices that received chunks with a larger id. Without it, the query
    /// reads the `event_chunks_by_time` index only (the chunks' blobs stay on disk).
    pub async fn newest_chunks(
        &self,
        after: Option<i64>,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        let rows: Vec<Newest> = match after {
            None => {
                sqlx::query_as(
                    "SELECT run_id, device, MAX(id) AS newest FROM event_chunks GROUP BY run_id, device",
                )
                .fetch_all(&self.pool)
                .await?
            }
            Some(a) => {
                sqlx::query_as(
                    "SELECT run_id, device, MAX(id) AS newest FROM event_chunks WHERE id > $1 \
                     GROUP BY run_id, device",
                )
                .bind(a)
                .fetch_all(&self.pool)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|r| (r.run_id, r.device, r.newest))
            .collect())
    }

    /// Events stored for `device` after its newest live-set checkpoint (all of them when
    /// it has none): how much replay a request at the run's end would need.
    pub async fn events_after_checkpoint(&self, run: i64, device: i64) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(n_events), 0) AS BIGINT) FROM event_chunks WHERE run_id = $1 \
             AND device = $2 AND id > COALESCE((SELECT MAX(after_chunk) FROM live_checkpoints \
             WHERE run_id = $1 AND device = $2), -1)",
        )
        .bind(run)
        .bind(device)
        .fetch_one(&self.pool)
        .await?)
    }
}

/// A stored chunk with its last event time.
#[derive(sqlx::FromRow)]
struct TimedChunk {
    #[sqlx(flatten)]
    chunk: ChunkRow,
    ts_last: i64,
}
