//! A simulated device for the runner's logic tests (a test double of the GPU, not used by
//! the CLI): real capacity accounting (sizes rounded to the driver granularity, memory
//! held by "other processes"), addresses, memory contents tracked per range (which seed's
//! pattern each byte holds, so checksums catch overlaps and lost data), range checks on
//! every kernel launch (a launch outside a live allocation fails like a GPU fault), and
//! fault injection (a failing allocation or free, an interrupt after N allocations).
//! It exists because no GPU is available in CI; the CUDA and HIP backends implement the
//! same trait over the real drivers.

use crate::backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const BASE: u64 = 0x7f00_0000_0000;
const INVERTED: u64 = 1 << 40;

/// The simulated GPU.
pub struct SimDevice {
    pub total: u64,
    /// Bytes held by other processes (counts as used).
    pub foreign_used: u64,
    /// Every allocation occupies a multiple of this.
    pub granularity: u64,
    next_addr: u64,
    allocs: BTreeMap<DevicePtr, u64>,
    /// Memory contents: start -> (end, tag); tag = seed, possibly | INVERTED.
    content: BTreeMap<u64, (u64, u64)>,
    /// Calls made, in order (`alloc 4096`, `free 0x..`, `touch ..`).
    pub log: Vec<String>,
    /// Fail the allocation call with this 0-based number with a non-OOM driver error.
    pub fail_alloc_call: Option<usize>,
    /// Every free fails (to test cleanup error reporting).
    pub fail_frees: bool,
    /// Set this flag when this many allocations have succeeded.
    pub interrupt_after_allocs: Option<(usize, Arc<AtomicBool>)>,
    alloc_calls: usize,
    ok_allocs: usize,
    timer_events: u64,
}

impl SimDevice {
    pub fn new(total: u64) -> Self {
        SimDevice {
            total,
            foreign_used: 0,
            granularity: 2 << 20,
            next_addr: BASE,
            allocs: BTreeMap::new(),
            content: BTreeMap::new(),
            log: Vec::new(),
            fail_alloc_call: None,
            fail_frees: false,
            interrupt_after_allocs: None,
            alloc_calls: 0,
            ok_allocs: 0,
            timer_events: 0,
        }
    }

    fn rounded(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.granularity) * self.granularity
    }

    /// Bytes this device's allocations occupy (rounded), other processes excluded.
    pub fn used_by_us(&self) -> u64 {
        self.allocs.values().map(|&b| self.rounded(b)).sum()
    }

    /// Number of live allocations.
    pub fn live_allocations(&self) -> usize {
        self.allocs.len()
    }

    fn check_range(&self, api: &'static str, ptr: u64, bytes: u64) -> Result<(), GpuError> {
        let ok = self
            .allocs
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&b, &l)| ptr + bytes <= b + l);
        if ok {
            Ok(())
        } else {
            Err(GpuError::Api {
                api,
                code: 700,
                name: "CUDA_ERROR_ILLEGAL_ADDRESS (simulated)".into(),
            })
        }
    }

    /// Sets `[start, end)` to `tag`, splitting the segments it overlaps.
    fn write(&mut self, start: u64, end: u64, tag: impl Fn(Option<u64>) -> u64) {
        // Collect overlapping segments.
        let overlapping: Vec<(u64, (u64, u64))> = self
            .content
            .range(..end)
            .filter(|(_, &(e, _))| e > start)
            .map(|(&s, &v)| (s, v))
            .collect();
        let mut new_segments = Vec::new();
        let mut covered = start;
        for (s, (e, t)) in overlapping {
            self.content.remove(&s);
            if s < start {
                new_segments.push((s, start, t));
            }
            if e > end {
                new_segments.push((end, e, t));
            }
            let (a, b) = (s.max(start), e.min(end));
            if a > covered {
                new_segments.push((covered, a, tag(None)));
            }
            new_segments.push((a, b, tag(Some(t))));
            covered = b;
        }
        if covered < end {
            new_segments.push((covered, end, tag(None)));
        }
        for (s, e, t) in new_segments {
            self.content.insert(s, (e, t));
        }
    }

    fn mismatching_bytes(&self, start: u64, end: u64, seed: u64) -> u64 {
        let mut good = 0;
        for (&s, &(e, t)) in self.content.range(..end) {
            if e > start && t == seed {
                good += e.min(end) - s.max(start);
            }
        }
        (end - start) - good
    }
}

