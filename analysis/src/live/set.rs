//! [`LiveSet`]: the allocations live at one instant, and the rule by which a free
//! releases one.
//!
//! The rule: an allocation is keyed by its process image ([`ProcKey`]), its memory
//! [`Family`] and its pointer. A free releases the live allocation with the same key,
//! from the device that allocation was made on (not the device current when the free
//! was called). `free(NULL)` releases nothing; a free of a pointer not live is counted as
//! unmatched; an allocation at a key still live (its free was never seen) releases the
//! old one first. Device bytes count every family but pinned host memory, which is kept
//! apart. A VMM physical handle is given back when it is released and no longer mapped
//! (`super::vmm`): a release while mapped frees at the last unmap, and releases of
//! retained or imported handles free nothing and are not unmatched. Every reader of events (`memwatch report`, its trace export, `attach --live`,
//! the daemon's ingest, the OOM doctor) folds them through this type, so they agree on
//! what was live. It holds no events and does no I/O; callers attach their own data to
//! each allocation (`T`).

use foldhash::HashMap as FastMap;
use memwatch_wire::{Api, Event, EventKind, MemKind};

use super::family::{Family, Step};
use super::shards::LiveMap;
use super::vmm::{Release, VmmRefs};
use super::ProcKey;

pub use super::vmm::HandleRef;

/// Where a live allocation is filed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LiveKey {
    pub proc: ProcKey,
    pub family: Family,
    pub ptr: u64,
}

/// One live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<T> {
    pub size: u64,
    /// The device it was allocated on (its bytes are released from there).
    pub device: i32,
    /// The caller's own data (where it came from, when, ...).
    pub data: T,
}

/// An event as the live set sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemEvent {
    pub proc: ProcKey,
    /// The thread's current device when the call was made.
    pub device: i32,
    pub kind: Option<EventKind>,
    pub mem: Option<MemKind>,
    pub api: Api,
    pub ptr: u64,
    pub size: u64,
    /// The physical handle a VMM mapping names (`cuMemMap`'s handle); `None` for other
    /// events, or when not known.
    pub handle: Option<u64>,
}

impl MemEvent {
    /// A wire event of process image `proc`.
    #[inline]
    pub fn of_wire(proc: ProcKey, e: &Event) -> Self {
        Self {
            proc,
            device: e.device,
            kind: e.kind(),
            mem: e.mem_kind(),
            api: e.api(),
            ptr: e.ptr,
            size: e.size,
            handle: is_vmm_map(e.kind(), e.mem_kind()).then_some(e.aux),
        }
    }
}

/// Whether an event is a VMM mapping (whose wire `aux` is the physical handle).
pub fn is_vmm_map(kind: Option<EventKind>, mem: Option<MemKind>) -> bool {
    kind == Some(EventKind::Alloc) && mem == Some(MemKind::VmmMap)
}

/// What one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<T> {
    /// An allocation became live (on the event's device). `replaced`: an allocation
    /// still live at the same key (its free was never seen), released now.
    /// `now`: the figures of the event's (process image, device) after it.
    Alloc {
        family: Family,
        replaced: Option<Held<T>>,
        now: Totals,
    },
    /// A free released this allocation. `now`: the figures of its (process image,
    /// device) after it.
    Free {
        family: Family,
        freed: Held<T>,
        now: Totals,
    },
    /// A free of a pointer not live in the set (allocated before the capture, or never).
    UnmatchedFree { family: Family },
    /// A release of a VMM handle that gives nothing back now (still mapped, a retained
    /// reference, an imported handle).
    HandleReference(HandleRef),
    /// `free(NULL)`: releases nothing.
    NullFree,
    /// An allocation or release of memory no family counts (VMM maps, address
    /// reservations, pool objects, PJRT buffers).
    Untracked,
    /// Not an allocation or a release (failed calls, spans, device switches).
    NotMemory,
}

/// Live figures of one (process image, device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Bytes of device memory live (every family but pinned host memory).
    pub device_bytes: u64,
    pub device_allocs: u64,
    /// Bytes of pinned host memory live, made while this device was current.
    pub host_bytes: u64,
    pub host_allocs: u64,
}

