//! What a run's pages say of its failed requests however many there are: how many the
//! run holds and whether one of them ran out of memory, and the marks of one device's chart
//! (the first failure in each column of the chart, counted per range and per run), so
//! a run with a million failed executes draws at most one mark per column.

use super::IncidentRow;
use crate::codes;
use crate::db::{Store, StoreError};

/// A run's failed requests, counted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IncidentCounts {
    pub all: i64,
    /// Whether one of them ran out of memory ([`codes::is_oom`]).
    pub any_oom: bool,
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
}

#[derive(sqlx::FromRow)]
struct DeviceTotal {
    n: i64,
    first: Option<i64>,
}

impl Store {
    /// How many failed requests run `run` holds, and whether one ran out of memory,
    /// given its newest ones (`listed`, [`Store::incidents`]): only when none of those
    /// did and there are more is every incident looked at.
    pub(crate) async fn incident_counts(
        &self,
        run: i64,
        listed: &[IncidentRow],
    ) -> Result<IncidentCounts, StoreError> {
        let all: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM incidents WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        if listed.iter().any(|i| codes::is_oom(&i.api, i.result)) || all as usize <= listed.len() {
            return Ok(IncidentCounts {
                all,
                any_oom: listed.iter().any(|i| codes::is_oom(&i.api, i.result)),
            });
        }
        let rows: Vec<ByResult> =
            sqlx::query_as("SELECT DISTINCT api, result FROM incidents WHERE run_id = $1")
                .bind(run)
                .fetch_all(&self.pool)
                .await?;
        Ok(IncidentCounts {
            all,
            any_oom: rows.iter().any(|r| codes::is_oom(&r.api, r.result)),
        })
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
