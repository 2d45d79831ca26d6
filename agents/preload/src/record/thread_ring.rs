//! Per-thread event rings (single producer, single consumer).
//!
//! Owns one bounded ring per recording thread, a fixed registry of them that the flusher
//! walks, and reuse of the rings of threads that have exited. A thread's first recorded
//! call maps its ring (once; `mmap`, no malloc); after that a push is a few plain stores
//! and one release store, touching no cache line another producer writes — the shared
//! MPSC queue (`shared_queue`) made 8 threads on 8 cores fight over one counter. Threads beyond
//! [`MAX_RINGS`] fall back to the shared queue.
//!
//! Slots are [`Slot`]s: an [`Event`] without its `pid` (one per process, filled in when
//! drained), exactly one aligned 64-byte cache line, so a push writes one whole line and
//! never shares a line with the previous event. Every line of the ring is also read by
//! the flusher on another core, so writing it again one lap later needs the line back
//! (a cross-core read-for-ownership, 60-100 ns on the machines measured); each push
//! therefore asks for the line [`PREFETCH_AHEAD`] slots ahead with `prefetchw`, so that
//! transfer overlaps the next calls instead of stalling the thread's stores.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use memwatch_wire::Event;

/// Most per-thread rings per process.
pub const MAX_RINGS: usize = 1024;

/// Event kind of a slot that belongs to the group of the event after it (a sampled
/// stack's frames, `stack_sample`): internal to the shim, never written as an event. A
/// drain never ends inside such a group.
pub const SLOT_KIND: u8 = 0xB1;

/// Largest ring mapping populated when it is created.
const POPULATE_MAX_BYTES: usize = (4 << 20) + 4096;
/// How many slots ahead of the one written a push prefetches for writing.
pub const PREFETCH_AHEAD: usize = 4;

/// One ring slot: an [`Event`] without `pid`, one cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Slot {
    ts_ns: u64,
    ptr: u64,
    size: u64,
    stream: u64,
    aux: u64,
    duration_ns: u64,
    tid: u32,
    result: i32,
    device: i32,
    kind: u8,
    mem_kind: u8,
    api: u16,
}

const _: () = assert!(core::mem::size_of::<Slot>() == 64);

impl Slot {
    #[inline(always)]
    fn from_event(e: &Event) -> Self {
        Slot {
            ts_ns: e.ts_ns,
            ptr: e.ptr,
            size: e.size,
            stream: e.stream,
            aux: e.aux,
            duration_ns: e.duration_ns,
            tid: e.tid,
            result: e.result,
            device: e.device,
            kind: e.kind,
            mem_kind: e.mem_kind,
            api: e.api,
        }
    }

    fn to_event(self, pid: u32) -> Event {
        Event {
            ts_ns: self.ts_ns,
            ptr: self.ptr,
            size: self.size,
            stream: self.stream,
            aux: self.aux,
            duration_ns: self.duration_ns,
            pid,
            tid: self.tid,
            result: self.result,
            device: self.device,
            kind: self.kind,
            mem_kind: self.mem_kind,
            api: self.api,
        }
    }
}

