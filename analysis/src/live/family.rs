//! Which memory a call allocates or releases, as far as matching frees goes: the
//! [`Family`] of an event and the [`Step`] it takes (allocate, release, or neither).
//!
//! Owns the one classification every reader uses: from the memory kind, or from the API
//! when the kind is `none` (older shims and some free paths do not know it). It holds no
//! state.

use memwatch_wire::{Api, EventKind, MemKind};

/// Which allocations a free can release: a free is matched to an allocation of the same
/// process image, family and pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Device, managed and stream-ordered pool memory (freed by hipFree, cuMemFree,
    /// cudaFree, *FreeAsync).
    Device,
    /// Pinned host memory (hipHostFree, cuMemFreeHost, cudaFreeHost, host unregister).
    Host,
    /// VMM physical handles (cuMemCreate / cuMemRelease).
    VmmHandle,
}

impl Family {
    /// The family of an alloc or free, from its memory kind, or from its API when the
    /// kind is `none` (or one this build does not know). `None`: the event does not
    /// allocate or release memory that is counted (VMM map/unmap, address reservations,
    /// pool objects, PJRT buffers, PyTorch blocks).
    #[inline]
    pub fn of(mem: Option<MemKind>, api: Api) -> Option<Self> {
        match mem {
            Some(MemKind::Device | MemKind::Managed | MemKind::StreamPool) => Some(Self::Device),
            Some(MemKind::HostPinned) => Some(Self::Host),
            Some(MemKind::VmmPhysical) => Some(Self::VmmHandle),
            // PJRT buffers and PyTorch blocks live inside the framework's pool, which the
            // driver-level events already count.
            Some(
                MemKind::VmmMap
                | MemKind::VmmReserve
                | MemKind::PoolObject
                | MemKind::PjrtBuffer
                | MemKind::TorchBlock,
            ) => None,
            Some(MemKind::None) | None => Self::of_api(api),
        }
    }

    fn of_api(api: Api) -> Option<Self> {
        use Api::*;
        Some(match api {
            HipMalloc
            | HipFree
            | HipMallocManaged
            | HipMallocAsync
            | HipFreeAsync
            | HipMallocFromPoolAsync
            | HipExtMallocWithFlags
            | HipMallocPitch
            | CuMemAlloc
            | CuMemFree
            | CuMemAllocManaged
            | CuMemAllocPitch
            | CuMemAllocAsync
            | CuMemFreeAsync
            | CuMemAllocFromPoolAsync
            | CuMemAllocV1
            | CuMemFreeV1
            | CudaMalloc
            | CudaFree
            | CudaMallocManaged
            | CudaMallocAsync
            | CudaFreeAsync => Self::Device,
            HipHostMalloc | HipHostFree | HipHostRegister | HipHostUnregister | CuMemHostAlloc
            | CuMemAllocHost | CuMemFreeHost | CudaMallocHost | CudaHostAlloc | CudaFreeHost => {
                Self::Host
            }
            HipMemCreate | HipMemRelease | CuMemCreate | CuMemRelease => Self::VmmHandle,
            _ => return None,
        })
    }

    /// Whether this family's bytes count as device memory (pinned host memory does not).
    pub fn on_device(self) -> bool {
        !matches!(self, Self::Host)
    }
}

/// What an event does to the live set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A successful allocation of counted memory.
    Alloc(Family),
    /// A release of counted memory.
    Free(Family),
    /// An allocation or release of memory no family counts (VMM map/unmap, address
    /// reservations, pool objects, PJRT buffers).
    Untracked,
}

impl Step {
    /// The step an event of `kind` takes; `None` for events that neither allocate nor
    /// release (failed calls, API spans, device switches, kinds this build does not know).
    #[inline]
    pub fn of(kind: Option<EventKind>, mem: Option<MemKind>, api: Api) -> Option<Self> {
        let family = Family::of(mem, api);
        match kind? {
            EventKind::Alloc => Some(family.map_or(Self::Untracked, Self::Alloc)),
            EventKind::Free => Some(family.map_or(Self::Untracked, Self::Free)),
            EventKind::AllocFailed
            | EventKind::FreeFailed
            | EventKind::ApiSpan
            | EventKind::SetDevice => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_kind_decides_and_the_api_fills_in_for_none() {
        assert_eq!(
            Family::of(Some(MemKind::Managed), Api::CuMemFreeHost),
            Some(Family::Device)
        );
        assert_eq!(
            Family::of(Some(MemKind::None), Api::CuMemFreeHost),
            Some(Family::Host)
        );
        assert_eq!(
            Family::of(None, Api::HipMemRelease),
            Some(Family::VmmHandle)
        );
        assert_eq!(Family::of(Some(MemKind::VmmMap), Api::CuMemAlloc), None);
        assert_eq!(Family::of(Some(MemKind::None), Api::HipStreamCreate), None);
        assert!(!Family::Host.on_device() && Family::VmmHandle.on_device());
    }

    #[test]
    fn steps_of_event_kinds() {
        let dev = Some(MemKind::Device);
        assert_eq!(
            Step::of(Some(EventKind::Alloc), dev, Api::HipMalloc),
            Some(Step::Alloc(Family::Device))
        );
        assert_eq!(
            Step::of(
                Some(EventKind::Free),
                Some(MemKind::PoolObject),
                Api::HipFree
            ),
            Some(Step::Untracked)
        );
        assert_eq!(
            Step::of(Some(EventKind::AllocFailed), dev, Api::HipMalloc),
            None
        );
        assert_eq!(Step::of(None, dev, Api::HipMalloc), None);
    }
}
