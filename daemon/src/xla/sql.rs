//! Stored XLA dumps (`xla_dumps` + `xla_dump_modules`, migration 0004): each module's
//! summary figures and its `memwatch_analysis::xla::ModuleReport` as JSON, attached to a
//! run (`memwatch import CAPTURE --xla-dump`, `POST /api/runs/{id}/xla`) or on their own
//! (`memwatch import --xla-dump`); and the legacy `xla_modules` rows older versions
//! stored.

use memwatch_analysis::xla::ModuleReport;

use crate::db::{now_unix_ns, Store, StoreError};

/// One module of an attached dump, to store.
pub struct NewModule {
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub peak_bytes: Option<i64>,
    pub total_allocation_bytes: i64,
    /// `memwatch_analysis::xla::ModuleReport` as JSON.
    pub report_json: String,
}

impl NewModule {
    /// The row for one analysed module (`memwatch_analysis::xla::ModuleReport`).
    pub fn from_report(m: &memwatch_analysis::xla::ModuleReport) -> Result<Self, StoreError> {
        Ok(NewModule {
            name: m.name.clone(),
            argument_bytes: m.argument_bytes as i64,
            output_bytes: m.output_bytes as i64,
            temp_bytes: m.temp_bytes as i64,
            peak_bytes: m.peak_bytes.map(|b| b as i64),
            total_allocation_bytes: m.total_allocation_bytes as i64,
            report_json: serde_json::to_string(m)
                .map_err(|e| StoreError::Corrupt(format!("module {}: {e}", m.name)))?,
        })
    }
}

/// A stored module (without its report).
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct DumpModuleRow {
    pub id: i64,
    pub dump_id: i64,
    pub run_id: Option<i64>,
    pub source: String,
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub peak_bytes: Option<i64>,
    pub total_allocation_bytes: i64,
}

/// The columns [`DumpModuleRow`] reads, of `xla_dump_modules m JOIN xla_dumps d`.
const MODULE_COLS: &str = "m.id AS id, m.dump_id AS dump_id, d.run_id AS run_id, \
     d.source AS source, m.name AS name, m.argument_bytes AS argument_bytes, \
     m.output_bytes AS output_bytes, m.temp_bytes AS temp_bytes, m.peak_bytes AS peak_bytes, \
     m.total_allocation_bytes AS total_allocation_bytes";

/// A legacy `xla_modules` row.
#[derive(sqlx::FromRow)]
pub(crate) struct XlaRow {
    pub run_id: i64,
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub total_allocation_bytes: i64,
}

