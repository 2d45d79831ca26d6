//! Region growth of a BFC pool (`allow_growth`): taking one more region from the
//! device (a 2 MiB first region, doubling, a 0.9 back-off when the device refuses) and,
//! when garbage collection is on, giving whole free regions back before trying again.

use super::{rounded_bytes, Bfc, Chunk, Region, MIN_ALLOCATION, NIL};

impl Bfc {
    /// `Extend`: take one more region from the device.
    pub(super) fn extend(&mut self, rounded: u64) -> bool {
        let available = (self.cfg.limit - self.stats.pool_bytes) / MIN_ALLOCATION * MIN_ALLOCATION;
        if rounded > available {
            return false;
        }
        let mut increased = false;
        while rounded > self.curr_region_allocation_bytes {
            self.curr_region_allocation_bytes *= 2;
            increased = true;
        }
        let mut bytes = self.curr_region_allocation_bytes.min(available);
        if let Some(device_free) = self.cfg.device_free_bytes {
            // The device refuses: back off by kBackpedalFactor (a float) until it fits.
            while bytes > device_free {
                let mut back = rounded_bytes(((bytes as f32) * 0.9f32) as u64);
                if back >= bytes {
                    back = bytes - MIN_ALLOCATION;
                }
                bytes = back;
                if bytes < rounded {
                    return false;
                }
            }
        }
        if !increased {
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.saturating_mul(2);
        }
        self.stats.pool_bytes = self.stats.pool_bytes.saturating_add(bytes);
        self.stats.peak_pool_bytes = self.stats.peak_pool_bytes.max(self.stats.pool_bytes);
        if let Some(df) = self.cfg.device_free_bytes.as_mut() {
            *df -= bytes;
        }
        let base = self.next_region_base;
        // Regions from separate driver calls are not adjacent (the device allocator does
        // not support coalescing them), so leave a 2 MiB-aligned hole after each.
        self.next_region_base = (base + bytes + (4 << 20)).next_multiple_of(2 << 20);
        let h = self.new_chunk(Chunk {
            ptr: base,
            size: bytes,
            prev: NIL,
            next: NIL,
            in_use: false,
            binned: false,
            tag: self.free_chunk_tag,
        });
        self.regions.push(Region {
            base,
            size: bytes,
            first: h,
        });
        self.insert_free(h);
        true
    }

    /// `DeallocateFreeRegions` (only with garbage collection).
    pub(super) fn deallocate_free_regions(&mut self, rounded: u64) -> bool {
        if !self.cfg.garbage_collection {
            return false;
        }
        let mut free_regions = Vec::new();
        let mut total = 0;
        for (i, r) in self.regions.iter().enumerate() {
            let mut h = r.first;
            let mut any = false;
            while h != NIL {
                if self.chunks[h as usize].in_use {
                    any = true;
                    break;
                }
                h = self.chunks[h as usize].next;
            }
            if !any {
                free_regions.push(i);
                total += r.size;
            }
        }
        if total == 0 || rounded > self.cfg.limit - self.stats.pool_bytes + total {
            return false;
        }
        for &i in free_regions.iter().rev() {
            let r = self.regions.remove(i);
            let mut h = r.first;
            while h != NIL {
                let next = self.chunks[h as usize].next;
                self.remove_free(h);
                self.unused.push(h);
                h = next;
            }
            self.stats.pool_bytes -= r.size;
            if let Some(df) = self.cfg.device_free_bytes.as_mut() {
                *df += r.size;
            }
        }
        true
    }
}
