//! One recorded call: [`begin`] before the real function, [`Pending`] to fill in what it
//! did, [`Pending::commit`] to queue the event.

use super::state::{self, phase, BEGIN_FAULT, COMMIT_FAULT, COMMIT_SAMPLE_STACKS};
use super::thread_state::{take_ring, ts, ThreadState};
use super::{fault, stack_sample};
use crate::config::Family;
use core::ffi::c_int;
use core::sync::atomic::Ordering;
use memwatch_wire::{Api, Event, EventKind, MemKind};

/// What a first call must start, owned by the layer above (`lifecycle`) and reached only
/// on cold paths.
pub trait StartUp {
    /// The process-wide start-up, run by the first hooked call (others wait for it,
    /// bounded). True when recording is on afterwards.
    fn start_recording() -> bool;
    /// Starts the flusher thread (the first recorded call of a process image).
    fn start_flusher();
}

/// "errno not saved yet" in [`Pending::errno`].
const ERRNO_UNSAVED: c_int = c_int::MIN;

/// One call being recorded. Dropping it (after [`Pending::commit`], on
/// [`Pending::discard`], or while a panic unwinds through memwatch's part of a hook)
/// clears the thread's reentrancy guard and restores the errno the real call left.
pub struct Pending {
    pub ev: Event,
    /// The clock is read when the real call returns ([`Api::stamped_on_return`]);
    /// `ev.ts_ns` holds the entry time until then (0 unless durations are recorded).
    stamp_on_return: bool,
    /// An allocating call without a recorded duration: its clock read is left to the
    /// ring push, after the rest of the slot is written (see [`Pending::commit`]).
    stamp_at_push: bool,
    /// The errno to leave the thread with ([`ERRNO_UNSAVED`]: leave it as it is).
    errno: c_int,
    /// This thread's state (thread-local storage lives as long as the thread), so the
    /// exit path needs no second TLS lookup.
    ts: &'static ThreadState,
}

/// Starts recording a call of `api`, or `None` when this call must not be recorded
/// (shim off, family off, nested inside another hooked call, or the flusher thread).
/// `S` supplies the start-up on the first call.
#[inline]
pub fn begin<S: StartUp>(f: Family, api: Api) -> Option<Pending> {
    begin_with::<S>(f, api, None)
}

/// Like [`begin`] for an event whose timestamps the caller already took (`ts_raw`, raw
/// clock units): reads no clock, and keeps the thread's errno as it is now, so the
/// event can be committed without [`Pending::finished`].
#[inline]
pub fn begin_at<S: StartUp>(f: Family, api: Api, ts_raw: u64) -> Option<Pending> {
    begin_with::<S>(f, api, Some(ts_raw))
}

#[inline(always)]
fn begin_with<S: StartUp>(f: Family, api: Api, at: Option<u64>) -> Option<Pending> {
    let st = state::phase();
    // OFF (no sink configured, or set-up failed) is checked with this plain load: the
    // start-up path would run a locked compare-exchange per call, a full barrier that
    // also stops the CPU from overlapping the program's own cache misses across calls.
    if st != phase::ACTIVE && (st == phase::OFF || !S::start_recording()) {
        return None;
    }
    let flags = state::begin_flags();
    if flags & f.bit() == 0 {
        return None;
    }
    if flags & BEGIN_FAULT != 0 {
        fault::panic_before_call();
    }
    let t = ts();
    if t.in_hook.replace(true) {
        return None;
    }
    // From here on the guard is set: the `Pending` below (dropped on any exit, an unwind
    // included) clears it.
    let tid = t.tid();
    let device = t.device1.get() - 1;
    let mut ev = Event {
        pid: state::pid(),
        tid,
        device: device.max(0),
        ..Event::default()
    };
    ev.set_api(api);
    let mut p = Pending {
        ev,
        stamp_on_return: false,
        stamp_at_push: false,
        errno: ERRNO_UNSAVED,
        ts: t,
    };
    if !state::FLUSHER_RUNNING.load(Ordering::Relaxed) {
        S::start_flusher();
    }
    // An allocating call is stamped when it returns (in `finished`), every other call
    // here, before the real call: see `memwatch_wire::Event::ts_ns` for why.
    p.stamp_on_return = at.is_none() && api.stamped_on_return();
    p.stamp_at_push = p.stamp_on_return && !state::time_allocs();
    p.ev.ts_ns = match at {
        Some(at) => {
            p.errno = t.errno();
            at
        }
        None if p.stamp_at_push => 0,
        None => crate::clock::raw(),
    };
    Some(p)
}

impl Pending {
    /// Records the end of the real call: result and errno to restore, and for a timed
    /// allocating call its timestamp (the return time; an untimed one is stamped by
    /// [`Pending::commit`], still after the real call returned). Release events carry
    /// their start time only (duration 0) unless `MEMWATCH_ALLOC_DURATIONS=1`, which
    /// times both kinds; [`Pending::span`] measures API spans.
    #[inline]
    pub fn finished(&mut self, result: c_int) {
        self.errno = self.ts.errno();
        self.ev.result = result;
        // Untimed: an allocating call is stamped in `commit`, anything else was at entry.
        if self.stamp_at_push || !state::time_allocs() {
            return;
        }
        let now = crate::clock::raw();
        self.ev.duration_ns = now.wrapping_sub(self.ev.ts_ns);
        if self.stamp_on_return {
            self.ev.ts_ns = now;
        }
    }

