//! When a VMM physical handle's memory is really given back: [`VmmRefs`] follows the
//! mappings and releases of `cuMemCreate` / `hipMemCreate` handles for [`super::LiveSet`].
//!
//! The driver frees a handle's memory once every reference to the handle is released
//! *and* every mapping of it is unmapped. A release while the handle is still mapped
//! frees nothing; the last unmap does. Two calls that add references are not recorded by
//! the shim, and this module accounts for what they leave behind:
//! - `cuMemRetainAllocationHandle` (NCCL frees its buffers with retain, release, unmap,
//!   release): a further release of a handle whose memory was already given back is a
//!   reference being returned, not an unmatched free;
//! - `cuMemImportFromShareableHandle` (NCCL's peer buffers, CUDA IPC): a handle the
//!   process maps without having created it was imported; its memory belongs to the
//!   exporting process (and is counted there), its releases are not unmatched frees.
//!
//! It holds per-handle state only; the live allocations stay in the set.

use foldhash::HashMap as FastMap;

use super::ProcKey;

/// Where a handle the process holds came from, as far as the events tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Created by this process (its memory is in the live set until given back).
    Created,
    /// Mapped without being created here: imported from another process.
    Imported,
    /// Created here and given back at its last unmap after a release; a retained
    /// reference may still be released.
    GivenBack,
}

#[derive(Debug, Clone, Copy)]
struct HandleState {
    origin: Origin,
    /// Mappings of the handle in place.
    maps: u32,
    /// A release was seen while it was mapped.
    released: bool,
}

/// A release of a VMM handle that gives no memory back now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HandleRef {
    /// The handle is still mapped: its memory is given back at its last unmap.
    StillMapped,
    /// The handle's memory was already given back: a further reference (taken with
    /// `cuMemRetainAllocationHandle`, which the shim does not record) is returned.
    Retained,
    /// The handle was imported from another process (`cuMemImportFromShareableHandle`,
    /// not recorded): its memory is the exporter's.
    Imported,
}

impl HandleRef {
    /// Stable lower-case name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::StillMapped => "still_mapped",
            Self::Retained => "retained",
            Self::Imported => "imported",
        }
    }
}

/// What a release of a handle does, as [`VmmRefs::release`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// Give the handle's memory back now (the ordinary case).
    Free,
    /// Nothing is given back.
    Reference(HandleRef),
    /// The handle is not known at all: an unmatched free.
    Unknown,
}

/// Mappings and references of the VMM handles of every process image.
#[derive(Debug, Clone, Default)]
pub(super) struct VmmRefs {
    /// (process image, mapped address) -> handle.
    mappings: FastMap<(ProcKey, u64), u64>,
    handles: FastMap<(ProcKey, u64), HandleState>,
}

impl VmmRefs {
    /// `handle` was created (a value seen before now names new memory).
    pub fn created(&mut self, proc: ProcKey, handle: u64) {
        self.handles.insert(
            (proc, handle),
            HandleState {
                origin: Origin::Created,
                maps: 0,
                released: false,
            },
        );
    }

    /// `handle` was mapped at `va`; `live`: the process holds it as a live allocation.
    pub fn mapped(&mut self, proc: ProcKey, va: u64, handle: u64, live: bool) {
        if let Some(old) = self.mappings.insert((proc, va), handle) {
            // Mapped over without an unmap seen: that mapping is gone.
            self.unmapped_handle(proc, old);
        }
        let st = self.handles.entry((proc, handle)).or_insert(HandleState {
            origin: if live {
                Origin::Created
            } else {
                Origin::Imported
            },
            maps: 0,
            released: false,
        });
        if st.origin == Origin::GivenBack {
            // The value names memory that is not in the live set (given back, or never
            // created here): imported.
            *st = HandleState {
                origin: if live {
                    Origin::Created
                } else {
                    Origin::Imported
                },
                maps: 0,
                released: false,
            };
        }
        st.maps = st.maps.saturating_add(1);
    }

    /// The mapping at `va` was unmapped. Returns the handle whose memory is given back
    /// now (released earlier while mapped, and this was its last mapping).
    pub fn unmapped(&mut self, proc: ProcKey, va: u64) -> Option<u64> {
        let handle = self.mappings.remove(&(proc, va))?;
        self.unmapped_handle(proc, handle).then_some(handle)
    }

    fn unmapped_handle(&mut self, proc: ProcKey, handle: u64) -> bool {
        let Some(st) = self.handles.get_mut(&(proc, handle)) else {
            return false;
        };
        st.maps = st.maps.saturating_sub(1);
        if st.maps == 0 && st.released && st.origin == Origin::Created {
            st.origin = Origin::GivenBack;
            st.released = false;
            return true;
        }
        false
    }

    /// A release of `handle`; `live`: the process holds it as a live allocation.
    pub fn release(&mut self, proc: ProcKey, handle: u64, live: bool) -> Release {
        let key = (proc, handle);
        let Some(st) = self.handles.get_mut(&key) else {
            return if live {
                Release::Free
            } else {
                Release::Unknown
            };
        };
        match st.origin {
            Origin::Created if live && st.maps > 0 => {
                st.released = true;
                Release::Reference(HandleRef::StillMapped)
            }
            Origin::Created if live => {
                self.handles.remove(&key);
                Release::Free
            }
            // State of memory the set no longer holds (released by an exec's end, or
            // replaced): nothing to give back.
            Origin::Created => {
                self.handles.remove(&key);
                Release::Unknown
            }
            Origin::GivenBack => {
                self.handles.remove(&key);
                Release::Reference(HandleRef::Retained)
            }
            Origin::Imported => {
                if st.maps == 0 {
                    self.handles.remove(&key);
                } else {
                    st.released = true;
                }
                Release::Reference(HandleRef::Imported)
            }
        }
    }

