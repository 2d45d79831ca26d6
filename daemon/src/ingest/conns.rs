//! The open connections of one listener (TCP ingest or HTTP) by peer (`peer`), and which
//! one closes when a new one has no room, so that neither idle connections nor one peer's
//! many connections keep another client out.
//!
//! Limits: at most `total` connections and `per_peer` from one peer. A new connection:
//! - from a peer at its share closes that peer's connection idle the longest, or is
//!   refused when none of its connections is idle;
//! - at the total limit, from a peer under its share, closes a connection of the peer
//!   holding the most, when that peer holds at least two more than the newcomer's peer:
//!   its connection idle the longest, else (all of them busy) its connection open the
//!   longest. When no peer holds that many, it closes the connection idle the longest of
//!   any peer, and is refused when none is idle.
//!
//! Idle means: an ingest connection between batches, an HTTP connection without a
//! complete request. A connection told to close leaves the table at once and gives its
//! place to the newcomer (it stops reading at once and goes after its last words), so
//! admission never waits and never refuses a newcomer for a place being given back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::peer::Peer;

/// Connections open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnLimits {
    pub total: usize,
    pub per_peer: usize,
}

/// The connections of one listener; cheap to clone.
#[derive(Clone)]
pub(crate) struct ConnTable {
    inner: Arc<Mutex<Inner>>,
    limits: ConnLimits,
}

#[derive(Default)]
struct Inner {
    next: u64,
    conns: HashMap<u64, Entry>,
    per_peer: HashMap<Peer, usize>,
}

struct Entry {
    peer: Peer,
    /// Idle since (and a tie-breaking sequence number), or busy.
    idle_since: Option<(Instant, u64)>,
    close: Arc<Closing>,
}

/// How a connection is told to close.
#[derive(Default)]
struct Closing {
    notify: Notify,
    /// It was idle when told.
    idle: AtomicBool,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("too many connections from this client ({0} open, none idle); try again later")]
    PeerFull(usize),
    #[error("too many connections ({0} open, none idle); try again later")]
    Full(usize),
}

/// A connection's place in the table; leaving it (drop) frees the place.
pub(crate) struct Slot {
    table: ConnTable,
    id: u64,
    close: Arc<Closing>,
}

/// A connection's idle spell; ends when dropped.
pub(crate) struct Idle {
    table: ConnTable,
    id: u64,
}

/// What a connection told to close was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// It was idle.
    Idle,
    /// It was busy, and its peer held the most connections.
    Busiest,
}

impl ConnTable {
    pub(crate) fn new(limits: ConnLimits) -> Self {
        Self {
            inner: Arc::default(),
            limits: ConnLimits {
                total: limits.total.max(1),
                per_peer: limits.per_peer.clamp(1, limits.total.max(1)),
            },
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection from `peer`, taken from another connection (told to
    /// close) when the rules above say so.
    pub(crate) fn admit(&self, peer: Peer) -> Result<Slot, Refused> {
        let mut g = self.lock();
        let held = g.per_peer.get(&peer).copied().unwrap_or(0);
        if held >= self.limits.per_peer {
            let (id, how) = oldest_idle(&g, |p| p == peer).ok_or(Refused::PeerFull(held))?;
            evict(&mut g, id, how);
        } else if g.conns.len() >= self.limits.total {
            let (id, how) = choose_for(&g, held).ok_or(Refused::Full(g.conns.len()))?;
            evict(&mut g, id, how);
        }
        Ok(self.insert(&mut g, peer))
    }

    fn insert(&self, g: &mut Inner, peer: Peer) -> Slot {
        g.next += 1;
        let id = g.next;
        let close = Arc::new(Closing::default());
        g.conns.insert(
            id,
            Entry {
                peer,
                idle_since: None,
                close: close.clone(),
            },
        );
        *g.per_peer.entry(peer).or_default() += 1;
        Slot {
            table: self.clone(),
            id,
            close,
        }
    }

    /// Connections open from `peer`.
    #[cfg(test)]
    fn held(&self, peer: Peer) -> usize {
        self.lock().per_peer.get(&peer).copied().unwrap_or(0)
    }
}

/// The connection idle the longest among those of the peers `whose` picks.
fn oldest_idle(g: &Inner, whose: impl Fn(Peer) -> bool) -> Option<(u64, Evicted)> {
    g.conns
        .iter()
        .filter(|(_, c)| whose(c.peer))
        .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id)))
        .min()
        .map(|(_, id)| (id, Evicted::Idle))
}

/// At the total limit, for a newcomer whose peer holds `held`: the busiest peer's idle-
/// longest or oldest connection when it holds at least `held + 2`, else the idle-longest
/// of all.
fn choose_for(g: &Inner, held: usize) -> Option<(u64, Evicted)> {
    let busiest = g
        .per_peer
        .iter()
        .map(|(&p, &n)| (p, n))
        .filter(|&(_, n)| n >= held + 2)
        .max_by_key(|&(p, n)| (n, std::cmp::Reverse(p.ip), std::cmp::Reverse(p.uid)));
    match busiest {
        Some((p, _)) => oldest_idle(g, |q| q == p).or_else(|| {
            g.conns
                .iter()
                .filter(|(_, c)| c.peer == p)
                .map(|(id, _)| *id)
                .min()
                .map(|id| (id, Evicted::Busiest))
        }),
        None => oldest_idle(g, |_| true),
    }
}

