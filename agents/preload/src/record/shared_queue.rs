//! The bounded lock-free multi-producer queue shared by threads past the 1024th recording one.
//!
//! Owns the event slots (one `mmap`ed array, allocated once at start-up, never on the
//! hook path) and the producer / consumer positions. Producers never block: a full ring
//! makes [`SharedQueue::push`] return `false` and the caller counts a drop. There is exactly one
//! consumer at a time (whoever holds the sink lock). Algorithm: Dmitry Vyukov's bounded
//! queue (per-slot sequence numbers), restricted to a single consumer.
//!
//! Each slot stores its sequence number minus its own index, so an all-zero slot is a
//! fresh one: start-up maps the array and touches none of it (this queue is only the
//! fallback past 1024 recording threads, and with `MEMWATCH_BUFFER_EVENTS=16777216`
//! writing every initial sequence number took 0.7 s and 1.3 GB of memory at the first
//! hooked call), and emptying it in a forked child hands its pages back to the kernel.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};
use memwatch_wire::Event;

#[repr(C)]
struct Slot {
    /// Vyukov's sequence number minus this slot's index (0 in a fresh slot).
    seq_rel: AtomicUsize,
    ev: UnsafeCell<Event>,
}

impl Slot {
    /// The sequence number of slot `index`.
    #[inline(always)]
    fn seq(&self, index: usize) -> usize {
        self.seq_rel.load(Ordering::Acquire).wrapping_add(index)
    }

    /// Publishes sequence number `seq` for slot `index`.
    #[inline(always)]
    fn set_seq(&self, index: usize, seq: usize) {
        self.seq_rel
            .store(seq.wrapping_sub(index), Ordering::Release);
    }
}

#[repr(align(64))]
struct Padded(AtomicUsize);

/// The queue. Lives in a `static`; `init` must run before `push`/`pop`.
pub struct SharedQueue {
    slots: AtomicUsize, // *mut Slot as usize; 0 until initialised
    mask: AtomicUsize,
    enq: Padded,
    deq: Padded,
}

// SAFETY: slots are only written by the producer that claimed them (sequence protocol)
// and read by the single consumer after the release store of the sequence number.
unsafe impl Sync for SharedQueue {}

impl Default for SharedQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedQueue {
    pub const fn new() -> Self {
        SharedQueue {
            slots: AtomicUsize::new(0),
            mask: AtomicUsize::new(0),
            enq: Padded(AtomicUsize::new(0)),
            deq: Padded(AtomicUsize::new(0)),
        }
    }

