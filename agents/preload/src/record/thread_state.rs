//! The calling thread's block of hot-path state, in initial-exec TLS.
//!
//! Owns the reentrancy guard, the cached tid and errno location, the thread's current
//! device, its ring pointer, the caller's frame the entry trampolines save (for sampled
//! backtraces) and the stack bounds, all in one 128-byte block: a hooked call pays for
//! one TLS lookup on entry and none on exit, with no lazy registration, no allocation
//! and no `__tls_get_addr`. All-zero is the initial state. Also owns which ring the
//! thread records into ([`own_ring`]: its own, taken on its first recorded call and
//! handed back when it ends, or the shared queue).

use super::thread_ring::ThreadRing;
use core::cell::Cell;
use core::ffi::c_int;

/// Everything the hot path needs from thread-local storage (see the module docs).
#[repr(C)]
pub(crate) struct ThreadState {
    pub(super) in_hook: Cell<bool>,
    /// Set when no ring could be had: use the shared ring.
    pub(super) shared: Cell<bool>,
    /// Inside the `dlclose` hook (a library destructor's own dlclose passes through).
    in_dlclose: Cell<bool>,
    pub(super) tid: Cell<u32>,
    /// Current device + 1 (0 = never set).
    pub(super) device1: Cell<i32>,
    /// This thread's ring; NULL before its first recorded call.
    pub(super) ring: Cell<*const ThreadRing>,
    /// This thread's errno (cached with `tid`).
    errno: Cell<*mut c_int>,
    /// The program's frame pointer, return address and stack pointer at its call of
    /// the outermost hooked function (stored by the x86-64 entry trampolines in
    /// `exports`, read by `stack_sample`).
    pub(super) caller_fp: Cell<u64>,
    pub(super) caller_ret: Cell<u64>,
    pub(super) caller_sp: Cell<u64>,
    /// Highest stack address of this thread (0: not known yet; see `stack_sample`).
    pub(super) stack_top: Cell<u64>,
    /// Lowest address of this thread's stack (valid when `stack_top` is set).
    pub(super) stack_lo: Cell<u64>,
    /// Bytes still to allocate before the next sampled backtrace.
    pub(super) bt_budget: Cell<i64>,
}

/// Offsets the entry trampolines write at (checked against the layout at compile time).
pub(crate) const OFF_IN_HOOK: usize = core::mem::offset_of!(ThreadState, in_hook);
pub(crate) const OFF_CALLER_FP: usize = core::mem::offset_of!(ThreadState, caller_fp);
pub(crate) const OFF_CALLER_RET: usize = core::mem::offset_of!(ThreadState, caller_ret);
pub(crate) const OFF_CALLER_SP: usize = core::mem::offset_of!(ThreadState, caller_sp);

// The thread state block in initial-exec TLS: a `.tbss` symbol reached through its GOT
// offset from the thread pointer (`%fs`), one load and one add. Rust's `thread_local!`
// in a cdylib uses the general-dynamic model (a `__tls_get_addr` call per access),
// which the hot-path rules exclude. Linking it sets DF_STATIC_TLS; glibc's
// surplus static TLS (>= 512 bytes) covers these 128 bytes when `memwatch attach`
// dlopens the shim.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .tbss.memwatch_thread_state,\"awT\",@nobits",
    ".p2align 6",
    ".globl memwatch_thread_state",
    ".hidden memwatch_thread_state",
    ".type memwatch_thread_state, @object",
    ".size memwatch_thread_state, 128",
    "memwatch_thread_state:",
    ".zero 128",
    ".popsection",
);

const _: () = assert!(core::mem::size_of::<ThreadState>() <= 128);

/// The calling thread's state block. Valid for as long as the thread runs (it is part
/// of the thread's static TLS, never freed before the thread is gone).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
pub(crate) fn ts() -> &'static ThreadState {
    let p: *const ThreadState;
    // SAFETY: initial-exec TLS access sequence for a 128-byte, zero-initialised block
    // whose all-zero bytes are a valid `ThreadState`; the block lives as long as the
    // thread and is only touched by it.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + memwatch_thread_state@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, readonly, nostack, preserves_flags)
        );
        &*p
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
thread_local! {
    static TS: ThreadState = const {
        ThreadState {
            in_hook: Cell::new(false),
            shared: Cell::new(false),
            tid: Cell::new(0),
            device1: Cell::new(0),
            ring: Cell::new(core::ptr::null()),
            errno: Cell::new(core::ptr::null_mut()),
            in_dlclose: Cell::new(false),
            caller_fp: Cell::new(0),
            caller_ret: Cell::new(0),
            caller_sp: Cell::new(0),
            stack_top: Cell::new(0),
            stack_lo: Cell::new(0),
            bt_budget: Cell::new(0),
        }
    };
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
pub(crate) fn ts() -> &'static ThreadState {
    // SAFETY: the block outlives every use on this thread (never handed to another).
    TS.with(|t| unsafe { &*(t as *const ThreadState) })
}

