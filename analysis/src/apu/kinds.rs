//! The kinds of allocation the APU accounting keeps apart.
//!
//! Owns the classification of an allocating call into device memory, pinned host
//! memory, managed memory and registered host memory: on an APU all four come out of the
//! same RAM, but the driver counts them in different places (or not at all).

use memwatch_wire::{Api, MemKind};

use crate::live::Family;

/// One kind of APU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApuKind {
    /// `hipMalloc` and its relatives: the VRAM domain (the carve-out, or GTT when the
    /// carve-out is the smaller).
    Device,
    /// `hipHostMalloc`: pinned system pages the GPU maps (GTT).
    HostPinned,
    /// `hipMallocManaged`: system pages the GPU reaches through its page tables.
    Managed,
    /// `hipHostRegister`: the program's own pages, pinned and mapped (GTT); not new
    /// memory, but pinned.
    HostRegistered,
}

impl ApuKind {
    /// Every kind, in report order.
    pub const ALL: [ApuKind; 4] = [
        ApuKind::Device,
        ApuKind::HostPinned,
        ApuKind::Managed,
        ApuKind::HostRegistered,
    ];

    /// The kind of a successful allocation, from its memory kind or, when that is
    /// `none`, its API; `None` for calls that take no memory (VMM maps, reservations,
    /// pool objects, PJRT buffers).
    pub fn of(mem: Option<MemKind>, api: Api) -> Option<Self> {
        if matches!(mem, Some(MemKind::Managed))
            || matches!(
                api,
                Api::HipMallocManaged | Api::CuMemAllocManaged | Api::CudaMallocManaged
            )
        {
            return Some(Self::Managed);
        }
        match Family::of(mem, api)? {
            Family::Device | Family::VmmHandle => Some(Self::Device),
            Family::Host if api == Api::HipHostRegister => Some(Self::HostRegistered),
            Family::Host => Some(Self::HostPinned),
        }
    }

    /// The HIP APIs counted under this kind.
    pub fn apis(self) -> &'static str {
        match self {
            Self::Device => {
                "hipMalloc, hipExtMallocWithFlags, hipMallocPitch, hipMallocAsync, \
                 hipMallocFromPoolAsync, hipMemCreate"
            }
            Self::HostPinned => "hipHostMalloc",
            Self::Managed => "hipMallocManaged",
            Self::HostRegistered => "hipHostRegister",
        }
    }

    /// Whether amdgpu counts this kind in `mem_info_vram_used` / `mem_info_gtt_used`
    /// (managed memory is system pages outside both: llama.cpp#20472 measured
    /// `MemAvailable` dropping while GTT usage barely moved).
    pub fn in_driver_counters(self) -> bool {
        !matches!(self, Self::Managed)
    }

    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Self::Device => "device (hipMalloc)",
            Self::HostPinned => "host pinned (hipHostMalloc)",
            Self::Managed => "managed (hipMallocManaged)",
            Self::HostRegistered => "host registered (hipHostRegister)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_the_memory_kind_and_the_api() {
        let k = |m: MemKind, a: Api| ApuKind::of(Some(m), a);
        assert_eq!(k(MemKind::Device, Api::HipMalloc), Some(ApuKind::Device));
        assert_eq!(
            k(MemKind::StreamPool, Api::HipMallocAsync),
            Some(ApuKind::Device)
        );
        assert_eq!(
            k(MemKind::VmmPhysical, Api::HipMemCreate),
            Some(ApuKind::Device)
        );
        assert_eq!(
            k(MemKind::Managed, Api::HipMallocManaged),
            Some(ApuKind::Managed)
        );
        assert_eq!(
            k(MemKind::HostPinned, Api::HipHostMalloc),
            Some(ApuKind::HostPinned)
        );
        assert_eq!(
            k(MemKind::HostPinned, Api::HipHostRegister),
            Some(ApuKind::HostRegistered)
        );
        assert_eq!(k(MemKind::VmmMap, Api::HipMemMap), None);
        assert_eq!(
            ApuKind::of(None, Api::HipMallocManaged),
            Some(ApuKind::Managed)
        );
        assert_eq!(
            ApuKind::of(None, Api::HipHostRegister),
            Some(ApuKind::HostRegistered)
        );
        assert!(!ApuKind::Managed.in_driver_counters());
    }
}
