//! What a run's pages say of its failed requests however many there are: how many the
//! run holds and how many of them ran out of memory, and the marks of one device's chart
//! (the first failure in each column of the chart, counted per range and per run), so
//! a run with a million failed executes draws at most one mark per column.

use crate::codes;
use crate::db::{Store, StoreError};

/// A run's failed requests, counted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IncidentCounts {
    pub all: i64,
    /// Of those, the out-of-memory ones ([`codes::is_oom`]).
    pub oom: i64,
}

/// The failure marks of one device's chart over a range (times in ns since the run's
/// start).
#[derive(Debug, Clone, Default)]
pub(crate) struct FailureMarks {
    /// The first failure in each column of the chart that has one, in time order.
    pub times: Vec<u64>,
    /// Failures in the range.
    pub in_range: u64,
    /// Failures of the device in the run, and the first one's time.
    pub in_run: u64,
    pub first: Option<u64>,
}

#[derive(sqlx::FromRow)]
struct ByResult {
    api: String,
    result: i64,
    n: i64,
}

#[derive(sqlx::FromRow)]
struct DeviceTotal {
    n: i64,
    first: Option<i64>,
}

impl Store {
    /// How many failed requests run `run` holds.
    pub(crate) async fn incident_counts(&self, run: i64) -> Result<IncidentCounts, StoreError> {
        let rows: Vec<ByResult> = sqlx::query_as(
            "SELECT api, result, COUNT(*) AS n FROM incidents WHERE run_id = $1 \
             GROUP BY api, result",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().fold(IncidentCounts::default(), |mut c, r| {
            c.all += r.n;
            if codes::is_oom(&r.api, r.result) {
                c.oom += r.n;
            }
            c
        }))
    }

    /// The failure marks of `device` of run `run` (started at `t0`) for a chart of
    /// `columns` columns over [from, to).
    pub(crate) async fn failure_marks(
        &self,
        run: i64,
        t0: i64,
        device: i64,
        (from, to): (u64, u64),
        columns: u64,
    ) -> Result<FailureMarks, StoreError> {
        let start = t0.saturating_add(from as i64);
        let width = to.saturating_sub(from).div_ceil(columns.max(1)).max(1) as i64;
        let end = t0.saturating_add(to as i64);
        // One index seek per column (incidents_by_device): the first failure at or after
        // the start of the column after the last one found.
        let times: Vec<i64> = sqlx::query_scalar(
            "WITH RECURSIVE marks(ts) AS (\
             SELECT (SELECT MIN(ts_ns) FROM incidents WHERE run_id = $1 AND device = $2 \
             AND ts_ns >= $3 AND ts_ns < $4) \
             UNION ALL SELECT (SELECT MIN(i.ts_ns) FROM incidents i WHERE i.run_id = $1 \
             AND i.device = $2 AND i.ts_ns >= $3 + ((m.ts - $3) / $5 + 1) * $5 \
             AND i.ts_ns < $4) FROM marks m WHERE m.ts IS NOT NULL) \
             SELECT ts FROM marks WHERE ts IS NOT NULL",
        )
        .bind(run)
        .bind(device)
        .bind(start)
        .bind(end)
        .bind(width)
        .fetch_all(&self.pool)
        .await?;
        let in_range: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM incidents WHERE run_id = $1 AND device = $2 \
             AND ts_ns >= $3 AND ts_ns < $4",
        )
        .bind(run)
        .bind(device)
        .bind(start)
        .bind(end)
        .fetch_one(&self.pool)
        .await?;
        let total: DeviceTotal = sqlx::query_as(
            "SELECT COUNT(*) AS n, MIN(ts_ns) AS first FROM incidents WHERE run_id = $1 \
             AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_one(&self.pool)
        .await?;
        let rel = |ts: i64| (ts - t0).max(0) as u64;
        Ok(FailureMarks {
            times: times.into_iter().map(rel).collect(),
            in_range: in_range as u64,
            in_run: total.n as u64,
            first: total.first.map(rel),
        })
    }
}