impl ThreadState {
    /// The thread's id, cached (with its errno location) at its first call.
    #[inline]
    pub(super) fn tid(&self) -> u32 {
        let v = self.tid.get();
        if v != 0 {
            return v;
        }
        self.first_call_of_thread()
    }

    /// Fills the thread's cached tid and errno location.
    #[cold]
    fn first_call_of_thread(&self) -> u32 {
        // SAFETY: plain system call.
        let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        // SAFETY: returns this thread's errno location, valid for the thread's life.
        self.errno.set(unsafe { libc::__errno_location() });
        self.tid.set(v);
        v
    }

    /// The thread's errno, through the location cached by [`ThreadState::tid`], which
    /// `record::begin` runs before anything that uses it.
    #[inline]
    pub(super) fn errno(&self) -> c_int {
        // SAFETY: this thread's own errno location, cached by `tid` (run first: see
        // above), valid for the thread's life.
        unsafe { *self.errno.get() }
    }

    /// Sets the thread's errno (as [`ThreadState::errno`]).
    #[inline]
    pub(super) fn set_errno(&self, v: c_int) {
        // SAFETY: as in `errno`.
        unsafe { *self.errno.get() = v };
    }

    /// In a forked child: the thread's id is the child's own, asked again at its next call.
    pub(crate) fn forget_tid(&self) {
        self.tid.set(0);
    }

    /// This thread's ring (NULL before its first recorded call).
    pub(crate) fn ring_ptr(&self) -> *const ThreadRing {
        self.ring.get()
    }
}

/// The thread's current device as recorded in events (0 when never set: the HIP and
/// CUDA runtime default).
#[inline]
pub fn current_device() -> i32 {
    (ts().device1.get() - 1).max(0)
}

/// Updates the thread's current device; returns the previous raw value (-1 = never set).
pub fn swap_device(dev: i32) -> i32 {
    ts().device1.replace(dev.wrapping_add(1)) - 1
}

/// Whether the calling thread is inside a hooked call (or is the flusher).
pub fn guard_is_set() -> bool {
    ts().in_hook.get()
}

/// Sets the calling thread's reentrancy guard (nothing it calls is recorded); returns
/// the previous value.
pub fn set_guard(v: bool) -> bool {
    ts().in_hook.replace(v)
}

/// Marks the calling thread as never recording (the flusher).
pub fn mark_internal_thread() {
    ts().in_hook.set(true);
}

/// Marks the calling thread as inside the `dlclose` hook; returns the previous value.
pub fn set_in_dlclose(v: bool) -> bool {
    ts().in_dlclose.replace(v)
}

/// An address that identifies the calling thread (its state block) while it runs.
pub fn thread_key() -> usize {
    ts() as *const ThreadState as usize
}

thread_local! {
    /// Hands the thread's ring back for reuse when the thread ends. Touched once per
    /// thread (registering its destructor), when the ring is taken.
    static RING_OWNER: RingOwner = const { RingOwner(Cell::new(core::ptr::null())) };
}

struct RingOwner(Cell<*const ThreadRing>);

impl Drop for RingOwner {
    fn drop(&mut self) {
        // SAFETY: rings are never unmapped.
        if let Some(r) = unsafe { self.0.get().as_ref() } {
            r.orphan();
        }
    }
}

/// This thread's own ring, taken now if it has none yet (`None`: it uses the shared
/// queue).
pub(crate) fn own_ring(t: &ThreadState) -> Option<&'static ThreadRing> {
    // SAFETY: rings are never unmapped.
    if let Some(r) = unsafe { t.ring.get().as_ref() } {
        return Some(r);
    }
    take_ring(t)
}

/// Gives the thread its own ring, unless none could be had before.
#[cold]
pub(super) fn take_ring(t: &ThreadState) -> Option<&'static ThreadRing> {
    if t.shared.get() {
        return None;
    }
    match super::thread_ring::acquire(crate::config::get().buffer_events) {
        Some(r) => {
            t.ring.set(r);
            RING_OWNER.with(|o| o.0.set(r));
            Some(r)
        }
        None => {
            t.shared.set(true);
            None
        }
    }
}
