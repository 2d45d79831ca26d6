//! The BFC pool as an [`AllocatorModel`]: what a replay calls (every request from the
//! lower end), the statistics it reads, and the exact smallest limit of a run.

use super::{Bfc, End, MIN_ALLOCATION};
use crate::alloc::{AllocatorModel, Block, ModelError};

impl AllocatorModel for Bfc {
    fn name(&self) -> &'static str {
        "bfc"
    }

    fn alloc(&mut self, size: u64) -> Option<u32> {
        self.allocate(size, End::Lower)
    }

    fn free(&mut self, handle: u32) {
        self.deallocate(handle)
    }

    fn allocated_size(&self, handle: u32) -> u64 {
        self.chunk_size(handle)
    }

    fn bytes_in_use(&self) -> u64 {
        self.stats.bytes_in_use
    }

    fn largest_free_block(&self) -> u64 {
        self.largest_free_chunk()
    }

    fn pool_bytes(&self) -> u64 {
        self.stats.pool_bytes
    }

    fn limit(&self) -> u64 {
        self.cfg.limit
    }

    fn blocks(&self) -> Vec<Block> {
        self.chunks_in_order()
    }

    fn check_invariants(&self) -> Result<(), ModelError> {
        self.check().map_err(ModelError::Invariant)
    }

    /// A spatially partitioned (preallocated) pool serving only the lower end decides
    /// everything from its holes (independent of the limit) and carves the rest from the
    /// gap above its high-water mark. A gap carve splits only when the gap (which runs to
    /// the limit) is large enough, so any limit covering both the high-water mark and
    /// every carve's split floor replays identically. When the high-water mark covers
    /// the floors it is the answer (the caller checks that 256 bytes less fails);
    /// otherwise only a search can tell.
    fn exact_min_limit(&self) -> Option<u64> {
        let high_water = self.lower_high_water.max(MIN_ALLOCATION);
        (self.cfg.spatial_partitioning
            && !self.cfg.allow_growth
            && !self.used_upper
            && self.cfg.fragmentation_fraction <= 0.0
            && self.regions.len() <= 1
            && self.gap_split_floor <= high_water)
            .then_some(high_water)
    }
}
