//! Sampled native stacks on the hot path (`MEMWATCH_BACKTRACE_EVERY_BYTES=N`).
//!
//! Owns the per-thread byte budget, the stack walk and the hand-off of its frames to
//! the flusher as extra ring slots (turned into `backtrace` frames by
//! `backtrace_frames`, on the flusher).
//!
//! Every successful allocation subtracts its size from the thread's budget;
//! when the budget is used up (about every N bytes, like heap profilers' sampling), the
//! caller's stack is walked by frame pointers. The walk starts from what the x86-64 entry
//! trampoline of the outermost hooked function saved (the program's return address,
//! frame pointer and stack pointer at the call; `exports`), so the shim's own code needs no
//! frame pointers. It reads only stack memory between the caller's stack pointer and the
//! thread's stack top, requires the chain to grow upwards, and stops after
//! [`MAX_FRAMES`]: code built without frame pointers gives a short (or just the
//! call-site) stack, never a fault; a call made on another stack than the thread's (a
//! fiber) gets its call site only. No heap allocation per sample; the stack bounds are
//! found once per thread (`__libc_stack_end` and the stack rlimit for the main thread,
//! `pthread_getattr_np`, which allocates a small cpuset once, for others). The frames travel in the thread's own ring
//! as up to four extra slots of kind [`SLOT_KIND`] right after the allocation event.

use super::thread_state::{own_ring, ThreadState};
use core::sync::atomic::{AtomicU64, Ordering};
use memwatch_wire::Event;

/// Most return addresses kept per sample.
pub const MAX_FRAMES: usize = 16;
/// Frames per ring slot (in `size`, `stream`, `aux`, `duration_ns`).
pub const PER_SLOT: usize = 4;
pub use super::thread_ring::SLOT_KIND;

static EVERY: AtomicU64 = AtomicU64::new(0);

/// Sets the sampling interval in bytes (0: off). Called once at start-up.
pub(crate) fn configure(every_bytes: u64) {
    EVERY.store(every_bytes.min(i64::MAX as u64), Ordering::Relaxed);
    super::state::set_sample_stacks(every_bytes != 0);
}

/// Accounts an allocation of `size` bytes of the calling thread; true when its stack
/// is to be sampled (the thread's byte budget is used up; it starts over at N).
#[inline]
pub(super) fn due(t: &ThreadState, size: u64) -> bool {
    let left = t
        .bt_budget
        .get()
        .saturating_sub(size.min(i64::MAX as u64) as i64);
    if left > 0 {
        t.bt_budget.set(left);
        return false;
    }
    t.bt_budget
        .set(EVERY.load(Ordering::Relaxed).min(i64::MAX as u64) as i64);
    true
}

extern "C" {
    /// glibc: the stack pointer at process start (above every frame of the main thread).
    static __libc_stack_end: *mut core::ffi::c_void;
}

/// The calling thread's stack as (lowest, highest) address; (0, 0) when unknown. The
/// walk only runs when the caller's stack pointer lies inside, so everything between it
/// and the top is mapped stack (a call made on another stack, e.g. a fiber's, gets only
/// its call site).
#[cold]
fn stack_bounds() -> (u64, u64) {
    // SAFETY: plain libc calls on the calling thread; the attr is destroyed.
    unsafe {
        if libc::syscall(libc::SYS_gettid) as i64 == libc::getpid() as i64 {
            // The main thread's stack grows down from __libc_stack_end, at most by the
            // stack size limit.
            let top = __libc_stack_end as u64;
            let mut lim: libc::rlimit = core::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_STACK, &mut lim) == 0
                && lim.rlim_cur != libc::RLIM_INFINITY
            {
                lim.rlim_cur
            } else {
                1 << 30
            };
            return (top.saturating_sub(max), top);
        }
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut core::ffi::c_void = core::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            (addr as u64, (addr as u64).saturating_add(size as u64))
        } else {
            (0, 0)
        }
    }
}

/// Walks the program's frames from the saved entry state into `out`; returns the count.
fn walk(t: &ThreadState, out: &mut [u64; MAX_FRAMES]) -> usize {
    let ret = t.caller_ret.get();
    if ret == 0 {
        return 0;
    }
    out[0] = ret;
    let mut n = 1;
    if t.stack_top.get() == 0 {
        let (lo, hi) = stack_bounds();
        t.stack_lo.set(lo);
        t.stack_top.set(hi);
    }
    let (lo, hi) = (t.caller_sp.get(), t.stack_top.get());
    if lo < t.stack_lo.get() || lo >= hi {
        return n;
    }
    let mut fp = t.caller_fp.get();
    while n < MAX_FRAMES {
        if fp < lo || !fp.is_multiple_of(8) || fp.checked_add(16).is_none_or(|e| e > hi) {
            break;
        }
        // SAFETY: [fp, fp + 16) lies between the caller's stack pointer and the top of
        // this thread's stack, which is mapped.
        let (next, r) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if r == 0 {
            break;
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = r;
        }
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// Queues `ev` preceded by its stack's slots, all published at once in the thread's
/// ring (a flush never sees half a group). False when that was not possible (no own
/// ring, no room, nothing to walk): the caller queues `ev` alone.
#[cold]
#[inline(never)]
pub(super) fn push_with_stack(t: &ThreadState, ev: &Event) -> bool {
    let Some(ring) = own_ring(t) else {
        return false;
    };
    let mut frames = [0u64; MAX_FRAMES];
    let n = walk(t, &mut frames);
    if n == 0 {
        return false;
    }
    let mut group = [Event::default(); MAX_FRAMES / PER_SLOT + 1];
    let mut len = 0;
    for (i, chunk) in frames[..n].chunks(PER_SLOT).enumerate() {
        let f = |k: usize| chunk.get(k).copied().unwrap_or(0);
        if let Some(g) = group.get_mut(len) {
            *g = Event {
                ts_ns: ev.ts_ns,
                ptr: ev.ptr,
                size: f(0),
                stream: f(1),
                aux: f(2),
                duration_ns: f(3),
                pid: ev.pid,
                tid: ev.tid,
                result: n as i32,
                device: i as i32,
                kind: SLOT_KIND,
                mem_kind: 0,
                api: chunk.len() as u16,
            };
            len += 1;
        }
    }
    if let Some(g) = group.get_mut(len) {
        *g = *ev;
        len += 1;
    }
    ring.push_group(group.get(..len).unwrap_or(&[]))
}