/// Asks for the cache line at `p` in a writable state (a hint; never faults).
#[inline(always)]
fn prefetch_write(p: *const Slot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetchw is a hint that never faults (a NOP on CPUs without PRFCHW).
    unsafe {
        core::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

const OWNED: u8 = 1;
const ORPHAN: u8 = 2;

#[repr(align(64))]
struct Line(AtomicUsize);

/// One thread's ring. Lives in its own mapping, never freed (reused after the thread ends).
#[repr(C)]
pub struct ThreadRing {
    head: Line,                    // written by the producer
    tail: Line,                    // written by the consumer
    tail_cache: UnsafeCell<usize>, // producer's last view of `tail`
    /// Events this ring refused (full), written only by its producer (a plain
    /// load + store, no locked instruction), summed by the flusher.
    dropped: AtomicU64,
    state: AtomicU8,
    mask: usize,
    slots: *mut Slot,
}

static RINGS: [AtomicPtr<ThreadRing>; MAX_RINGS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_RINGS];
static NRINGS: AtomicUsize = AtomicUsize::new(0);

impl ThreadRing {
    /// Appends one event; `false` when full (the drop is counted in the ring). Only the
    /// owning thread calls this.
    #[inline]
    pub fn push(&self, ev: &Event) -> bool {
        self.push_stamp(ev, false)
    }

    /// [`push`](Self::push); with `stamp`, `ts_ns` is read from the clock after the rest
    /// of the slot is stored (see `record::Pending::commit`). A full ring reads no clock.
    #[inline(always)]
    pub fn push_stamp(&self, ev: &Event, stamp: bool) -> bool {
        let h = self.head.0.load(Ordering::Relaxed);
        // SAFETY: tail_cache is producer-private.
        let cached = unsafe { &mut *self.tail_cache.get() };
        if h.wrapping_sub(*cached) > self.mask {
            *cached = self.tail.0.load(Ordering::Acquire);
            if h.wrapping_sub(*cached) > self.mask {
                let d = self.dropped.load(Ordering::Relaxed);
                self.dropped.store(d.wrapping_add(1), Ordering::Relaxed);
                return false;
            }
        }
        // SAFETY: masked index within the mapping; the consumer is past this slot.
        unsafe {
            let slot = self.slots.add(h & self.mask);
            *slot = Slot::from_event(ev);
            if stamp {
                // After the slot stores (the clock intrinsic is a compiler barrier for
                // memory), before the slot is published.
                (*slot).ts_ns = crate::clock::raw();
            }
        }
        self.head.0.store(h.wrapping_add(1), Ordering::Release);
        // SAFETY: masked index within the mapping (only an address for the hint).
        prefetch_write(unsafe { self.slots.add(h.wrapping_add(PREFETCH_AHEAD) & self.mask) });
        true
    }

    /// Appends `evs` (at most a few) and publishes them with one release store: all or
    /// nothing, and no drop is counted (the caller falls back to a single push).
    pub fn push_group(&self, evs: &[Event]) -> bool {
        let h = self.head.0.load(Ordering::Relaxed);
        let n = evs.len();
        // SAFETY: tail_cache is producer-private.
        let cached = unsafe { &mut *self.tail_cache.get() };
        if h.wrapping_add(n).wrapping_sub(*cached) > self.mask + 1 {
            *cached = self.tail.0.load(Ordering::Acquire);
            if h.wrapping_add(n).wrapping_sub(*cached) > self.mask + 1 {
                return false;
            }
        }
        for (i, ev) in evs.iter().enumerate() {
            // SAFETY: masked index within the mapping; the consumer is past these slots.
            unsafe { *self.slots.add(h.wrapping_add(i) & self.mask) = Slot::from_event(ev) };
        }
        self.head.0.store(h.wrapping_add(n), Ordering::Release);
        true
    }

    /// Moves all published events into `out` (consumer side, under the sink lock).
    fn drain_into(&self, out: &mut Vec<Event>, max: usize, pid: u32) -> usize {
        let t = self.tail.0.load(Ordering::Relaxed);
        let h = self.head.0.load(Ordering::Acquire);
        let avail = h.wrapping_sub(t);
        let mut n = avail.min(max);
        // Never end inside a backtrace group (its slots precede its allocation and were
        // published with it).
        while n < avail {
            // SAFETY: slot t + n - 1 is published (n <= avail).
            let last = unsafe {
                &*self
                    .slots
                    .add(t.wrapping_add(n).wrapping_sub(1) & self.mask)
            };
            if n == 0 || last.kind != SLOT_KIND {
                break;
            }
            n += 1;
        }
        for i in 0..n {
            // SAFETY: slots t..h were published by the release store of `head`.
            out.push(unsafe { *self.slots.add(t.wrapping_add(i) & self.mask) }.to_event(pid));
        }
        self.tail.0.store(t.wrapping_add(n), Ordering::Release);
        n
    }

    fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.tail.0.load(Ordering::Acquire)
    }

    fn reset(&self) {
        self.head.0.store(0, Ordering::Relaxed);
        self.tail.0.store(0, Ordering::Relaxed);
        self.dropped.store(0, Ordering::Relaxed);
        // SAFETY: called with no producer running (fork child).
        unsafe { *self.tail_cache.get() = 0 };
    }

    /// The owning thread ended: the ring may go to a new thread once drained.
    pub fn orphan(&self) {
        self.state.store(ORPHAN, Ordering::Release);
    }
}

/// A ring for the calling thread: a drained orphan, or a new mapping of `capacity`
/// (a power of two) events. `None` when the registry is full or mapping failed.
pub fn acquire(capacity: usize) -> Option<&'static ThreadRing> {
    let n = NRINGS.load(Ordering::Acquire).min(MAX_RINGS);
    for slot in RINGS.iter().take(n) {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: registered rings are never unmapped.
        if let Some(r) = unsafe { p.as_ref() } {
            if r.state.load(Ordering::Acquire) == ORPHAN
                && r.is_empty()
                && r.state
                    .compare_exchange(ORPHAN, OWNED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(r);
            }
        }
    }
    let idx = NRINGS.fetch_add(1, Ordering::AcqRel);
    if idx >= MAX_RINGS {
        NRINGS.store(MAX_RINGS, Ordering::Release);
        return None;
    }
    // The header is padded to whole lines (its fields are 64-byte aligned), so the
    // slots after it start on a line boundary of the page-aligned mapping.
    let bytes = core::mem::size_of::<ThreadRing>() + capacity * core::mem::size_of::<Slot>();
    // SAFETY: anonymous private mapping, checked.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            // Rings up to 4 MiB (64K events; the default is 1 MiB) are populated now, at
            // the thread's first recorded call, so no push takes a page fault in the
            // middle of a GPU call; larger ones are faulted in as they fill (populating
            // e.g. 256 MiB per thread up front would cost more than it saves).
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | if bytes <= POPULATE_MAX_BYTES {
                    libc::MAP_POPULATE
                } else {
                    0
                },
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || p.is_null() {
        return None;
    }
    let ring = p as *mut ThreadRing;
    // SAFETY: fresh mapping large enough for the header and `capacity` events.
    unsafe {
        ring.write(ThreadRing {
            head: Line(AtomicUsize::new(0)),
            tail: Line(AtomicUsize::new(0)),
            tail_cache: UnsafeCell::new(0),
            dropped: AtomicU64::new(0),
            state: AtomicU8::new(OWNED),
            mask: capacity - 1,
            slots: (p as *mut u8).add(core::mem::size_of::<ThreadRing>()) as *mut Slot,
        });
    }
    RINGS.get(idx)?.store(ring, Ordering::Release);
    // SAFETY: initialised above, never unmapped.
    Some(unsafe { &*ring })
}

