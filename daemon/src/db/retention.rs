//! Retention: `memwatch serve --retain-raw-days` deletes old raw event chunks; rollups,
//! peaks, incidents and everything else stay, and each run remembers up to when its raw
//! events are gone (`runs.raw_pruned_to_ns`).

use super::{now_unix_ns, Store, StoreError};

impl Store {
    /// Deletes raw event chunks older than `max_age_ns` (rollups, peaks and everything
    /// else stay) and records per run up to when raw events are gone. Returns the number
    /// of chunks deleted.
    pub async fn apply_retention(&self, max_age_ns: i64) -> Result<u64, StoreError> {
        let cutoff = now_unix_ns() - max_age_ns;
        // Old enough, and covered by a live-set checkpoint of its device (the background
        // checkpointer writes them within seconds): "live at an instant" after the
        // checkpoint stays exact, and later checkpoints never start from missing events.
        let prunable = |c: &str| {
            format!(
                "{c}.created_unix_ns < $1 AND {c}.id <= COALESCE((SELECT MAX(k.after_chunk) \
                 FROM live_checkpoints k WHERE k.run_id = {c}.run_id AND k.device = {c}.device), -1)"
            )
        };
        let mut tx = self.pool.begin().await?;
        // Remember, per run, up to when raw events are gone (timelines then read rollups).
        sqlx::query(&format!(
            "UPDATE runs SET raw_pruned_to_ns = CASE \
             WHEN raw_pruned_to_ns IS NOT NULL AND raw_pruned_to_ns > (SELECT MAX(c.ts_last) \
               FROM event_chunks c WHERE c.run_id = runs.id AND {p}) \
             THEN raw_pruned_to_ns \
             ELSE (SELECT MAX(c.ts_last) FROM event_chunks c WHERE c.run_id = runs.id AND {p}) END \
             WHERE id IN (SELECT c.run_id FROM event_chunks c WHERE {p})",
            p = prunable("c")
        ))
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
        let r = sqlx::query(&format!(
            "DELETE FROM event_chunks WHERE id IN (SELECT c.id FROM event_chunks c WHERE {})",
            prunable("c")
        ))
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(r.rows_affected())
    }
}
