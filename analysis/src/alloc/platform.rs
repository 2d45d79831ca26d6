//! The `platform` allocator model: one driver allocation per buffer.
//!
//! Owns the accounting of XLA's synchronous passthrough allocator
//! (`XLA_PYTHON_CLIENT_ALLOCATOR=platform`): every buffer is its own `cudaMalloc` /
//! `hipMalloc`, rounded up to the driver's allocation granularity (2 MiB for large CUDA
//! and HIP allocations), and freed memory goes straight back to the driver. Device memory
//! is paged, so the model has no external fragmentation: a request fails only when the
//! granule-rounded total would pass the limit.

use super::{AllocatorModel, Block, BlockState, ModelError};

/// The platform model.
#[derive(Debug, Clone)]
pub struct Platform {
    limit: u64,
    granularity: u64,
    /// Live allocations: (address, rounded size); `None` for freed slots.
    live: Vec<Option<(u64, u64)>>,
    unused: Vec<usize>,
    in_use: u64,
    peak: u64,
    next_addr: u64,
}

impl Platform {
    /// A model with this limit and granularity (0 is treated as 1).
    pub fn new(limit: u64, granularity: u64) -> Self {
        Platform {
            limit,
            granularity: granularity.max(1),
            live: Vec::new(),
            unused: Vec::new(),
            in_use: 0,
            peak: 0,
            next_addr: 0x7f00_0000_0000,
        }
    }
}

impl AllocatorModel for Platform {
    fn name(&self) -> &'static str {
        "platform"
    }

    fn alloc(&mut self, size: u64) -> Option<u32> {
        let rounded = size
            .div_ceil(self.granularity)
            .checked_mul(self.granularity)?;
        if self.in_use.checked_add(rounded)? > self.limit {
            return None;
        }
        self.in_use += rounded;
        self.peak = self.peak.max(self.in_use);
        let addr = self.next_addr;
        self.next_addr += rounded;
        let entry = Some((addr, rounded));
        let h = match self.unused.pop() {
            Some(h) => {
                self.live[h] = entry;
                h
            }
            None => {
                self.live.push(entry);
                self.live.len() - 1
            }
        };
        Some(h as u32)
    }

    fn free(&mut self, handle: u32) {
        if let Some((_, size)) = self.live[handle as usize].take() {
            self.in_use -= size;
            self.unused.push(handle as usize);
        }
    }

    fn allocated_size(&self, handle: u32) -> u64 {
        self.live[handle as usize].map_or(0, |(_, s)| s)
    }

    fn bytes_in_use(&self) -> u64 {
        self.in_use
    }

    fn largest_free_block(&self) -> u64 {
        (self.limit - self.in_use) / self.granularity * self.granularity
    }

    fn pool_bytes(&self) -> u64 {
        self.in_use
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn blocks(&self) -> Vec<Block> {
        let mut v: Vec<Block> = self
            .live
            .iter()
            .flatten()
            .map(|&(addr, size)| Block {
                addr,
                size,
                requested: size,
                state: BlockState::InUse,
                label: "driver",
            })
            .collect();
        v.sort_by_key(|b| b.addr);
        v
    }

    /// Fits exactly when the peak of granule-rounded live bytes fits.
    fn exact_min_limit(&self) -> Option<u64> {
        Some(self.peak.max(1))
    }

    fn check_invariants(&self) -> Result<(), ModelError> {
        let sum: u64 = self.live.iter().flatten().map(|&(_, s)| s).sum();
        if sum != self.in_use || self.in_use > self.limit {
            return Err(ModelError::Invariant(format!(
                "platform: in_use {} != sum {sum} or over limit",
                self.in_use
            )));
        }
        let blocks = self.blocks();
        for w in blocks.windows(2) {
            if w[0].addr + w[0].size > w[1].addr {
                return Err(ModelError::Invariant(
                    "platform: overlapping allocations".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_granularity_and_fails_at_limit() {
        let mut p = Platform::new(10 << 20, 2 << 20);
        let a = p.alloc(1).unwrap();
        assert_eq!(p.allocated_size(a), 2 << 20);
        let b = p.alloc(7 << 20).unwrap();
        assert_eq!(p.bytes_in_use(), 10 << 20);
        assert!(p.alloc(1).is_none());
        p.free(a);
        assert_eq!(p.largest_free_block(), 2 << 20);
        p.free(b);
        p.check_invariants().unwrap();
    }
}