    /// An allocating call: `ptr` / `size` of memory kind `mk` (a failure when the
    /// result is not 0: then the requested size and no pointer).
    #[inline]
    pub fn alloc(&mut self, mk: MemKind, ptr: u64, size: u64) {
        debug_assert!(
            self.stamp_on_return || self.ev.is_framework(),
            "{} records allocations: list it in Api::stamped_on_return",
            self.ev.api().name()
        );
        let ok = self.ev.result == 0;
        self.ev.set_kind(if ok {
            EventKind::Alloc
        } else {
            EventKind::AllocFailed
        });
        self.ev.set_mem_kind(mk);
        self.ev.ptr = if ok { ptr } else { 0 };
        self.ev.size = size;
    }

    /// A releasing call of `ptr` (memory kind `mk`, `size` when the API states it).
    #[inline]
    pub fn free(&mut self, mk: MemKind, ptr: u64, size: u64) {
        debug_assert!(
            !self.stamp_on_return,
            "{} records releases: take it out of Api::stamped_on_return",
            self.ev.api().name()
        );
        self.ev.set_kind(if self.ev.result == 0 {
            EventKind::Free
        } else {
            EventKind::FreeFailed
        });
        self.ev.set_mem_kind(mk);
        self.ev.ptr = ptr;
        self.ev.size = size;
    }

    /// A timed non-allocation call (after [`Pending::finished`]); `handle` is the
    /// created / destroyed object. The duration is stored in `duration_ns` and `aux`.
    #[inline]
    pub fn span(&mut self, handle: u64) {
        self.ev.duration_ns = crate::clock::raw().wrapping_sub(self.ev.ts_ns);
        self.ev.set_kind(EventKind::ApiSpan);
        self.ev.set_mem_kind(MemKind::None);
        self.ev.ptr = handle;
        self.ev.aux = self.ev.duration_ns;
    }

    /// A change of the thread's current device to `device` (`handle`: the context or
    /// ordinal the call was given).
    #[inline]
    pub fn set_device(&mut self, device: i32, handle: u64) {
        self.ev.set_kind(EventKind::SetDevice);
        self.ev.device = device;
        self.ev.ptr = handle;
    }

    /// Abandons the record (nothing queued): clears the guard and restores errno.
    #[inline]
    pub fn discard(self) {}

    /// Queues the event (or counts a drop), clears the guard and restores errno.
    ///
    /// An untimed allocating call reads the clock here, inside the ring push after the
    /// rest of its slot is written. On the CPUs measured `rdtsc` waits for every earlier
    /// load, as `lfence` does (`bench/ring_store.c`), and the real call has often just
    /// left a cache miss outstanding; the slot stores done first overlap that wait
    /// instead of queueing behind it. The stamp is still taken after the real call
    /// returned, which is all its ordering needs.
    #[inline]
    pub fn commit(mut self) {
        let t = self.ts;
        let flags = state::commit_flags();
        if flags != 0 && self.commit_extras(flags) {
            return;
        }
        push(t, &self.ev, self.stamp_at_push);
        // Dropping `self` clears the guard and restores errno.
    }

    /// The rarely taken part of [`Pending::commit`]: the fault switch, and sampling the
    /// native stack of an allocation. True when the event was queued here.
    #[cold]
    #[inline(never)]
    fn commit_extras(&mut self, flags: u8) -> bool {
        if flags & COMMIT_FAULT != 0 {
            fault::panic_after_call();
        }
        // Only HIP / CUDA calls come through the entry trampolines that save the
        // caller's frame (PJRT events do not).
        let t = self.ts;
        let sample = flags & COMMIT_SAMPLE_STACKS != 0
            && self.ev.is(EventKind::Alloc)
            && !self.ev.is_framework()
            && stack_sample::due(t, self.ev.size);
        if !sample {
            return false;
        }
        if self.stamp_at_push {
            // The backtrace group is built from the event: stamp it first.
            self.ev.ts_ns = crate::clock::raw();
            self.stamp_at_push = false;
        }
        stack_sample::push_with_stack(t, &self.ev)
    }
}

impl Drop for Pending {
    #[inline]
    fn drop(&mut self) {
        self.ts.in_hook.set(false);
        if self.errno != ERRNO_UNSAVED {
            self.ts.set_errno(self.errno);
        }
    }
}

/// Queues one event of this thread (its ring, or the shared queue); false when it had
/// to be dropped (counted). With `stamp`, `ev.ts_ns` is replaced by a clock read taken
/// in the push, after the rest of the slot is written ([`Pending::commit`]).
#[inline]
fn push(t: &ThreadState, ev: &Event, stamp: bool) -> bool {
    // SAFETY: rings are never unmapped.
    match unsafe { t.ring.get().as_ref() } {
        Some(r) => r.push_stamp(ev, stamp),
        None if stamp => push_slow(
            t,
            &Event {
                ts_ns: crate::clock::raw(),
                ..*ev
            },
        ),
        None => push_slow(t, ev),
    }
}

/// First recorded call of a thread: take a ring (or settle for the shared queue). Drops
/// are counted by the thread's ring, or here for the shared queue.
#[cold]
fn push_slow(t: &ThreadState, ev: &Event) -> bool {
    if let Some(r) = take_ring(t) {
        return r.push(ev);
    }
    let ok = state::SHARED_QUEUE.push(ev);
    if !ok {
        state::count_dropped(1);
    }
    ok
}