impl GpuBackend for SimDevice {
    fn describe(&self) -> DeviceDescription {
        DeviceDescription {
            vendor: "simulated".into(),
            name: "memwatch simulated device".into(),
            index: 0,
            arch: "sim".into(),
        }
    }

    fn mem_info(&mut self) -> Result<MemInfo, GpuError> {
        let used = self.foreign_used + self.used_by_us();
        Ok(MemInfo {
            free_bytes: self.total.saturating_sub(used),
            total_bytes: self.total,
        })
    }

    fn alloc(&mut self, bytes: u64) -> Result<DevicePtr, GpuError> {
        let call = self.alloc_calls;
        self.alloc_calls += 1;
        self.log.push(format!("alloc {bytes}"));
        if self.fail_alloc_call == Some(call) {
            return Err(GpuError::Api {
                api: "cuMemAlloc_v2",
                code: 999,
                name: "CUDA_ERROR_UNKNOWN (injected)".into(),
            });
        }
        let need = self.rounded(bytes.max(1));
        let free = self.mem_info()?.free_bytes;
        if need > free {
            return Err(GpuError::OutOfMemory {
                api: "cuMemAlloc_v2",
                bytes,
            });
        }
        let p = self.next_addr;
        self.next_addr += need;
        self.allocs.insert(p, bytes);
        self.ok_allocs += 1;
        if let Some((n, flag)) = &self.interrupt_after_allocs {
            if self.ok_allocs >= *n {
                flag.store(true, Ordering::SeqCst);
            }
        }
        Ok(p)
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), GpuError> {
        self.log.push(format!("free {ptr:#x}"));
        if self.fail_frees {
            return Err(GpuError::Api {
                api: "cuMemFree_v2",
                code: 999,
                name: "injected".into(),
            });
        }
        let bytes = self.allocs.remove(&ptr).ok_or(GpuError::Api {
            api: "cuMemFree_v2",
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE (simulated)".into(),
        })?;
        // Freed memory holds garbage for whoever gets it next.
        self.write(ptr, ptr + bytes, |_| u64::MAX);
        Ok(())
    }

    fn touch(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<(), GpuError> {
        self.log.push(format!("touch {ptr:#x} {bytes}"));
        self.check_range("cuLaunchKernel(mw_touch)", ptr, bytes)?;
        self.write(ptr, ptr + bytes, |_| seed as u64);
        Ok(())
    }

    fn checksum(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<u64, GpuError> {
        self.log.push(format!("checksum {ptr:#x} {bytes}"));
        self.check_range("cuLaunchKernel(mw_checksum)", ptr, bytes)?;
        Ok(self
            .mismatching_bytes(ptr, ptr + bytes, seed as u64)
            .div_ceil(16))
    }

    fn strided(
        &mut self,
        ptr: DevicePtr,
        bytes: u64,
        _stride: u64,
        passes: u32,
    ) -> Result<(), GpuError> {
        self.log.push(format!("strided {ptr:#x} {bytes} x{passes}"));
        self.check_range("cuLaunchKernel(mw_strided)", ptr, bytes)?;
        if passes % 2 == 1 {
            self.write(ptr, ptr + bytes, |t| t.unwrap_or(u64::MAX) ^ INVERTED);
        }
        Ok(())
    }

    fn copy(&mut self, dst: DevicePtr, src: DevicePtr, bytes: u64) -> Result<(), GpuError> {
        self.check_range("cuMemcpyDtoD_v2", dst, bytes)?;
        self.check_range("cuMemcpyDtoD_v2", src, bytes)?;
        self.write(dst, dst + bytes, |_| u64::MAX - 1);
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), GpuError> {
        Ok(())
    }

    fn timer_start(&mut self) -> Result<(), GpuError> {
        self.timer_events += 1;
        Ok(())
    }

    fn timer_stop(&mut self) -> Result<f64, GpuError> {
        self.timer_events += 1;
        Ok(1e-3)
    }
}