    /// Forgets everything of `proc` (its exec or end gave its memory back).
    pub fn forget_process(&mut self, proc: ProcKey) {
        self.mappings.retain(|(p, _), _| *p != proc);
        self.handles.retain(|(p, _), _| *p != proc);
    }
}

#[cfg(test)]
mod tests {
    use memwatch_wire::{Api, EventKind, MemKind};

    use super::super::{Change, Family, LiveSet, MemEvent};
    use super::*;

    const P: ProcKey = ProcKey { pid: 7, image: 0 };

    fn ev(kind: EventKind, mem: MemKind, ptr: u64, size: u64, handle: Option<u64>) -> MemEvent {
        MemEvent {
            proc: P,
            device: 1,
            kind: Some(kind),
            mem: Some(mem),
            api: Api::Unknown,
            ptr,
            size,
            handle,
        }
    }
    fn create(s: &mut LiveSet, h: u64, size: u64) -> Change<()> {
        s.apply(
            &ev(EventKind::Alloc, MemKind::VmmPhysical, h, size, None),
            (),
        )
    }
    fn release(s: &mut LiveSet, h: u64) -> Change<()> {
        s.apply(&ev(EventKind::Free, MemKind::VmmPhysical, h, 0, None), ())
    }
    fn map(s: &mut LiveSet, va: u64, h: u64) -> Change<()> {
        s.apply(
            &ev(EventKind::Alloc, MemKind::VmmMap, va, 4096, Some(h)),
            (),
        )
    }
    fn unmap(s: &mut LiveSet, va: u64) -> Change<()> {
        s.apply(&ev(EventKind::Free, MemKind::VmmMap, va, 4096, None), ())
    }

    /// NCCL's own buffers: create, map, then retain + release, unmap, release.
    #[test]
    fn a_release_while_mapped_gives_back_at_the_unmap_and_the_retained_reference_is_no_free() {
        let mut s = LiveSet::new();
        create(&mut s, 0xa, 100);
        map(&mut s, 0x1000, 0xa);
        assert_eq!(
            release(&mut s, 0xa),
            Change::HandleReference(HandleRef::StillMapped)
        );
        assert_eq!(s.device_bytes(1), 100, "still mapped: still there");
        assert!(matches!(
            unmap(&mut s, 0x1000),
            Change::Free {
                family: Family::VmmHandle,
                ..
            }
        ));
        assert_eq!(s.device_bytes(1), 0);
        assert_eq!(
            release(&mut s, 0xa),
            Change::HandleReference(HandleRef::Retained)
        );
        // Once the reference is back, a further release is unmatched again.
        assert_eq!(
            release(&mut s, 0xa),
            Change::UnmatchedFree {
                family: Family::VmmHandle
            }
        );
    }

    /// A peer's buffer: mapped without being created here, released twice.
    #[test]
    fn imported_handles_count_nothing_and_are_not_unmatched() {
        let mut s = LiveSet::new();
        assert_eq!(map(&mut s, 0x2000, 0xb), Change::Untracked);
        assert_eq!(
            release(&mut s, 0xb),
            Change::HandleReference(HandleRef::Imported)
        );
        assert_eq!(unmap(&mut s, 0x2000), Change::Untracked);
        assert_eq!(
            release(&mut s, 0xb),
            Change::HandleReference(HandleRef::Imported)
        );
        assert_eq!(
            release(&mut s, 0xb),
            Change::UnmatchedFree {
                family: Family::VmmHandle
            }
        );
        assert_eq!(s.device_bytes(1), 0);
        assert!(s.is_empty());
    }

    /// XLA: unmap first, then release; or a handle never mapped; or two mappings.
    #[test]
    fn ordinary_orders_free_at_the_release_or_the_last_unmap() {
        let mut s = LiveSet::new();
        create(&mut s, 0xc, 10);
        map(&mut s, 0x3000, 0xc);
        assert_eq!(unmap(&mut s, 0x3000), Change::Untracked);
        assert!(matches!(release(&mut s, 0xc), Change::Free { .. }));
        create(&mut s, 0xd, 20);
        assert!(matches!(release(&mut s, 0xd), Change::Free { .. }));
        create(&mut s, 0xe, 30);
        map(&mut s, 0x4000, 0xe);
        map(&mut s, 0x5000, 0xe);
        release(&mut s, 0xe);
        assert_eq!(unmap(&mut s, 0x4000), Change::Untracked);
        assert_eq!(s.device_bytes(1), 30);
        assert!(matches!(unmap(&mut s, 0x5000), Change::Free { .. }));
        assert_eq!(s.device_bytes(1), 0);
        // The handle value comes back for new memory: counted anew.
        create(&mut s, 0xe, 40);
        assert!(matches!(release(&mut s, 0xe), Change::Free { .. }));
        assert!(s.is_empty());
    }

    /// Without the mapping's handle (an older capture reader), the release frees at once.
    #[test]
    fn unknown_mapping_handles_keep_the_release_rule() {
        let mut s = LiveSet::new();
        create(&mut s, 0xf, 5);
        s.apply(&ev(EventKind::Alloc, MemKind::VmmMap, 0x6000, 5, None), ());
        assert!(matches!(release(&mut s, 0xf), Change::Free { .. }));
        assert_eq!(unmap(&mut s, 0x6000), Change::Untracked);
    }
}
