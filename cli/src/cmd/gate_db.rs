//! `memwatch gate --run ID --db PATH`: reads runs' per-device peaks from the daemon's store
//! (SQLite file or PostgreSQL) through the daemon crate's queries, and records gate results
//! in its `gate_results` table. The gate itself is sync; this module owns the small tokio
//! runtime that talks to the store.

use anyhow::{bail, Context, Result};
use memwatch_analysis::gate::source::stored_run::{self, StoredRun};
use memwatch_analysis::gate::{GateEntry, GateReport, Metric, Status};
use memwatch_daemon::{redact, GateResult, Store};
use std::collections::HashMap;

/// `--run [NAME=]ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    pub name: Option<String>,
    pub id: i64,
}

pub fn parse_run_ref(s: &str) -> Result<RunRef, String> {
    let (name, id) = match s.rsplit_once('=') {
        Some((n, id)) if !n.is_empty() => (Some(n.to_string()), id),
        Some(_) => return Err(format!("{s:?}: empty name before `=` (use NAME=ID or ID)")),
        None => (None, s),
    };
    let id = id
        .parse::<i64>()
        .map_err(|_| format!("{s:?}: run ID must be an integer (memwatch serve lists runs)"))?;
    Ok(RunRef { name, id })
}

/// Opens the store. A plain path must already exist: the gate never creates an empty
/// database (opening a store creates missing SQLite files).
fn open(rt: &tokio::runtime::Runtime, db: &str) -> Result<Store> {
    let shown = redact(db);
    let is_url = db.starts_with("postgres://")
        || db.starts_with("postgresql://")
        || db.starts_with("sqlite:");
    if !is_url {
        check_sqlite_file(db, &shown)?;
    }
    rt.block_on(Store::open(db))
        .with_context(|| format!("database {shown}: cannot open"))
}

/// A plain `--db` path must be an existing, non-empty SQLite file: the gate reads runs
/// that `memwatch run --db` or `memwatch import` stored, and never creates a store.
fn check_sqlite_file(db: &str, shown: &str) -> Result<()> {
    let meta = match std::fs::metadata(db) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("database {shown}: no such file")
        }
        Err(e) => bail!("database {shown}: cannot open: {e}"),
    };
    if meta.is_file() && meta.len() == 0 {
        bail!(
            "database {shown}: empty file, not a memwatch store (`memwatch run --db` or \
             `memwatch import --db` create one)"
        );
    }
    memwatch_daemon::check_sqlite_header(std::path::Path::new(db))?;
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A connection to the store for one gate invocation.
pub struct GateDb {
    rt: tokio::runtime::Runtime,
    store: Store,
    shown: String,
    /// Entry key -> the run it came from.
    run_of: HashMap<String, i64>,
}

impl GateDb {
    pub fn open(db: &str) -> Result<Self> {
        let rt = runtime()?;
        let store = open(&rt, db)?;
        Ok(Self {
            rt,
            store,
            shown: redact(db),
            run_of: HashMap::new(),
        })
    }

    /// Gate entries for one stored run: `<name>/device<D>`, metric `peak`.
    pub fn load_run(&mut self, r: &RunRef) -> Result<Vec<GateEntry>> {
        let detail = self
            .rt
            .block_on(self.store.run(r.id))
            .with_context(|| format!("database {}: cannot read run {}", self.shown, r.id))?;
        let Some(detail) = detail else {
            bail!("database {}: no run {}", self.shown, r.id);
        };
        let mut device_peaks = Vec::new();
        for d in &detail.run.devices {
            let peak = u64::try_from(d.peak_bytes).with_context(|| {
                format!(
                    "database {}: run {} device {}: negative peak {}",
                    self.shown, r.id, d.device, d.peak_bytes
                )
            })?;
            device_peaks.push((d.device, peak));
        }
        if device_peaks.is_empty() {
            bail!(
                "database {}: run {} ({}) has no device figures (no allocations were stored)",
                self.shown,
                r.id,
                detail.run.run_key
            );
        }
        let run = StoredRun {
            db: self.shown.clone(),
            run_id: r.id,
            run_key: detail.run.run_key.clone(),
            device_peaks,
        };
        let entries = stored_run::entries(&run, r.name.as_deref());
        for e in &entries {
            self.run_of.insert(e.key.clone(), r.id);
        }
        Ok(entries)
    }

    /// Writes one `gate_results` row per measured entry; returns the rows written.
    pub fn record(&self, report: &GateReport) -> Result<u64> {
        let rows: Vec<GateResult> = report
            .entries
            .iter()
            .filter(|e| e.status != Status::Missing)
            .filter_map(|e| result_row(e, self.run_of.get(&e.key).copied()))
            .collect();
        self.rt
            .block_on(self.store.record_gate_results(&rows))
            .with_context(|| format!("database {}: cannot record gate results", self.shown))
    }

    /// Closes the store (folding SQLite's write-ahead log into the file).
    pub fn close(self) -> Result<()> {
        self.rt
            .block_on(self.store.close())
            .with_context(|| format!("database {}: cannot close", self.shown))
    }
}

/// The row for one entry: its first regressed gated metric, else `peak`, else `total`,
/// else its first measured metric. The limit is the most the figure could have been
/// without failing (the measured figure itself for an entry new to the baseline).
fn result_row(
    e: &memwatch_analysis::gate::compare::EntryReport,
    run_id: Option<i64>,
) -> Option<GateResult> {
    let measured = |m: &&memwatch_analysis::gate::compare::MetricDelta| m.current_bytes.is_some();
    let pick = e
        .metrics
        .iter()
        .find(|m| m.regressed)
        .or_else(|| {
            e.metrics
                .iter()
                .filter(measured)
                .find(|m| m.metric == Metric::Peak)
        })
        .or_else(|| {
            e.metrics
                .iter()
                .filter(measured)
                .find(|m| m.metric == Metric::Total)
        })
        .or_else(|| e.metrics.iter().find(measured))?;
    let cur = pick.current_bytes?;
    let limit = match pick.baseline_bytes {
        Some(b) => {
            let rel = (b as f64 * e.max_increase_percent / 100.0) as u64;
            b.saturating_add(rel.max(e.max_increase_bytes))
        }
        None => cur,
    };
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Some(GateResult {
        run_id,
        name: e.key.clone(),
        passed: e.status != Status::Regressed,
        measured_bytes: clamp(cur),
        limit_bytes: clamp(limit),
        report_json: serde_json::to_string(e).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_refs_parse_with_and_without_name() {
        assert_eq!(parse_run_ref("12").unwrap(), RunRef { name: None, id: 12 });
        assert_eq!(
            parse_run_ref("train=3").unwrap(),
            RunRef {
                name: Some("train".into()),
                id: 3
            }
        );
        assert!(parse_run_ref("x").unwrap_err().contains("integer"));
        assert!(parse_run_ref("=3").unwrap_err().contains("empty name"));
    }
}
