//! The allocations live at a device's peak, as a compact blob.
//!
//! Record (40 bytes, little-endian): pid:u32 tid:u32 ptr:u64 size:u64 ts_ns:u64 api:u16
//! mem_kind:u8 reserved:u8 reserved:u32. Owns encoding and decoding, and [`Origin`], the
//! compact form the live sets keep of each allocation.

use memwatch_analysis::live::{Held, LiveKey};

use super::StoreError;

/// Size of one record.
pub const RECORD_SIZE: usize = 40;

/// One live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAlloc {
    pub pid: u32,
    pub tid: u32,
    pub ptr: u64,
    pub size: u64,
    pub ts_ns: u64,
    pub api: u16,
    pub mem_kind: u8,
}

/// What a live set keeps of an allocation besides its key (pid, pointer), size and
/// device: the rest of its [`LiveAlloc`], kept small (the map is touched by every event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    ts_ns: u64,
    tid: u32,
    api: u16,
    mem_kind: u8,
}

impl Origin {
    /// What an alloc event made.
    pub(crate) fn of(e: &memwatch_wire::Event) -> Self {
        Self {
            ts_ns: e.ts_ns,
            tid: e.tid,
            api: e.api,
            mem_kind: e.mem_kind,
        }
    }

    /// The same of a stored allocation.
    pub(crate) fn of_alloc(a: &LiveAlloc) -> Self {
        Self {
            ts_ns: a.ts_ns,
            tid: a.tid,
            api: a.api,
            mem_kind: a.mem_kind,
        }
    }

    /// The stored form of a live allocation filed at `key`.
    pub(crate) fn live_alloc(key: &LiveKey, held: &Held<Origin>) -> LiveAlloc {
        LiveAlloc {
            pid: key.proc.pid,
            tid: held.data.tid,
            ptr: key.ptr,
            size: held.size,
            ts_ns: held.data.ts_ns,
            api: held.data.api,
            mem_kind: held.data.mem_kind,
        }
    }
}

/// Encodes allocations.
pub fn encode(allocs: &[LiveAlloc]) -> Vec<u8> {
    let mut out = Vec::with_capacity(allocs.len() * RECORD_SIZE);
    for a in allocs {
        push(&mut out, a);
    }
    out
}

/// Appends one record of [`RECORD_SIZE`] bytes.
fn push(out: &mut Vec<u8>, a: &LiveAlloc) {
    out.extend_from_slice(&a.pid.to_le_bytes());
    out.extend_from_slice(&a.tid.to_le_bytes());
    out.extend_from_slice(&a.ptr.to_le_bytes());
    out.extend_from_slice(&a.size.to_le_bytes());
    out.extend_from_slice(&a.ts_ns.to_le_bytes());
    out.extend_from_slice(&a.api.to_le_bytes());
    out.push(a.mem_kind);
    out.extend_from_slice(&[0u8; 5]);
}

/// Decodes a blob written by [`encode`].
pub fn decode(b: &[u8]) -> Result<Vec<LiveAlloc>, StoreError> {
    if !b.len().is_multiple_of(RECORD_SIZE) {
        return Err(StoreError::Corrupt(format!(
            "peak snapshot of {} bytes is not a multiple of {RECORD_SIZE}",
            b.len()
        )));
    }
    let u32_at = |c: &[u8], i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
    let u64_at = |c: &[u8], i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&c[i..i + 8]);
        u64::from_le_bytes(a)
    };
    Ok(b.chunks_exact(RECORD_SIZE)
        .map(|c| LiveAlloc {
            pid: u32_at(c, 0),
            tid: u32_at(c, 4),
            ptr: u64_at(c, 8),
            size: u64_at(c, 16),
            ts_ns: u64_at(c, 24),
            api: u16::from_le_bytes([c[32], c[33]]),
            mem_kind: c[34],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_length() {
        let a = LiveAlloc {
            pid: 1,
            tid: 2,
            ptr: 3,
            size: 4,
            ts_ns: 5,
            api: 6,
            mem_kind: 7,
        };
        assert_eq!(decode(&encode(&[a, a])).unwrap(), vec![a, a]);
        assert!(decode(&[0u8; 41]).is_err());
    }
}
