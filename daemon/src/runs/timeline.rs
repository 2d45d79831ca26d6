//! Live bytes of a device over time, at any zoom: from the rollup level whose buckets fit
//! the requested point width (the database folds them into points), or from the raw
//! event chunks below 262 µs per point. A point's min/max include the value carried in
//! at its start, so downsampling never hides a peak.

use serde::Serialize;

use super::sql::clamp_offset;
use crate::db::{chunk, Store, StoreError};
use crate::ingest::rollup::{level_for, shift, width};
use crate::render::Point;

#[derive(Debug, Serialize)]
pub struct Timeline {
    pub run_id: i64,
    pub device: i64,
    pub from_ns: u64,
    pub to_ns: u64,
    pub bucket_ns: u64,
    /// "rollup" (with `level`) or "raw".
    pub source: &'static str,
    pub level: Option<usize>,
    pub points: Vec<Point>,
}

#[derive(sqlx::FromRow)]
struct RunSpan {
    t0_mono_ns: i64,
    last_ts_ns: i64,
    raw_pruned_to_ns: Option<i64>,
}

/// Rollup buckets folded into output point `i`.
#[derive(sqlx::FromRow)]
struct Folded {
    i: i64,
    lo: i64,
    hi: i64,
    last: i64,
}

/// A raw chunk's events as the timeline reads them.
#[derive(sqlx::FromRow)]
struct RawChunk {
    live_start: i64,
    events: Vec<u8>,
    deltas: Vec<u8>,
}

