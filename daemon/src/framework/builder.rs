//! The framework view's background builder, a task of `memwatch serve` beside the
//! checkpointer: every pass it rebuilds the framework view of each run whose stored
//! records moved on since its last build (`framework_progress.swept_to_ns` behind
//! `runs.last_ts_ns`), so pages read small rollups and never sweep buffers on the request
//! path. A live run is rebuilt at most every [`LIVE_REBUILD`] or four times its last
//! build's length, whichever is longer, so its rollups trail the run by seconds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::build::build_run;
use crate::db::{Store, StoreError};

/// The least time between two builds of one run.
pub const LIVE_REBUILD: Duration = Duration::from_secs(5);

/// What the builder has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuilderProgress {
    pub passes: u64,
    /// Run builds done in all passes.
    pub builds: u64,
    /// How long the first pass took (it catches up on every stored run).
    pub first_pass: Duration,
    pub failed: u64,
}

/// Runs whose framework view is missing or behind their newest stored record.
pub async fn stale_runs(store: &Store) -> Result<Vec<i64>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT r.id FROM runs r WHERE EXISTS (SELECT 1 FROM run_devices d WHERE d.run_id = r.id) \
         AND NOT EXISTS (SELECT 1 FROM framework_progress p WHERE p.run_id = r.id \
         AND p.swept_to_ns = r.last_ts_ns) ORDER BY r.id",
    )
    .fetch_all(&store.pool)
    .await?)
}

/// Starts the builder; the receiver sees [`BuilderProgress`] after each pass.
pub fn spawn_framework_builder(store: Store, every: Duration) -> watch::Receiver<BuilderProgress> {
    let (tx, rx) = watch::channel(BuilderProgress::default());
    tokio::spawn(async move {
        let mut progress = BuilderProgress::default();
        let mut next_at: HashMap<i64, Instant> = HashMap::new();
        loop {
            let t = Instant::now();
            match stale_runs(&store).await {
                Ok(runs) => {
                    for run in runs {
                        if next_at.get(&run).is_some_and(|n| Instant::now() < *n) {
                            continue;
                        }
                        let began = Instant::now();
                        match build_run(&store, run).await {
                            Ok(_) => progress.builds += 1,
                            Err(e) => {
                                progress.failed += 1;
                                tracing::warn!("framework builder: run {run}: {e}");
                            }
                        }
                        next_at.insert(run, Instant::now() + LIVE_REBUILD.max(began.elapsed() * 4));
                    }
                }
                Err(e) => {
                    progress.failed += 1;
                    tracing::warn!("framework builder: {e}");
                }
            }
            if progress.passes == 0 {
                progress.first_pass = t.elapsed();
            }
            progress.passes += 1;
            tx.send_replace(progress);
            tokio::time::sleep(every).await;
        }
    });
    rx
}