impl Totals {
    fn add(&mut self, family: Family, size: u64) {
        if family.on_device() {
            self.device_bytes = self.device_bytes.saturating_add(size);
            self.device_allocs += 1;
        } else {
            self.host_bytes = self.host_bytes.saturating_add(size);
            self.host_allocs += 1;
        }
    }

    fn sub(&mut self, family: Family, size: u64) {
        if family.on_device() {
            self.device_bytes = self.device_bytes.saturating_sub(size);
            self.device_allocs = self.device_allocs.saturating_sub(1);
        } else {
            self.host_bytes = self.host_bytes.saturating_sub(size);
            self.host_allocs = self.host_allocs.saturating_sub(1);
        }
    }
}

/// The allocations live now, with caller data `T` on each, and their totals per
/// (process image, device).
#[derive(Debug, Clone)]
pub struct LiveSet<T = ()> {
    // Keyed with a fast non-cryptographic hash: touched by every event; the keys come
    // from captures, not from an adversary that could force collisions.
    live: LiveMap<Held<T>>,
    totals: FastMap<(ProcKey, i32), Totals>,
    vmm: VmmRefs,
}

impl<T> Default for LiveSet<T> {
    fn default() -> Self {
        Self {
            live: LiveMap::default(),
            totals: FastMap::default(),
            vmm: VmmRefs::default(),
        }
    }
}

