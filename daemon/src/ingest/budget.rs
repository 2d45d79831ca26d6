//! The memory budget of received data: how many bytes the daemon holds for data it has
//! received but not yet stored, so that no client (and no number of clients) can make it
//! allocate more. Received data waits (backpressure) instead of growing memory.
//!
//! Two pools, so that waiting cannot deadlock: **raw** bytes (batch bodies and HTTP
//! request bodies being read, not yet decoded) and **decoded** batches (from decoding
//! until their commit ends). A reader holding raw bytes may wait for decoded room; decoded
//! room is given back by the writer, which never waits for either pool. Each peer
//! (`peer`: all its connections and requests together) also has its own share of each
//! pool, taken before the shared pool, so one peer cannot take a whole pool and its
//! waiting charges queue on its own share, not ahead of other peers' in the shared pool:
//! half the raw pool (a batch larger than that takes the whole share, so a peer then has
//! one such batch at a time) and [`IngestLimits::decoded_per_peer`]. A batch is charged
//! its decoded size before it is decoded, from an upper bound read off the frame headers
//! ([`decoded_bound`]): 13-byte frames that decode to ~150-byte records cannot get past
//! it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use memwatch_wire::frame::{frame_type, FRAME_OVERHEAD};
use memwatch_wire::{Event, Record, EVENT_SIZE};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::peer::Peer;

/// Sizes of the pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestLimits {
    /// Raw bytes received and not yet decoded, all clients together. At least the
    /// largest batch or request body accepted. One peer holds at most half of it, or
    /// one batch when a batch is larger.
    pub raw_bytes: usize,
    /// Decoded batches queued for or in the writer, all clients together.
    pub decoded_bytes: usize,
    /// Decoded batches of one peer (all its connections and requests) in flight; a batch
    /// that alone would need more is refused.
    pub decoded_per_peer: usize,
    /// How long a request body may wait for raw room before it is answered 503.
    pub wait_limit: Duration,
}

impl Default for IngestLimits {
    fn default() -> Self {
        Self {
            raw_bytes: 64 << 20,
            decoded_bytes: 192 << 20,
            decoded_per_peer: 96 << 20,
            wait_limit: Duration::from_secs(30),
        }
    }
}

/// Why a charge was not given.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "{what} of {bytes} bytes is more than the daemon holds for one client ({limit} bytes)"
    )]
    TooBig {
        what: &'static str,
        bytes: usize,
        limit: usize,
    },
    #[error("the daemon is busy: no room for {bytes} more bytes within {} s", .waited.as_secs())]
    Busy { bytes: usize, waited: Duration },
}

/// Bytes held for received data; given back when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    permits: Vec<OwnedSemaphorePermit>,
    /// The shares charged, kept while charged: a peer's later connections find the same.
    shares: Vec<Arc<Shares>>,
}

impl Charge {
    /// Adds `other` to this charge (both are given back together).
    pub fn merge(&mut self, mut other: Charge) {
        self.permits.append(&mut other.permits);
        self.shares.append(&mut other.shares);
    }
}

/// Pools are counted in KiB: a semaphore takes at most `u32::MAX` permits at once.
fn units(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// The daemon's pools. Cheap to clone.
#[derive(Clone)]
pub struct Budget {
    raw: Arc<Semaphore>,
    decoded: Arc<Semaphore>,
    limits: IngestLimits,
    /// The shares of the peers holding or waiting for room now.
    peers: Arc<Mutex<HashMap<Peer, Weak<Shares>>>>,
}

/// One peer's shares of the pools.
#[derive(Debug)]
struct Shares {
    raw: Arc<Semaphore>,
    decoded: Arc<Semaphore>,
}

impl Budget {
    pub fn new(limits: IngestLimits) -> Self {
        Self {
            raw: Arc::new(Semaphore::new(units(limits.raw_bytes) as usize)),
            decoded: Arc::new(Semaphore::new(units(limits.decoded_bytes) as usize)),
            limits,
            peers: Arc::default(),
        }
    }

    pub fn limits(&self) -> &IngestLimits {
        &self.limits
    }

    /// A peer's raw share: half the pool.
    fn raw_share(&self) -> usize {
        (self.limits.raw_bytes / 2).max(1)
    }

    /// The budget as `peer` sees it: its shares (the same for all its connections and
    /// requests while any of them holds this), then the shared pools.
    pub fn peer(&self, peer: Peer) -> PeerBudget {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shares) = peers.get(&peer).and_then(Weak::upgrade) {
            return PeerBudget {
                shares,
                budget: self.clone(),
            };
        }
        if peers.len() >= 64 {
            peers.retain(|_, w| w.strong_count() > 0);
        }
        let shares = Arc::new(Shares {
            raw: Arc::new(Semaphore::new(units(self.raw_share()) as usize)),
            decoded: Arc::new(Semaphore::new(units(self.limits.decoded_per_peer) as usize)),
        });
        peers.insert(peer, Arc::downgrade(&shares));
        PeerBudget {
            shares,
            budget: self.clone(),
        }
    }
}

