//! The checkpointer: a background task of `memwatch serve` that keeps every device's
//! live-set checkpoints (`Store::extend_checkpoints`) current as events are stored, so
//! that "what was live at this instant" never has to replay a whole run on the request
//! path. At start it catches up on everything already in the database (runs imported
//! with `memwatch import --db`, or stored by an older daemon); afterwards it looks only at
//! devices that received chunks since its last pass, and extends a device once at least
//! [`CHECKPOINT_EVENTS`] events have gathered after its newest checkpoint.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::checkpoints::{CHECKPOINT_EVENTS, CHECKPOINT_PER_LIVE};
use crate::db::{Store, StoreError};

/// What the checkpointer has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Passes completed (the first one catches up on the whole database).
    pub passes: u64,
    /// Checkpoints written in all passes.
    pub written: u64,
    /// How long the first pass took.
    pub first_pass: Duration,
    /// Passes that failed (a database error; the next pass retries the same devices).
    pub failed: u64,
}

/// How often a pass looks at every device rather than those with new chunks.
const FULL_PASS_EVERY: Duration = Duration::from_secs(60);

/// When the checkpointer works and how densely it checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Pause between passes.
    pub every: Duration,
    /// A device is extended once this many events follow its newest checkpoint.
    pub min_events: usize,
    /// Events between checkpoints (see `Store::extend_checkpoints_every`)...
    pub spacing: usize,
    /// ...and at least this many per live allocation.
    pub per_live: usize,
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self {
            every: Duration::from_secs(2),
            min_events: CHECKPOINT_EVENTS,
            spacing: CHECKPOINT_EVENTS,
            per_live: CHECKPOINT_PER_LIVE,
        }
    }
}

/// Starts the checkpointer. The receiver sees [`Progress`] after each pass (tests and
/// benchmarks wait on it).
pub fn spawn_checkpointer(store: Store, settings: CheckpointSettings) -> watch::Receiver<Progress> {
    let (tx, rx) = watch::channel(Progress::default());
    tokio::spawn(async move {
        let mut seen: Option<i64> = None;
        let mut waits = Waits::new();
        let mut progress = Progress::default();
        let mut last_full = Instant::now();
        loop {
            let t = Instant::now();
            // Now and then a pass over every device: on PostgreSQL a chunk id can become
            // visible after a larger one (two writers, e.g. an import beside the daemon).
            if last_full.elapsed() >= FULL_PASS_EVERY {
                seen = None;
                last_full = t;
            }
            match pass(&store, seen, &settings, &mut waits).await {
                Ok((newest, written)) => {
                    seen = newest.or(seen);
                    progress.written += written as u64;
                    if written > 0 {
                        tracing::debug!("checkpointer: wrote {written} live-set checkpoints");
                    }
                }
                // Transient (a busy database); the next pass retries from the same place.
                Err(e) => {
                    progress.failed += 1;
                    tracing::warn!("checkpointer: {e}");
                }
            }
            if progress.passes == 0 {
                progress.first_pass = t.elapsed();
            }
            progress.passes += 1;
            // Stored even when nobody watches: the daemon needs the checkpoints, not
            // the progress.
            tx.send_replace(progress);
            tokio::time::sleep(settings.every).await;
        }
    });
    rx
}

/// Devices whose last extension wrote no checkpoint: the events after their newest
/// checkpoint needed before the next try (a checkpoint needs `per_live` events per live
/// allocation; without this, a device with millions of allocations live would be
/// replayed from its last checkpoint at every pass, for nothing).
type Waits = HashMap<(i64, i64), i64>;

/// One pass: the devices with chunks newer than `seen` (all devices when `None`) that have
/// at least `min_events` events after their newest checkpoint (and as many as `waits`
/// asks) get extended. Returns the newest chunk id seen and the checkpoints written.
async fn pass(
    store: &Store,
    seen: Option<i64>,
    s: &CheckpointSettings,
    waits: &mut Waits,
) -> Result<(Option<i64>, usize), StoreError> {
    let heads = store.newest_chunks(seen).await?;
    let mut written = 0;
    for &(run, device, _) in &heads {
        let after = store.events_after_checkpoint(run, device).await?;
        let wait = waits.get(&(run, device)).copied().unwrap_or(0);
        if after < (s.min_events.max(1) as i64).max(wait) {
            continue;
        }
        let x = store
            .extend_checkpoints_within(run, device, s.spacing, s.per_live)
            .await?;
        written += x.written;
        if x.written == 0 || x.stopped {
            let need = (x.live.saturating_mul(s.per_live)).min(i64::MAX as usize) as i64;
            waits.insert((run, device), need);
        } else {
            waits.remove(&(run, device));
        }
    }
    // Only advance past what was fully handled: an error above returns before this.
    Ok((heads.iter().map(|h| h.2).max(), written))
}