impl Store {
    /// Live bytes of `device` over `[from, to)` (ns since the run's start; `to` defaults
    /// to the run's end) in `points` buckets, each with min/max/last.
    pub async fn timeline(
        &self,
        run: i64,
        device: i64,
        from: Option<u64>,
        to: Option<u64>,
        points: usize,
    ) -> Result<Option<Timeline>, StoreError> {
        let Some(r) = sqlx::query_as::<_, RunSpan>(
            "SELECT t0_mono_ns, last_ts_ns, raw_pruned_to_ns FROM runs WHERE id = $1",
        )
        .bind(run)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let t0 = r.t0_mono_ns as u64;
        let end = (r.last_ts_ns as u64).saturating_sub(t0) + 1;
        let raw_pruned_to = r.raw_pruned_to_ns;
        let points = points.clamp(1, 100_000);
        let from = clamp_offset(from.unwrap_or(0));
        let to = clamp_offset(to.unwrap_or(end)).max(from + 1);
        let bucket_ns = (to - from).div_ceil(points as u64).max(1);
        let n = (to - from).div_ceil(bucket_ns) as usize;
        let mut out: Vec<Option<Point>> = vec![None; n];
        let mut put = |t: u64, lo: i64, hi: i64, last: i64| {
            if t < from || t >= to {
                return;
            }
            let i = ((t - from) / bucket_ns) as usize;
            let p = out[i].get_or_insert(Point {
                t_ns: from + i as u64 * bucket_ns,
                min: lo,
                max: hi,
                last,
            });
            p.min = p.min.min(lo);
            p.max = p.max.max(hi);
            p.last = last;
        };
        let level = match level_for(bucket_ns) {
            // Retention deleted the raw events this zoom would read: the finest rollup
            // level answers (coarser, but every peak is still in its min/max).
            None if raw_pruned_to.is_some_and(|p| (t0 + from) as i64 <= p) => Some(0),
            l => l,
        };
        let initial: i64;
        match level {
            Some(level) => {
                let sh = shift(level);
                let b0 = (from >> sh) as i64;
                let b1 = ((to - 1) >> sh) as i64;
                let before: Option<i64> = sqlx::query_scalar(
                    "SELECT last FROM rollups WHERE run_id = $1 AND device = $2 AND level = $3 \
                     AND bucket < $4 ORDER BY bucket DESC LIMIT 1",
                )
                .bind(run)
                .bind(device)
                .bind(level as i64)
                .bind(b0)
                .fetch_optional(&self.pool)
                .await?;
                initial = before.unwrap_or(0);
                // Folded into output points by the database: up to ~4 rollup rows per
                // point become one row (min of lo, max of hi, `last` of the point's last
                // bucket), so a query returns at most `points` rows whatever the zoom.
                // Same points as folding every bucket here (rows in bucket order).
                let rows: Vec<Folded> = sqlx::query_as(
                    "WITH g AS (SELECT (CASE WHEN bucket * $4 < $5 THEN $5 ELSE bucket * $4 END \
                     - $5) / $6 AS i, MIN(lo) AS lo, MAX(hi) AS hi, MAX(bucket) AS mb \
                     FROM rollups WHERE run_id = $1 AND device = $2 AND level = $3 \
                     AND bucket >= $7 AND bucket <= $8 GROUP BY 1) \
                     SELECT g.i, g.lo, g.hi, r.last FROM g JOIN rollups r ON r.run_id = $1 \
                     AND r.device = $2 AND r.level = $3 AND r.bucket = g.mb ORDER BY g.i",
                )
                .bind(run)
                .bind(device)
                .bind(level as i64)
                .bind(width(level) as i64)
                .bind(from as i64)
                .bind(bucket_ns as i64)
                .bind(b0)
                .bind(b1)
                .fetch_all(&self.pool)
                .await?;
                for row in &rows {
                    put(from + row.i as u64 * bucket_ns, row.lo, row.hi, row.last);
                }
            }
            None => {
                let rows: Vec<RawChunk> = sqlx::query_as(
                    "SELECT live_start, events, deltas FROM event_chunks WHERE run_id = $1 \
                     AND device = $2 AND ts_last >= $3 AND ts_first < $4 ORDER BY id",
                )
                .bind(run)
                .bind(device)
                .bind((t0 + from) as i64)
                .bind((t0 + to) as i64)
                .fetch_all(&self.pool)
                .await?;
                let mut init: Option<i64> = None;
                if rows.is_empty() {
                    init = sqlx::query_scalar(
                        "SELECT live_end FROM event_chunks WHERE run_id = $1 AND device = $2 \
                         AND ts_last < $3 ORDER BY ts_last DESC LIMIT 1",
                    )
                    .bind(run)
                    .bind(device)
                    .bind((t0 + from) as i64)
                    .fetch_optional(&self.pool)
                    .await?;
                }
                for row in &rows {
                    // Each chunk starts from the live bytes stored with it: what changed
                    // between two chunks without an event of this device (an exec's
                    // release, another device's allocation replacing one of this
                    // device's) or in a chunk outside the range is in it.
                    let mut v = row.live_start;
                    let stamps =
                        chunk::stamps_with_deltas(&row.events, &row.deltas).ok_or_else(|| {
                            StoreError::Corrupt("event chunk with mismatched deltas".into())
                        })?;
                    for (ts, delta) in stamps {
                        if delta == 0 {
                            continue;
                        }
                        let before = v;
                        v += delta;
                        let rel = ts.saturating_sub(t0);
                        if rel < from {
                            init = Some(v);
                        } else {
                            if init.is_none() {
                                init = Some(before);
                            }
                            put(rel, before.min(v), before.max(v), v);
                        }
                    }
                }
                initial = init.unwrap_or(0);
            }
        }
        let mut carry = initial;
        let mut pts = Vec::with_capacity(n);
        for (i, p) in out.into_iter().enumerate() {
            let p = match p {
                Some(mut p) => {
                    p.min = p.min.min(carry);
                    p.max = p.max.max(carry);
                    p
                }
                None => Point {
                    t_ns: from + i as u64 * bucket_ns,
                    min: carry,
                    max: carry,
                    last: carry,
                },
            };
            carry = p.last;
            pts.push(p);
        }
        // A point's min/max include the value carried in at its start (the step function
        // holds it until the first change), so no bucket under-reports.
        Ok(Some(Timeline {
            run_id: run,
            device,
            from_ns: from,
            to_ns: to,
            bucket_ns,
            source: if level.is_some() { "rollup" } else { "raw" },
            level,
            points: pts,
        }))
    }
}