impl Store {
    /// Stores an analysed dump and its modules in one transaction; returns the dump id.
    pub async fn insert_xla_dump(
        &self,
        run_id: Option<i64>,
        source: &str,
        modules: &[NewModule],
    ) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO xla_dumps (run_id, source, created_unix_ns) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(run_id)
        .bind(source)
        .bind(now_unix_ns())
        .fetch_one(&mut *tx)
        .await?;
        insert_modules(&mut tx, id, modules).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Attaches a dump to run `run`: the dump from the same `source` attached to that run
    /// before keeps its id and has its modules replaced (so attaching twice does not count
    /// a module twice); returns the dump id. The run's PJRT attribution
    /// ([`Store::run_modules`]) and the XLA module page both read these rows.
    pub async fn attach_run_dump(
        &self,
        run: i64,
        source: &str,
        modules: &[NewModule],
    ) -> Result<i64, StoreError> {
        let old: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM xla_dumps WHERE run_id = $1 AND source = $2 ORDER BY id",
        )
        .bind(run)
        .bind(source)
        .fetch_optional(&self.pool)
        .await?;
        let Some(id) = old else {
            return self.insert_xla_dump(Some(run), source, modules).await;
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM xla_dump_modules WHERE dump_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE xla_dumps SET created_unix_ns = $1 WHERE id = $2")
            .bind(now_unix_ns())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        insert_modules(&mut tx, id, modules).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Stored modules, newest dump first (of one dump when `dump` is given).
    pub async fn dump_modules(&self, dump: Option<i64>) -> Result<Vec<DumpModuleRow>, StoreError> {
        Ok(sqlx::query_as(&format!(
            "SELECT {MODULE_COLS} FROM xla_dump_modules m JOIN xla_dumps d ON d.id = m.dump_id \
             WHERE ($1 < 0 OR m.dump_id = $1) ORDER BY m.dump_id DESC, m.id LIMIT 2000"
        ))
        .bind(dump.unwrap_or(-1))
        .fetch_all(&self.pool)
        .await?)
    }

    /// One module and its report JSON.
    pub(crate) async fn dump_module(
        &self,
        id: i64,
    ) -> Result<Option<(DumpModuleRow, String)>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct WithReport {
            #[sqlx(flatten)]
            row: DumpModuleRow,
            report_json: String,
        }
        let r: Option<WithReport> = sqlx::query_as(&format!(
            "SELECT {MODULE_COLS}, m.report_json AS report_json FROM xla_dump_modules m \
             JOIN xla_dumps d ON d.id = m.dump_id WHERE m.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.map(|r| (r.row, r.report_json)))
    }

    /// The report JSON of every module of a dump, in id order.
    pub(crate) async fn dump_report_texts(&self, dump: i64) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT report_json FROM xla_dump_modules WHERE dump_id = $1 ORDER BY id",
        )
        .bind(dump)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The XLA modules of the dumps attached to run `run` (oldest first).
    pub(crate) async fn run_modules(&self, run: i64) -> Result<Vec<ModuleReport>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Report {
            id: i64,
            report_json: String,
        }
        let rows: Vec<Report> = sqlx::query_as(
            "SELECT m.id AS id, m.report_json AS report_json FROM xla_dump_modules m \
             JOIN xla_dumps d ON d.id = m.dump_id WHERE d.run_id = $1 ORDER BY m.id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&r.report_json).map_err(|e| {
                    StoreError::Corrupt(format!("xla_dump_modules row {}: report_json: {e}", r.id))
                })
            })
            .collect()
    }

    /// Attaches `mods` (an XLA dump's module reports, read from `source`) to run `run`, in
    /// the dump tables, where the XLA module page finds them too and the run's PJRT
    /// attribution joins them; attaching the same source again replaces its modules.
    /// Returns how many were stored; None when there is no such run.
    pub async fn attach_xla_modules(
        &self,
        run: i64,
        source: &str,
        mods: &[ModuleReport],
    ) -> Result<Option<usize>, StoreError> {
        if self.run_t0(run).await?.is_none() {
            return Ok(None);
        }
        let rows = mods
            .iter()
            .map(NewModule::from_report)
            .collect::<Result<Vec<_>, _>>()?;
        self.attach_run_dump(run, source, &rows).await?;
        Ok(Some(mods.len()))
    }

    /// Stores an analysed dump's modules, attached to run `run` (replacing the modules of
    /// the same `source` attached to it before) or on their own; returns the dump id.
    pub async fn store_xla_dump(
        &self,
        run: Option<i64>,
        source: &str,
        mods: &[ModuleReport],
    ) -> Result<i64, StoreError> {
        let rows = mods
            .iter()
            .map(NewModule::from_report)
            .collect::<Result<Vec<_>, _>>()?;
        match run {
            Some(run) => self.attach_run_dump(run, source, &rows).await,
            None => self.insert_xla_dump(None, source, &rows).await,
        }
    }

    /// Legacy `xla_modules` rows (of one run, or all), newest first.
    pub(crate) async fn legacy_xla_modules(
        &self,
        run: Option<i64>,
    ) -> Result<Vec<XlaRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT run_id, name, argument_bytes, output_bytes, temp_bytes, \
             total_allocation_bytes FROM xla_modules WHERE ($1 < 0 OR run_id = $1) ORDER BY id DESC LIMIT 500",
        )
        .bind(run.unwrap_or(-1))
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Inserts `modules` as the modules of dump `dump_id`.
async fn insert_modules(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dump_id: i64,
    modules: &[NewModule],
) -> Result<(), StoreError> {
    for m in modules {
        sqlx::query(
            "INSERT INTO xla_dump_modules (dump_id, name, argument_bytes, output_bytes, \
             temp_bytes, peak_bytes, total_allocation_bytes, report_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(dump_id)
        .bind(&m.name)
        .bind(m.argument_bytes)
        .bind(m.output_bytes)
        .bind(m.temp_bytes)
        .bind(m.peak_bytes)
        .bind(m.total_allocation_bytes)
        .bind(&m.report_json)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
