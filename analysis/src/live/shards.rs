//! [`LiveMap`]: the live allocations by key, in [`SHARDS`] hash maps chosen by the key's
//! pointer and pid, so that growing never holds two copies of the whole table: a hash
//! map grows by moving every entry into a table twice its size, which for millions of
//! live allocations held 1.5 times the set at once (3M: 120 MB more for a moment); a
//! shard grows alone, by a sixteenth of that. Owns nothing but the storage.

use foldhash::HashMap as FastMap;

use super::set::LiveKey;

/// Number of maps.
pub const SHARDS: usize = 16;

/// Entries keyed by [`LiveKey`], split over [`SHARDS`] maps.
#[derive(Debug, Clone)]
pub struct LiveMap<V> {
    shards: Vec<FastMap<LiveKey, V>>,
}

impl<V> Default for LiveMap<V> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

/// The shard of `key`: the top bits of its pointer and pid mixed (pointers share their
/// low bits by alignment, so they are spread by a multiplication first).
#[inline]
fn shard(key: &LiveKey) -> usize {
    let mixed = (key.ptr ^ (u64::from(key.proc.pid) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> (64 - SHARDS.trailing_zeros())) as usize
}

impl<V> LiveMap<V> {
    /// Room for about `n` entries before any shard grows.
    pub fn with_capacity(n: usize) -> Self {
        let each = n.div_ceil(SHARDS);
        Self {
            shards: (0..SHARDS)
                .map(|_| FastMap::with_capacity_and_hasher(each, Default::default()))
                .collect(),
        }
    }

    #[inline]
    pub fn insert(&mut self, key: LiveKey, v: V) -> Option<V> {
        self.shards[shard(&key)].insert(key, v)
    }

    #[inline]
    pub fn get(&self, key: &LiveKey) -> Option<&V> {
        self.shards[shard(key)].get(key)
    }

    #[inline]
    pub fn contains_key(&self, key: &LiveKey) -> bool {
        self.shards[shard(key)].contains_key(key)
    }

    #[inline]
    pub fn remove(&mut self, key: &LiveKey) -> Option<V> {
        self.shards[shard(key)].remove(key)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(FastMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(FastMap::is_empty)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&LiveKey, &V)> {
        self.shards.iter().flat_map(FastMap::iter)
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &LiveKey> {
        self.shards.iter().flat_map(FastMap::keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{Family, ProcKey};

    #[test]
    fn entries_spread_over_the_shards_and_are_found_again() {
        let mut m = LiveMap::default();
        let key = |i: u64| LiveKey {
            proc: ProcKey {
                pid: (i % 3) as u32,
                image: 0,
            },
            family: Family::Device,
            ptr: 0x20_0000 * (i + 1),
        };
        for i in 0..10_000u64 {
            assert_eq!(m.insert(key(i), i), None);
        }
        assert_eq!(m.len(), 10_000);
        for s in &m.shards {
            // Evenly spread (2 MiB-aligned pointers): 625 each on average.
            assert!(s.len() > 400 && s.len() < 900, "{}", s.len());
        }
        assert_eq!(m.get(&key(77)), Some(&77));
        assert_eq!(m.remove(&key(77)), Some(77));
        assert!(!m.contains_key(&key(77)));
        assert_eq!(m.iter().count(), 9_999);
        assert_eq!(m.keys().count(), 9_999);
    }
}
