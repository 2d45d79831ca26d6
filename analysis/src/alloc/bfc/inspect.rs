//! Looking into a BFC pool: its chunks in address order and its regions (as the real
//! allocator dumps them), and the structural check every replay can run (regions tile,
//! chunks link up, bins hold exactly the free chunks, the statistics add up).

use super::{bin_for_size, Bfc, Tag, MIN_ALLOCATION, NIL};
use crate::alloc::{Block, BlockState};

impl Bfc {
    /// Every chunk of every region, in address order.
    pub fn chunks_in_order(&self) -> Vec<Block> {
        let mut out = Vec::new();
        for r in &self.regions {
            let mut h = r.first;
            while h != NIL {
                let c = self.chunks[h as usize];
                out.push(Block {
                    addr: c.ptr,
                    size: c.size,
                    requested: if c.in_use {
                        self.requested[h as usize]
                    } else {
                        0
                    },
                    state: if c.in_use {
                        BlockState::InUse
                    } else {
                        BlockState::Free
                    },
                    label: c.tag.name(),
                });
                h = c.next;
            }
        }
        out
    }

    /// Regions as (base, size).
    pub fn regions(&self) -> Vec<(u64, u64)> {
        self.regions.iter().map(|r| (r.base, r.size)).collect()
    }

    /// Checks the structural invariants: chunks tile every region without gaps or
    /// overlap, links are symmetric, no two free chunks are adjacent, every free chunk is
    /// in exactly one free structure, at most one central gap exists, and the statistics
    /// equal the sums over chunks.
    pub fn check(&self) -> Result<(), String> {
        let mut in_use = 0u64;
        let mut pool = 0u64;
        let mut free_seen = 0usize;
        let mut gaps = 0usize;
        for r in &self.regions {
            pool += r.size;
            let mut h = r.first;
            let mut addr = r.base;
            let mut prev = NIL;
            let mut prev_free = false;
            while h != NIL {
                let c = &self.chunks[h as usize];
                if c.ptr != addr {
                    return Err(format!("chunk {h} at {:#x}, expected {addr:#x}", c.ptr));
                }
                if c.prev != prev {
                    return Err(format!("chunk {h}: prev link broken"));
                }
                if c.size == 0 || !c.size.is_multiple_of(MIN_ALLOCATION) {
                    return Err(format!(
                        "chunk {h}: size {} not a positive multiple of 256",
                        c.size
                    ));
                }
                if c.in_use {
                    in_use += c.size;
                    if c.binned {
                        return Err(format!("chunk {h}: in use but binned"));
                    }
                    prev_free = false;
                } else {
                    if prev_free {
                        return Err(format!("chunk {h}: two adjacent free chunks"));
                    }
                    prev_free = true;
                    free_seen += 1;
                    if c.tag == Tag::CentralGap {
                        gaps += 1;
                        if self.central_gap != h || c.binned {
                            return Err(format!("chunk {h}: central gap not tracked"));
                        }
                    } else {
                        let key = self.key(c);
                        if self.bins[bin_for_size(c.size)][Self::side(c.tag)].get(&key) != Some(&h)
                        {
                            return Err(format!("chunk {h}: free but not in its bin"));
                        }
                    }
                }
                addr += c.size;
                prev = h;
                h = c.next;
            }
            if addr != r.base + r.size {
                return Err(format!(
                    "region {:#x}: chunks end at {addr:#x}, region at {:#x}",
                    r.base,
                    r.base + r.size
                ));
            }
        }
        let binned: usize = self.bins.iter().map(|b| b[0].len() + b[1].len()).sum();
        if binned + gaps != free_seen {
            return Err(format!(
                "{binned} binned + {gaps} gap != {free_seen} free chunks"
            ));
        }
        if gaps > 1 {
            return Err("more than one central gap".into());
        }
        if in_use != self.stats.bytes_in_use {
            return Err(format!(
                "bytes_in_use {} != sum of in-use chunks {in_use}",
                self.stats.bytes_in_use
            ));
        }
        if pool != self.stats.pool_bytes || pool > self.cfg.limit {
            return Err(format!(
                "pool_bytes {} vs regions {pool} vs limit {}",
                self.stats.pool_bytes, self.cfg.limit
            ));
        }
        Ok(())
    }
}
