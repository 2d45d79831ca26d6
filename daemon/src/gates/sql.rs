//! `memwatch gate` results in the `gate_results` table: written by `memwatch gate --db`
//! (one row per gated entry; all rows of one gate run in one transaction), read back by
//! the Gate history page.

use crate::db::{now_unix_ns, Store, StoreError};

/// One gate verdict for one entry.
#[derive(Debug, Clone)]
pub struct GateResult {
    /// The run the figures came from, when they came from the store.
    pub run_id: Option<i64>,
    /// The gate entry key (`train/device0`).
    pub name: String,
    pub passed: bool,
    /// The measured figure (bytes) of the gated metric.
    pub measured_bytes: i64,
    /// The most it could have been without failing (baseline + allowance), or the
    /// measured figure when there was no baseline.
    pub limit_bytes: i64,
    /// The entry's report as JSON.
    pub report_json: String,
}

impl Store {
    /// Inserts `results` atomically; returns how many rows were written.
    pub async fn record_gate_results(&self, results: &[GateResult]) -> Result<u64, StoreError> {
        let now = now_unix_ns();
        let mut tx = self.pool.begin().await?;
        for r in results {
            sqlx::query(
                "INSERT INTO gate_results (run_id, name, passed, measured_bytes, limit_bytes, \
                 report_json, created_unix_ns) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(r.run_id)
            .bind(&r.name)
            .bind(i64::from(r.passed))
            .bind(r.measured_bytes)
            .bind(r.limit_bytes)
            .bind(&r.report_json)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(results.len() as u64)
    }
}

/// A stored gate result.
pub struct GateRow {
    pub name: String,
    pub run_id: Option<i64>,
    pub passed: bool,
    pub measured_bytes: i64,
    pub limit_bytes: i64,
    pub created_unix_ns: i64,
}

/// A `gate_results` row as stored (`passed` is 0 or 1).
#[derive(sqlx::FromRow)]
struct Stored {
    name: String,
    run_id: Option<i64>,
    passed: i64,
    measured_bytes: i64,
    limit_bytes: i64,
    created_unix_ns: i64,
}

/// Gate results by entry name, newest first within each (at most 2000).
pub async fn gate_results(store: &Store) -> Result<Vec<GateRow>, StoreError> {
    let rows: Vec<Stored> = sqlx::query_as(
        "SELECT name, run_id, passed, measured_bytes, limit_bytes, created_unix_ns \
         FROM gate_results ORDER BY name, created_unix_ns DESC LIMIT 2000",
    )
    .fetch_all(&store.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| GateRow {
            name: r.name,
            run_id: r.run_id,
            passed: r.passed != 0,
            measured_bytes: r.measured_bytes,
            limit_bytes: r.limit_bytes,
            created_unix_ns: r.created_unix_ns,
        })
        .collect())
}