/// Takes connection `id` out of the table and tells it to close.
fn evict(g: &mut Inner, id: u64, how: Evicted) {
    if let Some(c) = remove(g, id) {
        c.close.idle.store(how == Evicted::Idle, Ordering::Relaxed);
        c.close.notify.notify_one();
    }
}

fn remove(g: &mut Inner, id: u64) -> Option<Entry> {
    let c = g.conns.remove(&id)?;
    if let Some(n) = g.per_peer.get_mut(&c.peer) {
        *n -= 1;
        if *n == 0 {
            g.per_peer.remove(&c.peer);
        }
    }
    Some(c)
}

impl Slot {
    /// The connection is idle from now until the returned value is dropped.
    pub(crate) fn idle(&self) -> Idle {
        let mut g = self.table.lock();
        g.next += 1;
        let seq = g.next;
        if let Some(c) = g.conns.get_mut(&self.id) {
            c.idle_since = Some((Instant::now(), seq));
        }
        Idle {
            table: self.table.clone(),
            id: self.id,
        }
    }

    /// Resolves when another connection needs this one's place.
    pub(crate) async fn evicted(&self) -> Evicted {
        self.close.notify.notified().await;
        if self.close.idle.load(Ordering::Relaxed) {
            Evicted::Idle
        } else {
            Evicted::Busiest
        }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        if let Some(c) = self.table.lock().conns.get_mut(&self.id) {
            c.idle_since = None;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        remove(&mut self.table.lock(), self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn peer(last: u8) -> Peer {
        Peer {
            ip: std::net::IpAddr::from([127, 0, 0, last]),
            uid: Some(1000),
        }
    }

    /// Admits `peer`; the connections told to close go (their slots are dropped).
    fn admit(t: &ConnTable, slots: &mut Vec<Option<Slot>>, p: Peer) -> Result<usize, Refused> {
        let r = t.admit(p);
        for s in slots.iter_mut() {
            if s.as_ref()
                .is_some_and(|s| s.evicted().now_or_never().is_some())
            {
                *s = None;
            }
        }
        r.map(|s| {
            slots.push(Some(s));
            slots.len() - 1
        })
    }

    fn closed(slots: &[Option<Slot>]) -> Vec<usize> {
        (0..slots.len()).filter(|&i| slots[i].is_none()).collect()
    }

    #[test]
    fn a_peer_at_its_share_closes_its_own_idle_or_is_refused() {
        let t = ConnTable::new(ConnLimits {
            total: 8,
            per_peer: 3,
        });
        let mut slots = Vec::new();
        for _ in 0..3 {
            admit(&t, &mut slots, peer(2)).unwrap();
        }
        // Busy: refused, whoever else has room.
        assert_eq!(admit(&t, &mut slots, peer(2)), Err(Refused::PeerFull(3)));
        admit(&t, &mut slots, peer(3)).unwrap();
        // Idle: its own idle-longest goes (the second, idle first), not the other peer's.
        let b = slots[1].as_ref().unwrap().idle();
        std::mem::forget(b);
        let c = slots[2].as_ref().unwrap().idle();
        std::mem::forget(c);
        admit(&t, &mut slots, peer(2)).unwrap();
        assert_eq!(closed(&slots), vec![1]);
        assert_eq!(t.held(peer(2)), 3);
        assert_eq!(t.held(peer(3)), 1);
    }

    #[test]
    fn at_the_total_limit_the_peer_holding_the_most_makes_room() {
        let t = ConnTable::new(ConnLimits {
            total: 6,
            per_peer: 6,
        });
        let mut slots = Vec::new();
        for _ in 0..5 {
            admit(&t, &mut slots, peer(2)).unwrap();
        }
        admit(&t, &mut slots, peer(3)).unwrap();
        // Every connection busy: peer 2's oldest goes for peer 4.
        admit(&t, &mut slots, peer(4)).unwrap();
        assert_eq!(closed(&slots), vec![0]);
        // Peer 3's idle connection does not go while peer 2 holds the most: peer 2's
        // idle one goes.
        std::mem::forget(slots[5].as_ref().unwrap().idle());
        std::mem::forget(slots[3].as_ref().unwrap().idle());
        admit(&t, &mut slots, peer(5)).unwrap();
        assert_eq!(closed(&slots), vec![0, 3]);
        // Now 2:3, 3:1, 4:1, 5:1. Peer 2's connections are busy: its oldest goes for a
        // new peer (it holds 3, at least 0 + 2).
        admit(&t, &mut slots, peer(6)).unwrap();
        assert_eq!(closed(&slots), vec![0, 1, 3]);
        // 2:2 3:1 4:1 5:1 6:1: no peer holds 3 for peer 3 (held 1); the idle-longest of
        // all is peer 3's own.
        admit(&t, &mut slots, peer(3)).unwrap();
        assert_eq!(closed(&slots), vec![0, 1, 3, 5]);
        // Nothing idle and no peer 2 ahead of a newcomer holding 1: refused.
        assert_eq!(admit(&t, &mut slots, peer(4)), Err(Refused::Full(6)));
    }
}