impl<T> LiveSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set with room for `n` allocations before it grows (a reader that starts
    /// from a known set of allocations, like the daemon's replays).
    pub fn with_capacity(n: usize) -> Self {
        Self {
            live: LiveMap::with_capacity(n),
            totals: FastMap::default(),
            vmm: VmmRefs::default(),
        }
    }

    /// Folds one event in. `data` is kept with the allocation when the event allocates
    /// (and dropped otherwise).
    pub fn apply(&mut self, e: &MemEvent, data: T) -> Change<T> {
        match Step::of(e.kind, e.mem, e.api) {
            None => Change::NotMemory,
            Some(Step::Untracked) => self.untracked(e),
            Some(Step::Alloc(family)) => {
                if family == Family::VmmHandle {
                    self.vmm.created(e.proc, e.ptr);
                }
                let key = LiveKey {
                    proc: e.proc,
                    family,
                    ptr: e.ptr,
                };
                let replaced = self.live.insert(
                    key,
                    Held {
                        size: e.size,
                        device: e.device,
                        data,
                    },
                );
                if let Some(old) = &replaced {
                    self.totals_mut(e.proc, old.device).sub(family, old.size);
                }
                let now = self.totals_mut(e.proc, e.device);
                now.add(family, e.size);
                let now = *now;
                Change::Alloc {
                    family,
                    replaced,
                    now,
                }
            }
            Some(Step::Free(family)) => {
                if e.ptr == 0 {
                    return Change::NullFree;
                }
                let key = LiveKey {
                    proc: e.proc,
                    family,
                    ptr: e.ptr,
                };
                if family == Family::VmmHandle {
                    let live = self.live.contains_key(&key);
                    match self.vmm.release(e.proc, e.ptr, live) {
                        Release::Free => {}
                        Release::Reference(r) => return Change::HandleReference(r),
                        Release::Unknown => return Change::UnmatchedFree { family },
                    }
                }
                self.free(key).unwrap_or(Change::UnmatchedFree { family })
            }
        }
    }

    /// VMM maps and unmaps (the last unmap of a released handle gives its memory back),
    /// address reservations, pool objects, PJRT buffers.
    fn untracked(&mut self, e: &MemEvent) -> Change<T> {
        if e.mem != Some(MemKind::VmmMap) {
            return Change::Untracked;
        }
        match e.kind {
            Some(EventKind::Alloc) => {
                if let Some(handle) = e.handle {
                    let live = self.live.contains_key(&LiveKey {
                        proc: e.proc,
                        family: Family::VmmHandle,
                        ptr: handle,
                    });
                    self.vmm.mapped(e.proc, e.ptr, handle, live);
                }
                Change::Untracked
            }
            Some(EventKind::Free) => match self.vmm.unmapped(e.proc, e.ptr) {
                Some(handle) => self
                    .free(LiveKey {
                        proc: e.proc,
                        family: Family::VmmHandle,
                        ptr: handle,
                    })
                    .unwrap_or(Change::Untracked),
                None => Change::Untracked,
            },
            _ => Change::Untracked,
        }
    }

    /// Gives back the live allocation at `key`, if there is one.
    fn free(&mut self, key: LiveKey) -> Option<Change<T>> {
        let freed = self.live.remove(&key)?;
        let now = self.totals_mut(key.proc, freed.device);
        now.sub(key.family, freed.size);
        let now = *now;
        Some(Change::Free {
            family: key.family,
            freed,
            now,
        })
    }

    fn totals_mut(&mut self, proc: ProcKey, device: i32) -> &mut Totals {
        self.totals.entry((proc, device)).or_default()
    }

    /// Live figures of one (process image, device) (zeros when it has none).
    pub fn totals(&self, proc: ProcKey, device: i32) -> Totals {
        self.totals
            .get(&(proc, device))
            .copied()
            .unwrap_or_default()
    }

    /// Device bytes live on `device` over all process images.
    pub fn device_bytes(&self, device: i32) -> u64 {
        self.totals
            .iter()
            .filter(|((_, d), _)| *d == device)
            .fold(0u64, |s, (_, t)| s.saturating_add(t.device_bytes))
    }

    /// Device bytes live in one process image over all its devices.
    pub fn process_bytes(&self, proc: ProcKey) -> u64 {
        self.totals
            .iter()
            .filter(|((p, _), _)| *p == proc)
            .fold(0u64, |s, (_, t)| s.saturating_add(t.device_bytes))
    }

    /// Every (process image, device) that ever held an allocation, with its figures now.
    pub fn all_totals(&self) -> impl Iterator<Item = ((ProcKey, i32), Totals)> + '_ {
        self.totals.iter().map(|(k, t)| (*k, *t))
    }

    /// The live allocation at `key`, if any.
    pub fn get(&self, key: &LiveKey) -> Option<&Held<T>> {
        self.live.get(key)
    }

    /// Every live allocation, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&LiveKey, &Held<T>)> {
        self.live.iter()
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Releases the allocation at `key` without an event (a reader that learned of its
    /// release otherwise: the daemon's replay of one device, when another device's
    /// allocation replaced it). Returns it, if it was live.
    pub fn remove(&mut self, key: &LiveKey) -> Option<Held<T>> {
        let held = self.live.remove(key)?;
        self.totals_mut(key.proc, held.device)
            .sub(key.family, held.size);
        Some(held)
    }

    /// Releases everything process image `proc` still holds (its exec, or its end, gave
    /// the memory back) and returns it, in no particular order.
    pub fn release_process(&mut self, proc: ProcKey) -> Vec<(LiveKey, Held<T>)> {
        let keys: Vec<LiveKey> = self
            .live
            .keys()
            .filter(|k| k.proc == proc)
            .copied()
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(h) = self.live.remove(&k) {
                out.push((k, h));
            }
        }
        self.totals.retain(|(p, _), _| *p != proc);
        self.vmm.forget_process(proc);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: u32, device: i32, kind: EventKind, mem: MemKind, ptr: u64, size: u64) -> MemEvent {
        MemEvent {
            proc: ProcKey { pid, image: 0 },
            device,
            kind: Some(kind),
            mem: Some(mem),
            api: Api::Unknown,
            ptr,
            size,
            handle: None,
        }
    }

    #[test]
    fn a_free_releases_from_the_device_of_its_allocation() {
        let mut s = LiveSet::new();
        s.apply(&ev(1, 0, EventKind::Alloc, MemKind::Device, 0x10, 100), 'a');
        let c = s.apply(&ev(1, 3, EventKind::Free, MemKind::Device, 0x10, 0), 'x');
        assert!(matches!(
            c,
            Change::Free {
                freed: Held {
                    size: 100,
                    device: 0,
                    data: 'a'
                },
                ..
            }
        ));
        assert_eq!(s.totals(ProcKey { pid: 1, image: 0 }, 0), Totals::default());
        assert_eq!(s.totals(ProcKey { pid: 1, image: 0 }, 3), Totals::default());
    }

    #[test]
    fn families_and_processes_do_not_release_each_other() {
        let mut s = LiveSet::new();
        s.apply(&ev(1, 0, EventKind::Alloc, MemKind::Device, 0x10, 100), ());
        s.apply(
            &ev(1, 0, EventKind::Alloc, MemKind::HostPinned, 0x10, 7),
            (),
        );
        s.apply(&ev(2, 0, EventKind::Alloc, MemKind::Device, 0x10, 50), ());
        let c = s.apply(&ev(1, 0, EventKind::Free, MemKind::HostPinned, 0x10, 0), ());
        assert!(matches!(
            c,
            Change::Free {
                family: Family::Host,
                ..
            }
        ));
        let t = s.totals(ProcKey { pid: 1, image: 0 }, 0);
        assert_eq!((t.device_bytes, t.host_bytes), (100, 0));
        assert_eq!(s.device_bytes(0), 150);
        assert_eq!(s.process_bytes(ProcKey { pid: 2, image: 0 }), 50);
    }

    #[test]
    fn reuse_null_unmatched_and_untracked() {
        let mut s = LiveSet::new();
        s.apply(&ev(1, 0, EventKind::Alloc, MemKind::Device, 0x10, 100), 1);
        let c = s.apply(&ev(1, 1, EventKind::Alloc, MemKind::Managed, 0x10, 30), 2);
        assert!(matches!(
            c,
            Change::Alloc {
                replaced: Some(Held {
                    size: 100,
                    device: 0,
                    data: 1
                }),
                ..
            }
        ));
        assert_eq!(s.device_bytes(0), 0);
        assert_eq!(s.device_bytes(1), 30);
        assert_eq!(
            s.apply(&ev(1, 0, EventKind::Free, MemKind::Device, 0, 0), 0),
            Change::NullFree
        );
        assert_eq!(
            s.apply(&ev(1, 0, EventKind::Free, MemKind::Device, 0x99, 0), 0),
            Change::UnmatchedFree {
                family: Family::Device
            }
        );
        assert_eq!(
            s.apply(&ev(1, 0, EventKind::Alloc, MemKind::VmmMap, 0x20, 4096), 0),
            Change::Untracked
        );
        assert_eq!(
            s.apply(
                &ev(1, 0, EventKind::AllocFailed, MemKind::Device, 0, 1 << 40),
                0
            ),
            Change::NotMemory
        );
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn removing_a_key_releases_it_from_its_device() {
        let mut s = LiveSet::new();
        s.apply(&ev(1, 2, EventKind::Alloc, MemKind::Device, 0, 64), ());
        let key = LiveKey {
            proc: ProcKey { pid: 1, image: 0 },
            family: Family::Device,
            ptr: 0,
        };
        assert_eq!(s.remove(&key).map(|h| (h.size, h.device)), Some((64, 2)));
        assert_eq!((s.device_bytes(2), s.len()), (0, 0));
        assert!(s.remove(&key).is_none());
    }

    #[test]
    fn releasing_a_process_image_gives_back_only_its_memory() {
        let mut s = LiveSet::new();
        let old = ProcKey { pid: 1, image: 0 };
        let new = ProcKey { pid: 1, image: 1 };
        s.apply(&ev(1, 0, EventKind::Alloc, MemKind::Device, 0x10, 100), ());
        let mut e = ev(1, 0, EventKind::Alloc, MemKind::Device, 0x20, 9);
        e.proc = new;
        s.apply(&e, ());
        let gone = s.release_process(old);
        assert_eq!(gone.len(), 1);
        assert_eq!((s.process_bytes(old), s.process_bytes(new)), (0, 9));
    }
}
