//! A model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! default configuration: no `max_split_size_mb`, no expandable segments, one stream).
//!
//! Owns the rules: requests round up to 512 bytes; requests up to 1 MiB use the small
//! pool, larger ones the large pool; a pool miss allocates a segment of 2 MiB (small),
//! 20 MiB (large requests below 10 MiB) or the request rounded up to 2 MiB; best fit is
//! the smallest cached block (then lowest address) of the request's pool; a block is
//! split when the remainder is at least 512 bytes (small pool) or more than 1 MiB (large
//! pool); freed blocks merge with free neighbours of the same segment; when a segment
//! cannot be allocated the cache releases every fully free segment and tries once more.
//! The limit is the device capacity × `set_per_process_memory_fraction`.

use std::collections::BTreeMap;

use super::{AllocatorModel, Block, BlockState, ModelError};

pub const MIN_BLOCK: u64 = 512;
pub const SMALL_SIZE: u64 = 1 << 20;
pub const SMALL_BUFFER: u64 = 2 << 20;
pub const LARGE_BUFFER: u64 = 20 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct TBlock {
    ptr: u64,
    size: u64,
    requested: u64,
    prev: u32,
    next: u32,
    allocated: bool,
    small: bool,
}

/// The caching allocator model.
#[derive(Debug, Clone)]
pub struct Torch {
    limit: u64,
    blocks: Vec<TBlock>,
    unused: Vec<u32>,
    small: BTreeMap<u128, u32>,
    large: BTreeMap<u128, u32>,
    /// Segment heads (first block of each segment), by address.
    segments: BTreeMap<u64, (u32, u64)>,
    allocated: u64,
    reserved: u64,
    next_addr: u64,
}