    /// Maps `capacity` (a power of two) slots; the kernel's zero pages are empty slots, so
    /// nothing is touched until used. Returns false when the mapping failed.
    pub fn init(&self, capacity: usize) -> bool {
        let bytes = capacity.saturating_mul(core::mem::size_of::<Slot>());
        // SAFETY: anonymous private mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p.is_null() {
            return false;
        }
        self.mask.store(capacity - 1, Ordering::Relaxed);
        self.enq.0.store(0, Ordering::Relaxed);
        self.deq.0.store(0, Ordering::Relaxed);
        self.slots.store(p as usize, Ordering::Release);
        true
    }

    /// Empties the queue (in a forked child, where no other thread exists): slots
    /// half-written by parent threads at fork time are discarded. The pages go back to
    /// the kernel and read as zeros (fresh slots) again.
    pub fn reset(&self) {
        let base = self.slots.load(Ordering::Relaxed) as *mut Slot;
        if base.is_null() {
            return;
        }
        let cap = self.mask.load(Ordering::Relaxed) + 1;
        let bytes = cap * core::mem::size_of::<Slot>();
        // SAFETY: our own private anonymous mapping of `bytes`; MADV_DONTNEED makes it
        // read as zero-fill-on-demand.
        let dropped =
            unsafe { libc::madvise(base as *mut libc::c_void, bytes, libc::MADV_DONTNEED) };
        if dropped != 0 {
            for i in 0..cap {
                // SAFETY: i < capacity; the memory is ours.
                unsafe { (*base.add(i)).seq_rel.store(0, Ordering::Relaxed) };
            }
        }
        self.enq.0.store(0, Ordering::Relaxed);
        self.deq.0.store(0, Ordering::Release);
    }

    /// Appends one event; `false` when the queue is full (or not initialised).
    #[inline]
    pub fn push(&self, ev: &Event) -> bool {
        let base = self.slots.load(Ordering::Acquire) as *mut Slot;
        if base.is_null() {
            return false;
        }
        let mask = self.mask.load(Ordering::Relaxed);
        let mut pos = self.enq.0.load(Ordering::Relaxed);
        loop {
            // SAFETY: masked index is within the mapping.
            let slot = unsafe { &*base.add(pos & mask) };
            let seq = slot.seq(pos & mask);
            let dif = seq as isize - pos as isize;
            if dif == 0 {
                match self.enq.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: we own this slot until the release store below.
                        unsafe { *slot.ev.get() = *ev };
                        slot.set_seq(pos & mask, pos.wrapping_add(1));
                        return true;
                    }
                    Err(actual) => pos = actual,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = self.enq.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest published event. Only one caller at a time (the sink lock holder).
    #[inline]
    pub fn pop(&self) -> Option<Event> {
        let base = self.slots.load(Ordering::Acquire) as *mut Slot;
        if base.is_null() {
            return None;
        }
        let mask = self.mask.load(Ordering::Relaxed);
        let pos = self.deq.0.load(Ordering::Relaxed);
        // SAFETY: masked index is within the mapping.
        let slot = unsafe { &*base.add(pos & mask) };
        if slot.seq(pos & mask) != pos.wrapping_add(1) {
            return None;
        }
        // SAFETY: the producer published this slot (release) and we observed it (acquire).
        let ev = unsafe { *slot.ev.get() };
        slot.set_seq(pos & mask, pos.wrapping_add(mask).wrapping_add(1));
        self.deq.0.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(ev)
    }

    pub fn capacity(&self) -> usize {
        self.mask.load(Ordering::Relaxed) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_drops_and_drains_in_order() {
        let r = Box::leak(Box::new(SharedQueue::new()));
        assert!(!r.push(&Event::default()));
        assert!(r.init(1024));
        for i in 0..1024u64 {
            assert!(r.push(&Event {
                size: i,
                ..Event::default()
            }));
        }
        assert!(!r.push(&Event::default()), "full ring must refuse");
        for i in 0..1024u64 {
            assert_eq!(r.pop().map(|e| e.size), Some(i));
        }
        assert!(r.pop().is_none());
        assert!(r.push(&Event {
            size: 7,
            ..Event::default()
        }));
        assert_eq!(r.pop().map(|e| e.size), Some(7));
    }

    /// Pages of the queue's mapping that are resident (mincore).
    fn resident_pages(r: &SharedQueue) -> usize {
        let page = 4096usize;
        let bytes = r.capacity() * core::mem::size_of::<Slot>();
        let pages = bytes.div_ceil(page);
        let mut v = vec![0u8; pages];
        let base = r.slots.load(Ordering::Relaxed) as *mut libc::c_void;
        // SAFETY: the queue's own page-aligned mapping; `v` holds one byte per page.
        assert_eq!(unsafe { libc::mincore(base, bytes, v.as_mut_ptr()) }, 0);
        v.iter().filter(|b| **b & 1 != 0).count()
    }

    #[test]
    fn start_up_touches_no_slot_and_reset_empties_for_more_laps() {
        let r = Box::leak(Box::new(SharedQueue::new()));
        assert!(r.init(1 << 16));
        assert_eq!(resident_pages(r), 0, "init must not write the slots");
        // Three laps of a small window, so slots are reused at every sequence offset.
        for i in 0..(3u64 << 16) {
            assert!(r.push(&Event {
                size: i,
                ..Event::default()
            }));
            assert_eq!(r.pop().map(|e| e.size), Some(i));
        }
        for i in 0..100u64 {
            assert!(r.push(&Event {
                size: i,
                ..Event::default()
            }));
        }
        assert!(resident_pages(r) > 0);
        r.reset();
        assert_eq!(resident_pages(r), 0, "reset hands the pages back");
        assert!(r.pop().is_none(), "reset empties");
        for i in 0..(1u64 << 16) {
            assert!(r.push(&Event {
                size: i,
                ..Event::default()
            }));
        }
        assert!(!r.push(&Event::default()), "full again after one lap");
        for i in 0..(1u64 << 16) {
            assert_eq!(r.pop().map(|e| e.size), Some(i));
        }
    }

    #[test]
    fn many_producers_lose_nothing_that_was_accepted() {
        let r: &'static SharedQueue = Box::leak(Box::new(SharedQueue::new()));
        assert!(r.init(1 << 12));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut ok = 0u64;
                    for i in 0..20_000u64 {
                        if r.push(&Event {
                            size: t << 32 | i,
                            ..Event::default()
                        }) {
                            ok += 1;
                        }
                    }
                    ok
                })
            })
            .collect();
        let mut got = 0u64;
        let mut last = [None::<u64>; 4];
        loop {
            let done = handles.iter().all(|h| h.is_finished());
            while let Some(e) = r.pop() {
                let t = (e.size >> 32) as usize;
                let i = e.size & 0xffff_ffff;
                assert!(last[t].is_none_or(|l| l < i), "per-producer order kept");
                last[t] = Some(i);
                got += 1;
            }
            if done {
                break;
            }
        }
        let accepted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        while r.pop().is_some() {
            got += 1;
        }
        assert_eq!(got, accepted);
    }
}
