//! `memwatch import CAPTURE --xla-dump DIR`: attaches an XLA dump's modules to the run the
//! capture was stored as, directly in the database or through a daemon's
//! `POST /api/runs/{id}/xla`. The caller parses the dump first (`memwatch xla`'s loader,
//! so a bad dump stores nothing); the daemon stores the module reports and joins them to
//! the run's PJRT executables.

use std::path::Path;

use anyhow::{bail, Context, Result};
use memwatch_analysis::xla::ModuleReport;
use memwatch_daemon::Store;

use super::store_target::Target;

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
                    .with_context(|| format!("database {}", memwatch_daemon::redact(db)))?;
                let n = store
                    .attach_xla_modules(run, &source(dir), mods)
                    .await
                    .with_context(|| format!("storing the modules of {}", dir.display()))?
                    .with_context(|| format!("run {run} is not in {db}"))?;
                store
                    .close()
                    .await
                    .with_context(|| format!("closing {db}"))?;
                Ok(n)
            })
        }
        Target::Daemon { url, token } => {
            let base = url.trim_end_matches('/');
            let body =
                serde_json::to_vec(&serde_json::json!({ "modules": mods, "source": source(dir) }))
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

/// How a dump is named where it is stored: its absolute path when it has one.
pub(super) fn source(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}