/// One peer's view of the budget: its shares first, then the shared pools.
pub struct PeerBudget {
    shares: Arc<Shares>,
    budget: Budget,
}

/// Waits for `n` units of `pool` (all at once: never a partial hold, so two readers
/// cannot each hold half of what both need).
async fn take(
    pool: &Arc<Semaphore>,
    n: usize,
    bytes: usize,
) -> Result<OwnedSemaphorePermit, BudgetError> {
    pool.clone()
        .acquire_many_owned(units(n))
        .await
        .map_err(|_| BudgetError::Busy {
            bytes,
            waited: Duration::ZERO,
        })
}

impl PeerBudget {
    /// Room for `bytes` raw bytes: in this peer's share (at most all of it), then in the
    /// shared pool (waits for both).
    pub async fn raw(&self, what: &'static str, bytes: usize) -> Result<Charge, BudgetError> {
        let limits = &self.budget.limits;
        if bytes > limits.raw_bytes {
            return Err(BudgetError::TooBig {
                what,
                bytes,
                limit: limits.raw_bytes,
            });
        }
        let own = take(&self.shares.raw, bytes.min(self.budget.raw_share()), bytes).await?;
        let shared = take(&self.budget.raw, bytes, bytes).await?;
        Ok(Charge {
            permits: vec![own, shared],
            shares: vec![self.shares.clone()],
        })
    }

    /// [`PeerBudget::raw`], giving up after the wait limit.
    pub async fn raw_within_limit(
        &self,
        what: &'static str,
        bytes: usize,
    ) -> Result<Charge, BudgetError> {
        let limit = self.budget.limits.wait_limit;
        tokio::time::timeout(limit, self.raw(what, bytes))
            .await
            .map_err(|_| BudgetError::Busy {
                bytes,
                waited: limit,
            })?
    }

    /// Room for a decoded batch of at most `bytes`: first in this peer's share, then in
    /// the shared pool (waits for both).
    pub async fn decoded(&self, bytes: usize) -> Result<Charge, BudgetError> {
        let limit = self.budget.limits.decoded_per_peer;
        if bytes > limit {
            return Err(BudgetError::TooBig {
                what: "a batch decoded",
                bytes,
                limit,
            });
        }
        let own = take(&self.shares.decoded, bytes, bytes).await?;
        let shared = take(&self.budget.decoded, bytes, bytes).await?;
        Ok(Charge {
            permits: vec![own, shared],
            shares: vec![self.shares.clone()],
        })
    }
}

/// Heap bytes per payload byte a non-event record can decode to at most (a string list:
/// 2 length bytes per string, 24 bytes of `String` plus its allocation).
const HEAP_PER_PAYLOAD_BYTE: usize = 24;

