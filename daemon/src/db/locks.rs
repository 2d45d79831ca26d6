//! [`KeyedLocks`]: one async lock per (run, device), held while that device's live-set
//! checkpoints are extended (`peak::checkpoints`), so that two extensions of one device
//! (the background checkpointer and a request) do not do the work twice. Kept in the
//! [`Store`](super::Store), which every task shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A lock held while one (run, device)'s checkpoints are extended.
pub(crate) type DeviceLock = Arc<tokio::sync::Mutex<()>>;

/// One lock per (run, device).
#[derive(Clone, Default)]
pub(crate) struct KeyedLocks(Arc<Mutex<HashMap<(i64, i64), DeviceLock>>>);

impl KeyedLocks {
    /// The lock of `(run, device)`.
    pub(crate) fn of(&self, run: i64, device: i64) -> DeviceLock {
        // A poisoned map only means another thread panicked while inserting; the map
        // itself is still usable.
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= 1024 {
            // Locks nobody holds or waits for (only the map refers to them).
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry((run, device)).or_default().clone()
    }
}
