//! `memwatch import CAPTURE --xla-dump DIR`: attaches an XLA dump's modules to the run the
//! capture was stored as, directly in the database or through a daemon's
//! `POST /api/runs/{id}/xla`. The caller parses the dump first (`memwatch xla`'s loader,
//! so a bad dump stores nothing); the daemon stores the module reports and joins them to
//! the run's PJRT executables.

use std::path::Path;

use anyhow::{Context, Result};
use memwatch_analysis::xla::ModuleReport;

use super::store_target::{post_json, with_store, Target};

/// Attaches `mods` (parsed from `dir`) to run `run` at `target`; returns how many.
pub fn attach(mods: &[ModuleReport], dir: &Path, target: &Target<'_>, run: i64) -> Result<usize> {
    match target {
        Target::Db(db) => with_store(db, async |store| {
            store
                .attach_xla_modules(run, &source(dir), mods)
                .await
                .with_context(|| format!("storing the modules of {}", dir.display()))?
                .with_context(|| format!("run {run} is not in {}", memwatch_daemon::redact(db)))
        }),
        Target::Daemon { url, token } => {
            let body =
                serde_json::to_vec(&serde_json::json!({ "modules": mods, "source": source(dir) }))
                    .context("encoding the module reports")?;
            post_json(
                url,
                *token,
                &format!("/api/runs/{run}/xla"),
                &body,
                "the XLA dump",
            )?;
            Ok(mods.len())
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