/// `round_size`.
pub fn round_size(size: u64) -> u64 {
    if size < MIN_BLOCK {
        MIN_BLOCK
    } else {
        size.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// `get_allocation_size`.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

fn key(b: &TBlock) -> u128 {
    ((b.size as u128) << 64) | b.ptr as u128
}

impl Torch {
    /// An empty cache with this limit.
    pub fn new(limit: u64) -> Self {
        Torch {
            limit,
            blocks: Vec::new(),
            unused: Vec::new(),
            small: BTreeMap::new(),
            large: BTreeMap::new(),
            segments: BTreeMap::new(),
            allocated: 0,
            reserved: 0,
            next_addr: 0x7f10_0000_0000,
        }
    }

    fn pool(&mut self, small: bool) -> &mut BTreeMap<u128, u32> {
        if small {
            &mut self.small
        } else {
            &mut self.large
        }
    }

    fn new_block(&mut self, b: TBlock) -> u32 {
        match self.unused.pop() {
            Some(h) => {
                self.blocks[h as usize] = b;
                h
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    fn insert_free(&mut self, h: u32) {
        let b = self.blocks[h as usize];
        self.pool(b.small).insert(key(&b), h);
    }

    fn remove_free(&mut self, h: u32) {
        let b = self.blocks[h as usize];
        self.pool(b.small).remove(&key(&b));
    }

    fn alloc_segment(&mut self, size: u64, small: bool) -> Option<u32> {
        if self.reserved.checked_add(size)? > self.limit {
            return None;
        }
        self.reserved += size;
        let ptr = self.next_addr;
        // Separate cudaMalloc calls: never adjacent as far as the cache is concerned.
        self.next_addr = (ptr + size + (2 << 20)).next_multiple_of(2 << 20);
        let h = self.new_block(TBlock {
            ptr,
            size,
            requested: 0,
            prev: NIL,
            next: NIL,
            allocated: false,
            small,
        });
        self.segments.insert(ptr, (h, size));
        Some(h)
    }

    /// `release_cached_blocks`: frees every segment that is one free block.
    fn release_cached(&mut self) -> bool {
        let whole: Vec<u32> = self
            .small
            .values()
            .chain(self.large.values())
            .copied()
            .filter(|&h| {
                let b = &self.blocks[h as usize];
                b.prev == NIL && b.next == NIL
            })
            .collect();
        for &h in &whole {
            self.remove_free(h);
            let b = self.blocks[h as usize];
            self.reserved -= b.size;
            self.segments.remove(&b.ptr);
            self.unused.push(h);
        }
        !whole.is_empty()
    }

    fn should_split(&self, b: &TBlock, size: u64) -> bool {
        let remaining = b.size - size;
        if b.small {
            remaining >= MIN_BLOCK
        } else {
            remaining > SMALL_SIZE
        }
    }
}

impl AllocatorModel for Torch {
    fn name(&self) -> &'static str {
        "torch"
    }

    fn alloc(&mut self, size: u64) -> Option<u32> {
        let size = round_size(size);
        let small = size <= SMALL_SIZE;
        let found = self
            .pool(small)
            .range((size as u128) << 64..)
            .next()
            .map(|(_, &h)| h);
        let h = match found {
            Some(h) => {
                self.remove_free(h);
                h
            }
            None => {
                let seg = allocation_size(size);
                match self.alloc_segment(seg, small) {
                    Some(h) => h,
                    None => {
                        if !self.release_cached() {
                            return None;
                        }
                        self.alloc_segment(seg, small)?
                    }
                }
            }
        };
        let b = self.blocks[h as usize];
        if self.should_split(&b, size) {
            let rest = self.new_block(TBlock {
                ptr: b.ptr + size,
                size: b.size - size,
                requested: 0,
                prev: h,
                next: b.next,
                allocated: false,
                small: b.small,
            });
            if b.next != NIL {
                self.blocks[b.next as usize].prev = rest;
            }
            let bm = &mut self.blocks[h as usize];
            bm.size = size;
            bm.next = rest;
            self.insert_free(rest);
        }
        let bm = &mut self.blocks[h as usize];
        bm.allocated = true;
        bm.requested = size;
        self.allocated += bm.size;
        Some(h)
    }

    fn free(&mut self, handle: u32) {
        let mut h = handle;
        let b = self.blocks[h as usize];
        self.blocks[h as usize].allocated = false;
        self.allocated -= b.size;
        // Merge with the next block of the segment.
        if b.next != NIL && !self.blocks[b.next as usize].allocated {
            let n = b.next;
            self.remove_free(n);
            let nb = self.blocks[n as usize];
            if nb.next != NIL {
                self.blocks[nb.next as usize].prev = h;
            }
            let bm = &mut self.blocks[h as usize];
            bm.size += nb.size;
            bm.next = nb.next;
            self.unused.push(n);
        }
        let prev = self.blocks[h as usize].prev;
        if prev != NIL && !self.blocks[prev as usize].allocated {
            self.remove_free(prev);
            let cur = self.blocks[h as usize];
            if cur.next != NIL {
                self.blocks[cur.next as usize].prev = prev;
            }
            let pm = &mut self.blocks[prev as usize];
            pm.size += cur.size;
            pm.next = cur.next;
            self.unused.push(h);
            h = prev;
        }
        self.insert_free(h);
    }

    fn allocated_size(&self, handle: u32) -> u64 {
        self.blocks[handle as usize].size
    }

    fn bytes_in_use(&self) -> u64 {
        self.allocated
    }

    fn largest_free_block(&self) -> u64 {
        let l = self
            .large
            .last_key_value()
            .map_or(0, |(k, _)| (k >> 64) as u64);
        let s = self
            .small
            .last_key_value()
            .map_or(0, |(k, _)| (k >> 64) as u64);
        l.max(s)
    }

    fn pool_bytes(&self) -> u64 {
        self.reserved
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn blocks(&self) -> Vec<Block> {
        let mut out = Vec::new();
        for &(head, _) in self.segments.values() {
            let mut h = head;
            while h != NIL {
                let b = self.blocks[h as usize];
                out.push(Block {
                    addr: b.ptr,
                    size: b.size,
                    requested: if b.allocated { b.requested } else { 0 },
                    state: if b.allocated {
                        BlockState::InUse
                    } else {
                        BlockState::Free
                    },
                    label: if b.small { "small_pool" } else { "large_pool" },
                });
                h = b.next;
            }
        }
        out
    }

    fn check_invariants(&self) -> Result<(), ModelError> {
        let err = |m: String| Err(ModelError::Invariant(format!("torch: {m}")));
        let (mut reserved, mut allocated, mut free_blocks) = (0u64, 0u64, 0usize);
        for (&base, &(head, size)) in &self.segments {
            reserved += size;
            let (mut h, mut addr, mut prev) = (head, base, NIL);
            while h != NIL {
                let b = &self.blocks[h as usize];
                if b.ptr != addr || b.prev != prev || b.size == 0 {
                    return err(format!("segment {base:#x}: block {h} misplaced"));
                }
                if b.allocated {
                    allocated += b.size;
                } else {
                    free_blocks += 1;
                    let pool = if b.small { &self.small } else { &self.large };
                    if pool.get(&key(b)) != Some(&h) {
                        return err(format!("free block {h} not in its pool"));
                    }
                    if prev != NIL && !self.blocks[prev as usize].allocated {
                        return err(format!("adjacent free blocks at {addr:#x}"));
                    }
                }
                addr += b.size;
                prev = h;
                h = b.next;
            }
            if addr != base + size {
                return err(format!("segment {base:#x} not tiled"));
            }
        }
        if free_blocks != self.small.len() + self.large.len() {
            return err("pools hold blocks that are not in any segment".into());
        }
        if reserved != self.reserved || allocated != self.allocated || reserved > self.limit {
            return err(format!(
                "stats: reserved {} vs {reserved}, allocated {} vs {allocated}",
                self.reserved, self.allocated
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_pools_follow_the_caching_rules() {
        let mut t = Torch::new(1 << 30);
        let a = t.alloc(100).unwrap();
        assert_eq!(t.allocated_size(a), 512);
        assert_eq!(t.pool_bytes(), 2 << 20); // one small segment
        let b = t.alloc(3 << 20).unwrap();
        assert_eq!(t.pool_bytes(), (2 << 20) + (20 << 20)); // 20 MiB large segment, split
        assert_eq!(t.allocated_size(b), 3 << 20);
        let c = t.alloc(16 << 20).unwrap(); // fits the 17 MiB remainder; 1 MiB left is not split off
        assert_eq!(t.allocated_size(c), 17 << 20);
        assert_eq!(t.pool_bytes(), 22 << 20);
        let d = t.alloc(11 << 20).unwrap(); // exact 12 MiB segment (rounded to 2 MiB)
        assert_eq!(t.pool_bytes(), 34 << 20);
        t.free(b);
        t.free(c);
        assert_eq!(t.largest_free_block(), 20 << 20);
        t.check_invariants().unwrap();
        // Over the limit: the cache frees the whole free segments first, then retries.
        let e = t.alloc(1000 << 20).unwrap();
        assert_eq!(t.pool_bytes(), (2 << 20) + (12 << 20) + (1000 << 20));
        t.free(a);
        t.free(d);
        t.free(e);
        t.check_invariants().unwrap();
    }
}