/// Every registered ring, in registration order.
fn registered() -> impl Iterator<Item = &'static ThreadRing> {
    let n = NRINGS.load(Ordering::Acquire).min(MAX_RINGS);
    RINGS
        .iter()
        .take(n)
        // SAFETY: registered rings are never unmapped.
        .filter_map(|slot| unsafe { slot.load(Ordering::Acquire).as_ref() })
}

/// Events refused by all per-thread rings so far (full rings).
pub fn dropped_total() -> u64 {
    registered().fold(0u64, |s, r| {
        s.wrapping_add(r.dropped.load(Ordering::Relaxed))
    })
}

/// Slots in all registered rings together.
pub fn capacity_total() -> usize {
    registered().map(|r| r.mask + 1).sum()
}

/// The ring [`drain_all`] starts with next (consumer side, under the sink lock).
static DRAIN_START: AtomicUsize = AtomicUsize::new(0);

/// Drains every registered ring into `out` (at most `max` events in all), giving the
/// events `pid`. Each call starts one ring further on, so a ring that always holds
/// `max` events (a thread allocating without pause) cannot starve the others.
pub fn drain_all(out: &mut Vec<Event>, max: usize, pid: u32) -> usize {
    let n = NRINGS.load(Ordering::Acquire).min(MAX_RINGS);
    if n == 0 {
        return 0;
    }
    let start = DRAIN_START.fetch_add(1, Ordering::Relaxed) % n;
    let mut total = 0;
    for slot in RINGS[start..n].iter().chain(&RINGS[..start]) {
        if total >= max {
            break;
        }
        // SAFETY: registered rings are never unmapped.
        if let Some(r) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
            total += r.drain_into(out, max - total, pid);
        }
    }
    total
}

/// In a forked child: the parent's events are the parent's to deliver; every ring is
/// emptied, and all but `keep` (the forking thread's) become free for reuse.
pub fn reset_in_child(keep: *const ThreadRing) {
    let n = NRINGS.load(Ordering::Acquire).min(MAX_RINGS);
    for slot in RINGS.iter().take(n) {
        // SAFETY: registered rings are never unmapped.
        if let Some(r) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
            r.reset();
            if !core::ptr::eq(r, keep) {
                r.state.store(ORPHAN, Ordering::Release);
            }
        }
    }
}
