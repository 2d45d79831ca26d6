//! Writes `memwatch gate` results into the `gate_results` table (read back by the web
//! UI's gate page). One row per gated entry; all rows of one gate run in one transaction.

use super::{now_unix_ns, Store, StoreError};

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
