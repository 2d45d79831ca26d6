//! The memory budget of received data: how many bytes the daemon holds for data it has
//! received but not yet stored, so that no client (and no number of clients) can make it
//! allocate more. Received data waits (backpressure) instead of growing memory.
//!
//! Two pools, so that waiting cannot deadlock: **raw** bytes (batch bodies and HTTP
//! request bodies being read, not yet decoded) and **decoded** batches (from decoding
//! until their commit ends). A reader holding raw bytes may wait for decoded room; decoded
//! room is given back by the writer, which never waits for either pool. Each connection
//! also has its own cap on decoded batches in flight, so one client cannot take the whole
//! decoded pool. A batch is charged its decoded size before it is decoded, from an upper
//! bound read off the frame headers ([`decoded_bound`]): 13-byte frames that decode to
//! ~150-byte records cannot get past it.

use std::sync::Arc;
use std::time::Duration;

use memwatch_wire::frame::{frame_type, FRAME_OVERHEAD};
use memwatch_wire::{Event, Record, EVENT_SIZE};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Sizes of the pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestLimits {
    /// Raw bytes received and not yet decoded, all clients together. At least the
    /// largest batch or request body accepted.
    pub raw_bytes: usize,
    /// Decoded batches queued for or in the writer, all clients together.
    pub decoded_bytes: usize,
    /// Decoded batches of one connection or request in flight; a batch that alone would
    /// need more is refused.
    pub decoded_per_client: usize,
    /// How long a request body may wait for raw room before it is answered 503.
    pub wait_limit: Duration,
}

impl Default for IngestLimits {
    fn default() -> Self {
        Self {
            raw_bytes: 64 << 20,
            decoded_bytes: 192 << 20,
            decoded_per_client: 96 << 20,
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
}

impl Charge {
    /// Adds `other` to this charge (both are given back together).
    pub fn merge(&mut self, mut other: Charge) {
        self.permits.append(&mut other.permits);
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
}

impl Budget {
    pub fn new(limits: IngestLimits) -> Self {
        Self {
            raw: Arc::new(Semaphore::new(units(limits.raw_bytes) as usize)),
            decoded: Arc::new(Semaphore::new(units(limits.decoded_bytes) as usize)),
            limits,
        }
    }

    pub fn limits(&self) -> &IngestLimits {
        &self.limits
    }

    /// Room for `bytes` raw bytes, all at once (waits; never a partial hold, so two
    /// readers cannot each hold half of what both need).
    pub async fn raw(&self, what: &'static str, bytes: usize) -> Result<Charge, BudgetError> {
        if bytes > self.limits.raw_bytes {
            return Err(BudgetError::TooBig {
                what,
                bytes,
                limit: self.limits.raw_bytes,
            });
        }
        let p = self
            .raw
            .clone()
            .acquire_many_owned(units(bytes))
            .await
            .map_err(|_| BudgetError::Busy {
                bytes,
                waited: Duration::ZERO,
            })?;
        Ok(Charge { permits: vec![p] })
    }

    /// [`Budget::raw`], giving up after the wait limit.
    pub async fn raw_within_limit(
        &self,
        what: &'static str,
        bytes: usize,
    ) -> Result<Charge, BudgetError> {
        let limit = self.limits.wait_limit;
        tokio::time::timeout(limit, self.raw(what, bytes))
            .await
            .map_err(|_| BudgetError::Busy {
                bytes,
                waited: limit,
            })?
    }

    /// A client's share of the decoded pool.
    pub fn client(&self) -> ClientBudget {
        ClientBudget {
            own: Arc::new(Semaphore::new(
                units(self.limits.decoded_per_client) as usize
            )),
            budget: self.clone(),
        }
    }
}

/// One connection's (or request's) cap on decoded batches in flight.
pub struct ClientBudget {
    own: Arc<Semaphore>,
    budget: Budget,
}

impl ClientBudget {
    /// Room for a decoded batch of at most `bytes`: first in this client's cap, then in
    /// the shared pool (waits for both).
    pub async fn decoded(&self, bytes: usize) -> Result<Charge, BudgetError> {
        let limit = self.budget.limits.decoded_per_client;
        if bytes > limit {
            return Err(BudgetError::TooBig {
                what: "a batch decoded",
                bytes,
                limit,
            });
        }
        let closed = |_| BudgetError::Busy {
            bytes,
            waited: Duration::ZERO,
        };
        let own = self
            .own
            .clone()
            .acquire_many_owned(units(bytes))
            .await
            .map_err(closed)?;
        let shared = self
            .budget
            .decoded
            .clone()
            .acquire_many_owned(units(bytes))
            .await
            .map_err(closed)?;
        Ok(Charge {
            permits: vec![own, shared],
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

    #[tokio::test]
    async fn a_client_cannot_take_more_than_its_cap_and_charges_come_back() {
        let b = Budget::new(IngestLimits {
            raw_bytes: 1 << 20,
            decoded_bytes: 4 << 20,
            decoded_per_client: 3 << 20,
            wait_limit: Duration::from_millis(50),
        });
        assert!(b.raw("a body", 2 << 20).await.is_err());
        let one = b.client();
        let two = b.client();
        let a = one.decoded(3 << 20).await.unwrap();
        assert!(
            one.decoded(5 << 20).await.is_err(),
            "above the cap: refused"
        );
        // One's cap is full: its next batch waits, while two still gets room.
        let waiting = tokio::time::timeout(Duration::from_millis(50), one.decoded(1024)).await;
        assert!(waiting.is_err());
        let c = two.decoded(1 << 20).await.unwrap();
        drop(a);
        let d = one.decoded(1 << 20).await.unwrap();
        drop((c, d));
        let r = b.raw("a body", 1 << 20).await.unwrap();
        assert!(
            b.raw_within_limit("a body", 1).await.is_err(),
            "raw pool full"
        );
        drop(r);
        assert!(b.raw_within_limit("a body", 1).await.is_ok());
    }
}