/// An upper bound of the memory `decode_frames_strict(frames)` allocates: per frame its
/// [`Record`] (twice: the output vector grows by doubling) plus its heap data, events at
/// `size_of::<Event>()` each, anything else at [`HEAP_PER_PAYLOAD_BYTE`] per payload byte.
/// Reads only frame headers; stops at the first impossible one (the decoder refuses the
/// batch there).
pub fn decoded_bound(frames: &[u8]) -> usize {
    let per_frame = 2 * std::mem::size_of::<Record>();
    let mut pos = 0usize;
    let mut total = 0usize;
    while frames.len() - pos >= FRAME_OVERHEAD {
        let len = u32::from_le_bytes([
            frames[pos],
            frames[pos + 1],
            frames[pos + 2],
            frames[pos + 3],
        ]) as usize;
        let Some(end) = pos
            .checked_add(len + 8)
            .filter(|&e| e <= frames.len() && len > 0)
        else {
            break;
        };
        let payload = len - 1;
        let heap = if frames[pos + 4] == frame_type::EVENTS {
            (payload / EVENT_SIZE) * std::mem::size_of::<Event>()
        } else {
            payload.saturating_mul(HEAP_PER_PAYLOAD_BYTE)
        };
        total = total.saturating_add(per_frame + heap);
        pos = end;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{encode_record, Marker};

    fn heap_of(r: &Record) -> usize {
        match r {
            Record::Events(e) => e.capacity() * std::mem::size_of::<Event>(),
            Record::Marker(m) => m.text.capacity(),
            _ => 0,
        }
    }

    #[test]
    fn the_bound_covers_what_decoding_allocates_and_stays_close_for_events() {
        let mut frames = Vec::new();
        let events: Vec<Event> = (0..5000)
            .map(|i| Event {
                ts_ns: i,
                ..Event::default()
            })
            .collect();
        encode_record(&Record::Events(events), &mut frames).unwrap();
        let bound = decoded_bound(&frames);
        let records = memwatch_wire::ingest::decode_frames_strict(&frames).unwrap();
        let real: usize = records
            .iter()
            .map(|r| std::mem::size_of::<Record>() + heap_of(r))
            .sum();
        assert!(bound >= real, "{bound} < {real}");
        assert!(
            bound < real + 4096,
            "events are bounded tightly: {bound} vs {real}"
        );

        // Empty event frames and markers: 13- and ~30-byte frames.
        let mut small = Vec::new();
        for i in 0..1000 {
            encode_record(&Record::Events(Vec::new()), &mut small).unwrap();
            let m = Marker {
                text: "x".repeat(i % 7),
                ..Marker::default()
            };
            encode_record(&Record::Marker(m), &mut small).unwrap();
        }
        let bound = decoded_bound(&small);
        let records = memwatch_wire::ingest::decode_frames_strict(&small).unwrap();
        let real: usize = records
            .iter()
            .map(|r| std::mem::size_of::<Record>() + heap_of(r))
            .sum::<usize>()
            + records.capacity() * std::mem::size_of::<Record>();
        assert!(bound >= real, "{bound} < {real}");
        assert!(
            bound > 10 * small.len(),
            "tiny frames cost what they decode to"
        );
    }

    fn peer(last: u8) -> Peer {
        Peer {
            ip: std::net::IpAddr::from([127, 0, 0, last]),
            uid: Some(1000),
        }
    }

    /// Whether `f` is still waiting after a moment.
    async fn waits<T>(f: impl std::future::Future<Output = T>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_peer_cannot_take_more_than_its_shares_whatever_its_connections() {
        let b = Budget::new(IngestLimits {
            raw_bytes: 4 << 20,
            decoded_bytes: 4 << 20,
            decoded_per_peer: 3 << 20,
            wait_limit: Duration::from_millis(50),
        });
        // Two connections of peer 2 share its shares; peer 3 has its own.
        let (a1, a2, c) = (b.peer(peer(2)), b.peer(peer(2)), b.peer(peer(3)));
        assert!(a1.raw("a body", 5 << 20).await.is_err(), "over the pool");
        // Raw: half the pool per peer.
        let r1 = a1.raw("a body", 2 << 20).await.unwrap();
        assert!(
            waits(a2.raw("a body", 1024)).await,
            "peer 2's raw share is full"
        );
        let r3 = c.raw("a body", 2 << 20).await.unwrap();
        drop((r1, r3));
        // A batch over the share takes all of it: one at a time, the rest for others.
        let big = a1.raw("a batch", 3 << 20).await.unwrap();
        assert!(waits(a2.raw("a batch", 1024)).await);
        let small = c.raw("a batch", 1 << 20).await.unwrap();
        drop((big, small));
        assert!(a2.raw_within_limit("a body", 4 << 20).await.is_ok());
        // Decoded: the peer's cap holds across its connections.
        let d1 = a1.decoded(3 << 20).await.unwrap();
        assert!(a1.decoded(4 << 20).await.is_err(), "above the cap: refused");
        assert!(
            waits(a2.decoded(1024)).await,
            "peer 2's decoded share is full"
        );
        let d3 = c.decoded(1 << 20).await.unwrap();
        drop(d1);
        let d2 = a2.decoded(1 << 20).await.unwrap();
        drop((d2, d3));
        // A share outlives its peer's handles while it holds charges (batches queued by
        // connections since closed).
        let held = b.peer(peer(6)).decoded(3 << 20).await.unwrap();
        assert!(waits(b.peer(peer(6)).decoded(1024)).await);
        drop(held);
        // Charges come back: the pools are whole again.
        let all = b.peer(peer(4)).raw("a body", 4 << 20).await.unwrap();
        assert!(
            b.peer(peer(5)).raw_within_limit("a body", 1).await.is_err(),
            "raw pool full"
        );
        drop(all);
        assert!(b.peer(peer(5)).raw_within_limit("a body", 1).await.is_ok());
    }
}
