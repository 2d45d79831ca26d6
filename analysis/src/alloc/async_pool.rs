//! The stream-ordered pool model: `cudaMallocAsync` / `hipMallocAsync`, as XLA's
//! `cuda_async` allocator (`XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async`) drives it.
//!
//! Owns the pool's accounting: allocations are rounded to 512 bytes and served from
//! physical memory the pool maps in pages of the driver's granularity (2 MiB); freed
//! memory stays in the pool for reuse by any later allocation; at each synchronization
//! the pool trims what it holds down to its release threshold (XLA sets the threshold to
//! the pool size when it preallocates, so nothing is released; otherwise 0). The pool
//! maps physical pages into a virtual range, so address-space fragmentation does not cost
//! physical memory and is not modelled; a request fails when the pool would have to hold
//! more than its limit. Every free is treated as followed by a synchronization (a
//! sequential trace has no other ordering information).

use super::{AllocatorModel, Block, ModelError};

/// Allocation rounding of the stream-ordered allocator.
pub const ASYNC_ROUND: u64 = 512;

/// Configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncConfig {
    /// Most bytes the pool may hold.
    pub limit: u64,
    /// Physical page size of the pool.
    pub granularity: u64,
    /// `cudaMemPoolAttrReleaseThreshold`.
    pub release_threshold: u64,
}

/// The async pool model.
#[derive(Debug, Clone)]
pub struct AsyncPool {
    cfg: AsyncConfig,
    sizes: Vec<u64>,
    unused: Vec<usize>,
    in_use: u64,
    reserved: u64,
    peak_in_use: u64,
}

impl AsyncPool {
    /// A pool; with a release threshold it reserves that much up front (XLA preallocates).
    pub fn new(cfg: AsyncConfig) -> Self {
        let cfg = AsyncConfig {
            granularity: cfg.granularity.max(1),
            ..cfg
        };
        let reserved = cfg.release_threshold.min(cfg.limit) / cfg.granularity * cfg.granularity;
        AsyncPool {
            cfg,
            sizes: Vec::new(),
            unused: Vec::new(),
            in_use: 0,
            reserved,
            peak_in_use: 0,
        }
    }

    fn pages(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.cfg.granularity) * self.cfg.granularity
    }
}

impl AllocatorModel for AsyncPool {
    fn name(&self) -> &'static str {
        "async"
    }

    fn alloc(&mut self, size: u64) -> Option<u32> {
        let rounded = size.div_ceil(ASYNC_ROUND).checked_mul(ASYNC_ROUND)?;
        let need = self.in_use.checked_add(rounded)?;
        if need > self.reserved {
            let grown = self.pages(need);
            if grown > self.cfg.limit {
                return None;
            }
            self.reserved = grown;
        }
        self.in_use = need;
        self.peak_in_use = self.peak_in_use.max(need);
        let h = match self.unused.pop() {
            Some(h) => {
                self.sizes[h] = rounded;
                h
            }
            None => {
                self.sizes.push(rounded);
                self.sizes.len() - 1
            }
        };
        Some(h as u32)
    }

    fn free(&mut self, handle: u32) {
        let size = std::mem::take(&mut self.sizes[handle as usize]);
        self.in_use -= size;
        self.unused.push(handle as usize);
        if self.reserved > self.cfg.release_threshold {
            self.reserved = self
                .pages(self.in_use)
                .max(self.cfg.release_threshold.min(self.reserved));
        }
    }

    fn allocated_size(&self, handle: u32) -> u64 {
        self.sizes[handle as usize]
    }

    fn bytes_in_use(&self) -> u64 {
        self.in_use
    }

    fn largest_free_block(&self) -> u64 {
        self.reserved - self.in_use
    }

    fn pool_bytes(&self) -> u64 {
        self.reserved
    }

    fn limit(&self) -> u64 {
        self.cfg.limit
    }

    fn blocks(&self) -> Vec<Block> {
        Vec::new()
    }

    /// Fits exactly when the peak live bytes, in whole pages, fit.
    fn exact_min_limit(&self) -> Option<u64> {
        Some(self.pages(self.peak_in_use).max(self.cfg.granularity))
    }

    fn check_invariants(&self) -> Result<(), ModelError> {
        let sum: u64 = self.sizes.iter().sum();
        if sum != self.in_use || self.in_use > self.reserved || self.reserved > self.cfg.limit {
            return Err(ModelError::Invariant(format!(
                "async: in_use {} (sum {sum}) reserved {} limit {}",
                self.in_use, self.reserved, self.cfg.limit
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_freed_memory_and_trims_to_threshold() {
        let mut p = AsyncPool::new(AsyncConfig {
            limit: 64 << 20,
            granularity: 2 << 20,
            release_threshold: 0,
        });
        let a = p.alloc(3 << 20).unwrap();
        assert_eq!(p.pool_bytes(), 4 << 20);
        let b = p.alloc(1000).unwrap();
        assert_eq!(p.pool_bytes(), 4 << 20);
        p.free(a);
        assert_eq!(p.pool_bytes(), 2 << 20);
        p.free(b);
        assert_eq!(p.pool_bytes(), 0);
        assert!(p.alloc(65 << 20).is_none());
        let mut q = AsyncPool::new(AsyncConfig {
            limit: 64 << 20,
            granularity: 2 << 20,
            release_threshold: 64 << 20,
        });
        let c = q.alloc(10 << 20).unwrap();
        q.free(c);
        assert_eq!(q.pool_bytes(), 64 << 20);
        q.check_invariants().unwrap();
    }
}
