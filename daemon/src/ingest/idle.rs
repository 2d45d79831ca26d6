//! Connections that sit idle, oldest first (ingest connections between batches, HTTP
//! connections that have not completed a request), so that a new connection at the
//! connection limit closes the longest-idle one instead of being refused: idle
//! connections (an agent with nothing to send, or a client that opened many and sends
//! nothing or trickles headers) cannot keep a working client out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The idle connections; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct IdleConns {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// (idle since, id) -> how to tell that connection to close.
    idle: BTreeMap<(Instant, u64), Arc<Notify>>,
}

/// A connection's stay in the idle set; leaving it (drop) removes it.
pub(crate) struct Idle {
    set: IdleConns,
    key: (Instant, u64),
    notify: Arc<Notify>,
}

impl IdleConns {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calling connection is idle from now until the returned value is dropped.
    pub(crate) fn enter(&self) -> Idle {
        let notify = Arc::new(Notify::new());
        let mut g = self.lock();
        g.next += 1;
        let key = (Instant::now(), g.next);
        g.idle.insert(key, notify.clone());
        Idle {
            set: self.clone(),
            key,
            notify,
        }
    }

    /// Tells the connection idle the longest to close; false when none is idle.
    pub(crate) fn close_oldest(&self) -> bool {
        let oldest = self.lock().idle.pop_first();
        match oldest {
            Some((_, n)) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Idle {
    /// Resolves when another connection needs this one's place.
    pub(crate) async fn evicted(&self) {
        self.notify.notified().await
    }

    /// What [`Self::evicted`] waits on, to wait on it after this stay has ended.
    pub(crate) fn signal(&self) -> Arc<Notify> {
        self.notify.clone()
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.set.lock().idle.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_longest_idle_is_closed_first_and_leaving_removes() {
        let set = IdleConns::default();
        let a = set.enter();
        let b = set.enter();
        let c = set.enter();
        drop(b);
        assert!(set.close_oldest());
        // `a` was told (the permit waits for it), `c` was not.
        tokio::time::timeout(std::time::Duration::from_secs(5), a.evicted())
            .await
            .expect("a is told to close");
        assert!(set.close_oldest());
        tokio::time::timeout(std::time::Duration::from_secs(5), c.evicted())
            .await
            .expect("c is told to close");
        assert!(!set.close_oldest());
    }
}
