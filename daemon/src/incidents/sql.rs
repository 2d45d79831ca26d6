//! Incidents: failed allocations and failed executes recorded at ingest (`incidents`),
//! and allocator logs attached by `memwatch import --log` (`incident_logs`), stored
//! verbatim and diagnosed when read.

use serde::Serialize;

use crate::db::{now_unix_ns, Store, StoreError};

/// A failed allocation or execute.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct IncidentRow {
    pub id: i64,
    pub run_id: i64,
    pub node: String,
    pub pid: i64,
    pub tid: i64,
    pub device: i64,
    pub ts_ns: i64,
    pub size: i64,
    pub result: i64,
    pub api: String,
    pub live_bytes: i64,
    pub created_unix_ns: i64,
}

/// A stored log (without its text).
#[derive(Debug, Clone, serde::Serialize)]
pub struct IncidentLogRow {
    pub id: i64,
    pub run_id: Option<i64>,
    pub dump_id: Option<i64>,
    pub source: String,
    pub mem_fraction: Option<f64>,
    pub created_unix_ns: i64,
    pub bytes: i64,
}

/// An `incident_logs` row (without its text), as stored.
#[derive(sqlx::FromRow)]
struct LogRow {
    id: i64,
    run_id: Option<i64>,
    dump_id: Option<i64>,
    source: String,
    mem_fraction_ppm: Option<i64>,
    created_unix_ns: i64,
    bytes: i64,
}

impl From<LogRow> for IncidentLogRow {
    fn from(r: LogRow) -> Self {
        IncidentLogRow {
            id: r.id,
            run_id: r.run_id,
            dump_id: r.dump_id,
            source: r.source,
            mem_fraction: r.mem_fraction_ppm.map(|p| p as f64 / 1e6),
            created_unix_ns: r.created_unix_ns,
            bytes: r.bytes,
        }
    }
}

/// The columns [`LogRow`] reads.
const LOG_COLS: &str = "id, run_id, dump_id, source, mem_fraction_ppm, created_unix_ns, \
     CAST(LENGTH(log_text) AS BIGINT) AS bytes";

impl Store {
    /// Incidents (failed allocations), newest first, optionally of one run.
    pub async fn incidents(
        &self,
        run: Option<i64>,
        limit: i64,
    ) -> Result<Vec<IncidentRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT i.id AS id, i.run_id AS run_id, n.name AS node, i.pid AS pid, i.tid AS tid, \
             i.device AS device, i.ts_ns AS ts_ns, i.size AS size, i.result AS result, \
             i.api AS api, i.live_bytes AS live_bytes, i.created_unix_ns AS created_unix_ns \
             FROM incidents i JOIN runs r ON r.id = i.run_id \
             JOIN nodes n ON n.id = r.node_id WHERE ($1 < 0 OR i.run_id = $1) \
             ORDER BY i.id DESC LIMIT $2",
        )
        .bind(run.unwrap_or(-1))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Stores a log verbatim; returns its id.
    pub async fn insert_incident_log(
        &self,
        run_id: Option<i64>,
        dump_id: Option<i64>,
        source: &str,
        text: &str,
        mem_fraction: Option<f64>,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO incident_logs (run_id, dump_id, source, log_text, mem_fraction_ppm, \
             created_unix_ns) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(run_id)
        .bind(dump_id)
        .bind(source)
        .bind(text)
        .bind(mem_fraction.map(|f| (f * 1e6).round() as i64))
        .bind(now_unix_ns())
        .fetch_one(&self.pool)
        .await?)
    }

    /// Stored logs, newest first.
    pub async fn incident_logs(&self) -> Result<Vec<IncidentLogRow>, StoreError> {
        let rows: Vec<LogRow> = sqlx::query_as(&format!(
            "SELECT {LOG_COLS} FROM incident_logs ORDER BY id DESC LIMIT 1000"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(IncidentLogRow::from).collect())
    }

    /// One stored log and its text.
    pub(crate) async fn incident_log(
        &self,
        id: i64,
    ) -> Result<Option<(IncidentLogRow, String)>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct WithText {
            #[sqlx(flatten)]
            row: LogRow,
            log_text: String,
        }
        let r: Option<WithText> = sqlx::query_as(&format!(
            "SELECT {LOG_COLS}, log_text FROM incident_logs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.map(|r| (r.row.into(), r.log_text)))
    }

    /// The start (monotonic ns) of each of the newest `limit` runs, by id.
    pub(crate) async fn run_starts(
        &self,
        limit: i64,
    ) -> Result<std::collections::HashMap<i64, i64>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Start {
            id: i64,
            t0_mono_ns: i64,
        }
        let rows: Vec<Start> =
            sqlx::query_as("SELECT id, t0_mono_ns FROM runs ORDER BY id DESC LIMIT $1")
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|r| (r.id, r.t0_mono_ns)).collect())
    }
}
