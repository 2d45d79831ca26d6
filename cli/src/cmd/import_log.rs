//! `memwatch import --db PATH --log FILE [--xla-dump DIR]`: attaches a JAX/XLA/TSL log
//! and/or an analysed XLA dump to a database for the dashboard's Incident and XLA module
//! pages. The log is checked with the same parser as `memwatch log` and stored verbatim
//! (the page re-diagnoses it); the dump is analysed like `memwatch xla report` and each
//! module's report is stored as JSON.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use memwatch_analysis::log::{self, diagnose, LogReport};
use memwatch_daemon::Store;
use serde::Serialize;

use super::Outcome;

/// Largest log stored (bigger logs are refused with a clear message).
const MAX_LOG_BYTES: u64 = 256 << 20;

#[derive(Serialize)]
struct Summary {
    log_id: Option<i64>,
    dump_id: Option<i64>,
    run_id: Option<i64>,
    modules: Vec<String>,
    ooms: usize,
    diagnoses: usize,
    page: Option<String>,
}

/// What the `--log` / `--xla-dump` form of `memwatch import` was given.
pub struct LogImport<'a> {
    pub db: Option<&'a str>,
    pub log: Option<&'a Path>,
    pub xla_dump: Option<&'a Path>,
    pub mem_fraction: Option<f64>,
    pub run_id: Option<i64>,
    pub json: bool,
}

/// A log's text: at most [`MAX_LOG_BYTES`], UTF-8.
fn read_log(path: &Path) -> Result<String> {
    let f = File::open(path).with_context(|| format!("{}: cannot open log", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_LOG_BYTES {
        bail!(
            "{}: log is {len} bytes; at most {MAX_LOG_BYTES} are stored",
            path.display()
        );
    }
    let mut bytes = Vec::with_capacity(len as usize);
    BufReader::new(f)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{}: cannot read log", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (byte {}); is this a log file?",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Keeps the stderr a capture was imported with (`memwatch import CAPTURE --log`) beside
/// its run, for the Incident page and the run's error line; a log of the same name
/// already stored with the run is not stored again. Returns its id.
pub async fn keep_with_run(
    store: &Store,
    run: i64,
    path: &Path,
    mem_fraction: Option<f64>,
) -> Result<i64> {
    let source = path.display().to_string();
    let text = read_log(path)?;
    if let Some(l) = store
        .incident_logs()
        .await?
        .into_iter()
        .find(|l| l.run_id == Some(run) && l.source == source)
    {
        return Ok(l.id);
    }
    Ok(store
        .insert_incident_log(Some(run), None, &source, &text, mem_fraction)
        .await?)
}

/// Runs the `--log` / `--xla-dump` form of `memwatch import` (no capture).
pub fn run(a: &LogImport<'_>) -> Result<Outcome> {
    let Some(db) = a.db else {
        bail!("--log and --xla-dump are stored with --db PATH|URL (not through --daemon)");
    };
    if let Some(f) = a.mem_fraction {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--mem-fraction {f}: must be in (0, 1]");
        }
    }
    // A dump directory with no module, or a path that is none, is an error there.
    let mods = match a.xla_dump {
        Some(d) => super::xla::load(d)?,
        None => Vec::new(),
    };
    let log = match a.log {
        Some(path) => {
            let text = read_log(path)?;
            let mut report = LogReport::default();
            log::parse_log(text.as_bytes(), path, &mut report)?;
            Some((path, text, report))
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let s = rt.block_on(async {
        let store = Store::open(db)
            .await
            .with_context(|| format!("--db {}", memwatch_daemon::redact(db)))?;
        if let Some(r) = a.run_id {
            if !store.run_exists(r).await? {
                bail!("--run-id {r}: there is no run {r} in this database");
            }
        }
        let dump_id = match a.xla_dump {
            // Onto a run (--run-id): also what the run's peak attribution joins with.
            Some(d) => Some(
                store
                    .store_xla_dump(a.run_id, &super::import_xla::source(d), &mods)
                    .await?,
            ),
            None => None,
        };
        let mut s = Summary {
            log_id: None,
            dump_id,
            run_id: a.run_id,
            modules: mods.iter().map(|m| m.name.clone()).collect(),
            ooms: 0,
            diagnoses: 0,
            page: dump_id.map(|d| format!("/xla?dump={d}")),
        };
        if let Some((path, text, report)) = &log {
            let id = store
                .insert_incident_log(
                    a.run_id,
                    dump_id,
                    &path.display().to_string(),
                    text,
                    a.mem_fraction,
                )
                .await?;
            s.log_id = Some(id);
            s.ooms = report.ooms.len();
            s.diagnoses = if mods.is_empty() {
                0
            } else {
                diagnose::diagnose(report, &mods, a.mem_fraction).len()
            };
            s.page = Some(format!("/incidents/logs/{id}"));
        }
        store.close().await?;
        Ok::<_, anyhow::Error>(s)
    })?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(Outcome::Success);
    }
    if let Some(d) = s.dump_id {
        outln!(
            "stored XLA dump #{d}: {} module(s) ({})",
            s.modules.len(),
            s.modules.join(", ")
        );
    }
    if let Some(l) = s.log_id {
        outln!(
            "stored log #{l}: {} out-of-memory report(s), {} diagnosed with the dump",
            s.ooms,
            s.diagnoses
        );
    }
    if let Some(p) = &s.page {
        outln!("open it in `memwatch serve --db …` at {p}");
    }
    Ok(Outcome::Success)
}
