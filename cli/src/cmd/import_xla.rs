//! `memwatch import CAPTURE --xla-dump DIR`: attaches an XLA dump's modules to the run the
//! capture was stored as, directly in the database or through a daemon's
//! `POST /api/runs/{id}/xla`. The dump is parsed here (`memwatch_analysis::xla`); the
//! daemon stores the module reports and joins them to the run's PJRT executables.

use std::path::Path;

use anyhow::{bail, Context, Result};
use memwatch_analysis::xla::ModuleReport;
use memwatch_daemon::store::pjrt;
use memwatch_daemon::Store;

use super::import::Target;

/// Parses the dump at `dir` (before anything is stored, so a bad dump changes nothing).
pub fn load(dir: &Path) -> Result<Vec<ModuleReport>> {
    memwatch_analysis::xla::load_dump_dir(dir)
        .with_context(|| format!("--xla-dump {}", dir.display()))
}

/// Attaches `mods` (parsed from `dir`) to run `run` at `target`; returns how many.
pub fn attach(mods: &[ModuleReport], dir: &Path, target: &Target<'_>, run: i64) -> Result<usize> {
    match target {
        Target::Db(db) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            rt.block_on(async {
                let store = Store::open(db)
                    .await
                    .with_context(|| format!("database {}", memwatch_daemon::store::redact(db)))?;
                pjrt::attach_modules(&store, run, mods)
                    .await
                    .with_context(|| format!("storing the modules of {}", dir.display()))?
                    .with_context(|| format!("run {run} is not in {db}"))
            })
        }
        Target::Daemon { url, token } => {
            let base = url.trim_end_matches('/');
            let body = serde_json::to_vec(&serde_json::json!({ "modules": mods }))
                .context("encoding the module reports")?;
            let mut req = ureq::post(&format!("{base}/api/runs/{run}/xla"))
                .set("content-type", "application/json");
            if let Some(t) = token {
                req = req.set("authorization", &format!("Bearer {t}"));
            }
            match req.send_bytes(&body) {
                Ok(_) => Ok(mods.len()),
                Err(ureq::Error::Status(code, r)) => {
                    let msg = r.into_string().unwrap_or_default();
                    bail!("daemon {base} refused the XLA dump: HTTP {code} {msg}")
                }
                Err(e) => bail!("cannot reach daemon {base}: {e}"),
            }
        }
    }
}
