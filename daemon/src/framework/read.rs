//! Reads the framework view's rollups back: every series of a device over a time range
//! at the level that gives about the wanted number of points (never finer than the
//! build's base level), gaps filled with the value carried from the bucket before.

use std::collections::BTreeMap;

use serde::Serialize;

use super::build::build_run;
use super::series;
use crate::db::{Store, StoreError};
use crate::ingest::rollup::{level_for, shift, width};
use crate::render::Point;

/// The framework series of one device over `[from_ns, to_ns)` (relative to the run start).
#[derive(Debug, Clone, Serialize)]
pub struct FrameworkTimeline {
    pub device: i64,
    pub from_ns: u64,
    pub to_ns: u64,
    pub bucket_ns: u64,
    pub level: i64,
    /// Series number (see `framework::series`) → its points, one per bucket.
    pub series: BTreeMap<i64, Vec<Point>>,
    /// Producer names by index (`framework_producers`).
    pub producers: Vec<String>,
}

impl FrameworkTimeline {
    pub fn get(&self, s: i64) -> Option<&[Point]> {
        self.series.get(&s).map(Vec::as_slice)
    }

    /// Whether the allocator sampled (PJRT memory statistics).
    pub fn has_allocator(&self) -> bool {
        self.series.contains_key(&series::IN_USE)
    }

    /// Whether this is a PyTorch snapshot run's view.
    pub fn is_torch(&self) -> bool {
        self.series.contains_key(&series::TORCH_ALLOCATED)
    }
}

/// The base level of a device's framework view; `None` when it has none (not built,
/// or the device has no framework records).
pub async fn base_level(store: &Store, run: i64, device: i64) -> Result<Option<i64>, StoreError> {
    let b: Option<i64> = sqlx::query_scalar(
        "SELECT base_level FROM framework_progress WHERE run_id = $1 AND device = $2",
    )
    .bind(run)
    .bind(device)
    .fetch_optional(&store.pool)
    .await?;
    Ok(b.filter(|&b| b >= 0))
}

/// Builds the run's framework view now when it was never built (a database the
/// background builder has not seen yet, e.g. right after `memwatch import --db`).
pub async fn ensure_built(store: &Store, run: i64) -> Result<(), StoreError> {
    let any: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM framework_progress WHERE run_id = $1")
        .bind(run)
        .fetch_one(&store.pool)
        .await?;
    if any == 0 {
        build_run(store, run).await?;
    }
    Ok(())
}

#[derive(sqlx::FromRow)]
struct RollupRow {
    series: i64,
    bucket: i64,
    lo: i64,
    hi: i64,
    last: i64,
}

/// The framework series of `device` over `[from, to)` with about `points` buckets.
pub async fn read(
    store: &Store,
    run: i64,
    device: i64,
    from: u64,
    to: u64,
    points: usize,
) -> Result<Option<FrameworkTimeline>, StoreError> {
    let Some(base) = base_level(store, run, device).await? else {
        return Ok(None);
    };
    let to = to.max(from + 1);
    let want = (to - from) / points.max(1) as u64;
    let level = level_for(want).map_or(base, |l| (l as i64).max(base)) as usize;
    let s = shift(level);
    let (b0, b1) = ((from >> s) as i64, ((to - 1) >> s) as i64);
    let rows: Vec<RollupRow> = sqlx::query_as(
        "SELECT series, bucket, lo, hi, last FROM framework_rollups WHERE run_id = $1 AND device = $2 \
         AND level = $3 AND bucket >= $4 AND bucket <= $5 ORDER BY series, bucket",
    )
    .bind(run)
    .bind(device)
    .bind(level as i64)
    .bind(b0)
    .bind(b1)
    .fetch_all(&store.pool)
    .await?;
    let carried: Vec<(i64, i64)> = if b0 > 0 {
        sqlx::query_as(
            "SELECT r.series, r.last FROM framework_rollups r JOIN (SELECT series, MAX(bucket) AS b \
             FROM framework_rollups WHERE run_id = $1 AND device = $2 AND level = $3 AND bucket < $4 \
             GROUP BY series) m ON r.series = m.series AND r.bucket = m.b \
             WHERE r.run_id = $1 AND r.device = $2 AND r.level = $3",
        )
        .bind(run)
        .bind(device)
        .bind(level as i64)
        .bind(b0)
        .fetch_all(&store.pool)
        .await?
    } else {
        Vec::new()
    };
    let mut by_series: BTreeMap<i64, (i64, Vec<RollupRow>)> = BTreeMap::new();
    for (s, last) in carried {
        by_series.entry(s).or_default().0 = if series::is_count(s) { 0 } else { last };
    }
    for r in rows {
        by_series.entry(r.series).or_default().1.push(r);
    }
    let w = width(level);
    let mut out = BTreeMap::new();
    for (s, (carry, rows)) in by_series {
        let count = series::is_count(s);
        let mut pts = Vec::with_capacity((b1 - b0 + 1) as usize);
        let mut it = rows.into_iter().peekable();
        let mut v = carry;
        for b in b0..=b1 {
            let t_ns = (b as u64 * w).max(from);
            match it.peek() {
                Some(r) if r.bucket == b => {
                    pts.push(Point {
                        t_ns,
                        min: r.lo,
                        max: r.hi,
                        last: r.last,
                    });
                    if !count {
                        v = r.last;
                    }
                    it.next();
                }
                _ => pts.push(Point {
                    t_ns,
                    min: if count { 0 } else { v },
                    max: if count { 0 } else { v },
                    last: if count { 0 } else { v },
                }),
            }
        }
        out.insert(s, pts);
    }
    let producers: Vec<String> =
        sqlx::query_scalar("SELECT name FROM framework_producers WHERE run_id = $1 ORDER BY idx")
            .bind(run)
            .fetch_all(&store.pool)
            .await?;
    Ok(Some(FrameworkTimeline {
        device,
        from_ns: from,
        to_ns: to,
        bucket_ns: w,
        level: level as i64,
        series: out,
        producers,
    }))
}
