//! The vendor-neutral device interface the replay runner drives.
//!
//! Owns: the [`GpuBackend`] trait (memory info, allocate, free, the three replay kernels,
//! a copy, event timing) and its error type. CUDA (`cuda.rs`) and HIP (`hip.rs`) implement
//! it over the real drivers; `sim.rs` implements it over an in-process simulated device for
//! the runner's logic tests. Backends only do what they are told: ownership checks, the
//! order of events and cleanup policy live in `session.rs` and `runner.rs`.

use serde::Serialize;
use thiserror::Error;

/// A device address.
pub type DevicePtr = u64;

/// Device memory as the driver reports it (cuMemGetInfo / hipMemGetInfo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl MemInfo {
    /// Bytes in use on the device by anyone (this process included).
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.free_bytes)
    }
}

/// What the backend is driving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceDescription {
    /// `cuda`, `hip` or `simulated`.
    pub vendor: String,
    /// Driver-reported device name.
    pub name: String,
    /// Device ordinal.
    pub index: u32,
    /// `sm_90`, `gfx942`, ...
    pub arch: String,
}

/// A driver call failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// The allocation could not be satisfied: the device is out of memory.
    #[error("{api} of {bytes} bytes: out of memory")]
    OutOfMemory { api: &'static str, bytes: u64 },
    /// Any other driver error, with the driver's own name for it.
    #[error("{api} failed: {name} (code {code})")]
    Api {
        api: &'static str,
        code: i32,
        name: String,
    },
    /// The driver library could not be loaded or lacks an entry point.
    #[error("cannot load {lib}: {reason}")]
    Load { lib: String, reason: String },
    /// No usable kernel code object for this device.
    #[error("kernel code object: {0}")]
    Kernels(String),
}

impl GpuError {
    /// True when the failure is the device running out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, GpuError::OutOfMemory { .. })
    }
}

/// One GPU, as the replay runner sees it. Implementations free what they allocated
/// internally (scratch buffers, modules, events, contexts) in `Drop`; allocations handed
/// out by [`GpuBackend::alloc`] are owned by the caller (`Session` frees them).
pub trait GpuBackend {
    fn describe(&self) -> DeviceDescription;
    fn mem_info(&mut self) -> Result<MemInfo, GpuError>;
    /// One real device allocation (cuMemAlloc / hipMalloc).
    fn alloc(&mut self, bytes: u64) -> Result<DevicePtr, GpuError>;
    fn free(&mut self, ptr: DevicePtr) -> Result<(), GpuError>;
    /// Launches `mw_touch`: writes the pattern for `seed` over `[ptr, ptr+bytes)`.
    fn touch(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<(), GpuError>;
    /// Launches `mw_checksum` and waits: the number of 16-byte words (plus tail bytes) of
    /// `[ptr, ptr+bytes)` that do not hold `seed`'s pattern.
    fn checksum(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<u64, GpuError>;
    /// Launches `mw_strided`: `passes` read-modify-write sweeps with a stride of
    /// `stride_bytes` (a multiple of 16).
    fn strided(
        &mut self,
        ptr: DevicePtr,
        bytes: u64,
        stride_bytes: u64,
        passes: u32,
    ) -> Result<(), GpuError>;
    /// Device-to-device copy (the reference for bandwidth figures).
    fn copy(&mut self, dst: DevicePtr, src: DevicePtr, bytes: u64) -> Result<(), GpuError>;
    /// Waits for all launched work.
    fn synchronize(&mut self) -> Result<(), GpuError>;
    /// Records the start event of a device-side timing.
    fn timer_start(&mut self) -> Result<(), GpuError>;
    /// Records the stop event, waits for it, returns the seconds since `timer_start`.
    fn timer_stop(&mut self) -> Result<f64, GpuError>;
}
