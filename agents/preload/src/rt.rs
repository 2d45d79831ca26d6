//! Per-process recording state and the hot path.
//!
//! Owns the lifecycle (uninitialised -> active | off), the per-thread state (reentrancy
//! guard, cached tid and errno location, current device) in initial-exec TLS (no lazy
//! registration, no allocation, no `__tls_get_addr`), the drop counter, and the fork /
//! exit handlers. [`begin`] / [`Pending::commit`] are the only code a hooked call runs
//! besides the real function: one TLS lookup, one clock read (two for API spans), one
//! ring push, no lock, no allocation, errno restored.

use crate::config::{Config, Family};
use crate::ring::Ring;
use crate::sink;
use crate::tring::{self, ThreadRing};
use core::cell::Cell;
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use memwatch_wire::{Api, Event, EventKind, MemKind};
use std::sync::OnceLock;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// `MEMWATCH_ALLOC_DURATIONS=1` (set once at start-up).
static TIME_ALLOCS: AtomicBool = AtomicBool::new(false);
static FAMILIES: AtomicU8 = AtomicU8::new(0);
pub static RING: Ring = Ring::new();
/// Drops counted outside the per-thread rings (shared ring, unusable sink, ...); see
/// [`dropped_total`].
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
pub static PID: AtomicU32 = AtomicU32::new(0);
pub static FLUSHER_RUNNING: AtomicBool = AtomicBool::new(false);
pub static EXITING: AtomicBool = AtomicBool::new(false);
static CONFIG: OnceLock<Config> = OnceLock::new();

/// Everything the hot path needs from thread-local storage, in one block so a hooked
/// call pays for one TLS lookup on entry and none on exit. All-zero is the initial state
/// (it lives in `.tbss` on x86-64 Linux; see [`ts`]).
#[repr(C)]
pub(crate) struct ThreadState {
    in_hook: Cell<bool>,
    /// Set when no ring could be had: use the shared ring.
    shared: Cell<bool>,
    /// Inside the `dlclose` hook (a library destructor's own dlclose passes through).
    in_dlclose: Cell<bool>,
    tid: Cell<u32>,
    /// Current device + 1 (0 = never set).
    device1: Cell<i32>,
    /// This thread's ring; NULL before its first recorded call.
    ring: Cell<*const ThreadRing>,
    /// This thread's errno (cached with `tid`).
    errno: Cell<*mut c_int>,
    /// The program's frame pointer, return address and stack pointer at its call of
    /// the outermost hooked function (stored by the x86-64 entry trampolines in
    /// `hooks`, read by `backtrace`).
    pub(crate) caller_fp: Cell<u64>,
    pub(crate) caller_ret: Cell<u64>,
    pub(crate) caller_sp: Cell<u64>,
    /// Highest stack address of this thread (0: not known yet; see `backtrace`).
    pub(crate) stack_top: Cell<u64>,
    /// Lowest address of this thread's stack (valid when `stack_top` is set).
    pub(crate) stack_lo: Cell<u64>,
    /// Bytes still to allocate before the next sampled backtrace.
    pub(crate) bt_budget: Cell<i64>,
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
    // whose all-zero bytes are a valid `ThreadState`.
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

/// The environment configuration (parsed once).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

/// Whether wrappers should be handed out for `f` (used by `dlsym` / GetProcAddress).
pub fn wrap_allowed(f: Family) -> bool {
    STATE.load(Ordering::Relaxed) != OFF && config().family_enabled(f)
}

/// Whether the caller runs in the process the shim recorded as its own (false in a
/// `vfork` child, which shares the parent's memory but not its pid).
pub fn is_this_process() -> bool {
    // SAFETY: plain system call.
    PID.load(Ordering::Relaxed) == unsafe { libc::getpid() } as u32
}

/// Marks the calling thread as never recording (the flusher).
pub fn mark_internal_thread() {
    ts().in_hook.set(true);
}

/// CLOCK_MONOTONIC nanoseconds (not the hot-path clock; see `clock`).
#[inline]
pub fn now_ns() -> u64 {
    crate::clock::monotonic_ns()
}

#[inline]
fn tid_of(t: &ThreadState) -> u32 {
    let v = t.tid.get();
    if v != 0 {
        return v;
    }
    first_call_of_thread(t)
}

/// Fills the thread's cached tid and errno location.
#[cold]
fn first_call_of_thread(t: &ThreadState) -> u32 {
    // SAFETY: plain syscall; the thread's own errno location.
    let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.errno.set(unsafe { libc::__errno_location() });
    t.tid.set(v);
    v
}

/// The thread's errno, through the location cached by [`tid_of`].
#[inline]
fn errno_of(t: &ThreadState) -> c_int {
    // SAFETY: set with tid (tid_of runs first in `begin_with`): this thread's errno.
    unsafe { *t.errno.get() }
}

#[inline]
fn set_errno_of(t: &ThreadState, v: c_int) {
    // SAFETY: as in `errno_of`.
    unsafe { *t.errno.get() = v };
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

/// One call being recorded.
pub struct Pending {
    pub ev: Event,
    /// The clock is read when the real call returns ([`Api::stamped_on_return`]);
    /// `ev.ts_ns` holds the entry time until then (0 unless durations are recorded).
    stamp_on_return: bool,
    /// An allocating call without a recorded duration: its clock read is left to the
    /// ring push, after the rest of the slot is written (see [`Pending::commit`]).
    stamp_at_push: bool,
    errno: c_int,
    /// This thread's state (thread-local storage lives as long as the thread), so the
    /// exit path needs no second TLS lookup.
    ts: &'static ThreadState,
}

/// Starts recording a call of `api`, or `None` when this call must not be recorded
/// (shim off, family off, nested inside another hooked call, or the flusher thread).
#[inline]
pub fn begin(f: Family, api: Api) -> Option<Pending> {
    begin_with(f, api, None)
}

/// Like [`begin`] for an event whose timestamps the caller already took (`ts_raw`, raw
/// clock units): reads no clock, and keeps the thread's errno as it is now, so the
/// event can be committed without [`Pending::finished`].
#[inline]
pub fn begin_at(f: Family, api: Api, ts_raw: u64) -> Option<Pending> {
    begin_with(f, api, Some(ts_raw))
}

#[inline(always)]
fn begin_with(f: Family, api: Api, at: Option<u64>) -> Option<Pending> {
    let st = STATE.load(Ordering::Acquire);
    // OFF (no sink configured, or set-up failed) is checked with this plain load: init()
    // would run a locked compare-exchange per call, a full barrier that also stops the
    // CPU from overlapping the program's own cache misses across calls.
    if st != ACTIVE && (st == OFF || !init()) {
        return None;
    }
    if FAMILIES.load(Ordering::Relaxed) & f as u8 == 0 {
        return None;
    }
    let t = ts();
    if t.in_hook.replace(true) {
        return None;
    }
    let tid = tid_of(t);
    let device = t.device1.get() - 1;
    if !FLUSHER_RUNNING.load(Ordering::Relaxed) {
        start_flusher();
    }
    // An allocating call is stamped when it returns (in `finished`), every other call
    // here, before the real call: see `memwatch_wire::Event::ts_ns` for why.
    let stamp_on_return = at.is_none() && api.stamped_on_return();
    let stamp_at_push = stamp_on_return && !TIME_ALLOCS.load(Ordering::Relaxed);
    let (ts_ns, errno) = match at {
        Some(at) => (at, errno_of(t)),
        None if stamp_at_push => (0, 0),
        None => (crate::clock::raw(), 0),
    };
    let ev = Event {
        ts_ns,
        pid: PID.load(Ordering::Relaxed),
        tid,
        device: device.max(0),
        api: api as u16,
        ..Event::default()
    };
    Some(Pending {
        ev,
        stamp_on_return,
        stamp_at_push,
        errno,
        ts: t,
    })
}

impl Pending {
    /// Records the end of the real call: result and errno to restore, and for a timed
    /// allocating call its timestamp (the return time; an untimed one is stamped by
    /// [`Pending::commit`], still after the real call returned). Release events carry
    /// their start time only (duration 0) unless `MEMWATCH_ALLOC_DURATIONS=1`, which
    /// times both kinds; [`Pending::span`] measures API spans.
    #[inline]
    pub fn finished(&mut self, result: c_int) {
        self.errno = errno_of(self.ts);
        self.ev.result = result;
        // Untimed: an allocating call is stamped in `commit`, anything else was at entry.
        if self.stamp_at_push || !TIME_ALLOCS.load(Ordering::Relaxed) {
            return;
        }
        let now = crate::clock::raw();
        self.ev.duration_ns = now.wrapping_sub(self.ev.ts_ns);
        if self.stamp_on_return {
            self.ev.ts_ns = now;
        }
    }

    #[inline]
    pub fn alloc(&mut self, mk: MemKind, ptr: u64, size: u64) {
        debug_assert!(
            self.stamp_on_return || self.ev.api >= 3000,
            "api {} records allocations: list it in Api::stamped_on_return",
            self.ev.api
        );
        self.ev.kind = if self.ev.result == 0 {
            EventKind::Alloc as u8
        } else {
            EventKind::AllocFailed as u8
        };
        self.ev.mem_kind = mk as u8;
        self.ev.ptr = if self.ev.result == 0 { ptr } else { 0 };
        self.ev.size = size;
    }

    #[inline]
    pub fn free(&mut self, mk: MemKind, ptr: u64, size: u64) {
        debug_assert!(
            !self.stamp_on_return,
            "api {} records releases: take it out of Api::stamped_on_return",
            self.ev.api
        );
        self.ev.kind = if self.ev.result == 0 {
            EventKind::Free as u8
        } else {
            EventKind::FreeFailed as u8
        };
        self.ev.mem_kind = mk as u8;
        self.ev.ptr = ptr;
        self.ev.size = size;
    }

    /// A timed non-allocation call (after [`Pending::finished`]); `handle` is the
    /// created / destroyed object. The duration is stored in `duration_ns` and `aux`.
    #[inline]
    pub fn span(&mut self, handle: u64) {
        self.ev.duration_ns = crate::clock::raw().wrapping_sub(self.ev.ts_ns);
        self.ev.kind = EventKind::ApiSpan as u8;
        self.ev.mem_kind = MemKind::None as u8;
        self.ev.ptr = handle;
        self.ev.aux = self.ev.duration_ns;
    }

    /// Abandons the record (nothing queued): clears the guard and restores errno.
    #[inline]
    pub fn discard(self) {
        self.ts.in_hook.set(false);
        set_errno_of(self.ts, self.errno);
    }

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
        // Only HIP / CUDA calls come through the entry trampolines that save the
        // caller's frame (PJRT events, api 3000.., do not).
        let sample = crate::backtrace::enabled()
            && self.ev.kind == EventKind::Alloc as u8
            && self.ev.api < 3000
            && crate::backtrace::due(t, self.ev.size);
        if sample && self.stamp_at_push {
            // The backtrace group is built from the event: stamp it first.
            self.ev.ts_ns = crate::clock::raw();
            self.stamp_at_push = false;
        }
        if !(sample && crate::backtrace::push_with_stack(t, &self.ev)) {
            push_raw(t, &self.ev, self.stamp_at_push);
        }
        t.in_hook.set(false);
        set_errno_of(t, self.errno);
    }
}

/// This thread's own ring, taken now if it has none yet (`None`: it uses the shared
/// ring).
pub(crate) fn thread_ring(t: &ThreadState) -> Option<&'static ThreadRing> {
    // SAFETY: rings are never unmapped.
    if let Some(r) = unsafe { t.ring.get().as_ref() } {
        return Some(r);
    }
    take_ring(t)
}

/// Gives the thread its own ring, unless none could be had before.
#[cold]
fn take_ring(t: &ThreadState) -> Option<&'static ThreadRing> {
    if t.shared.get() {
        return None;
    }
    match tring::acquire(config().buffer_events) {
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

/// Queues one event of this thread (its ring, or the shared one); false when it had to
/// be dropped (counted). With `stamp`, `ev.ts_ns` is replaced by a clock read taken in
/// the push, after the rest of the slot is written ([`Pending::commit`]).
#[inline]
fn push_raw(t: &ThreadState, ev: &Event, stamp: bool) -> bool {
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

/// First recorded call of a thread: take a ring (or settle for the shared one). Drops
/// are counted by the thread's ring, or here for the shared one.
#[cold]
fn push_slow(t: &ThreadState, ev: &Event) -> bool {
    if let Some(r) = take_ring(t) {
        return r.push(ev);
    }
    let ok = RING.push(ev);
    if !ok {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

/// Events dropped so far in this process (shared counter plus the per-thread rings').
pub fn dropped_total() -> u64 {
    DROPPED
        .load(Ordering::Relaxed)
        .wrapping_add(tring::dropped_total())
}

/// Records a set-device event for the calling thread outside `begin` (set-device hooks
/// update the thread's device even when nested, and record only real changes).
pub fn guard_is_set() -> bool {
    ts().in_hook.get()
}

/// Marks the calling thread as inside the `dlclose` hook; returns the previous value.
pub fn set_in_dlclose(v: bool) -> bool {
    ts().in_dlclose.replace(v)
}

/// Sets the calling thread's reentrancy guard (nothing it calls is recorded); returns
/// the previous value.
pub fn set_guard(v: bool) -> bool {
    ts().in_hook.replace(v)
}

/// The state block of the thread running [`init`] (0 when none): a hooked call that
/// start-up itself makes is not recorded, and must not wait for itself.
static INIT_OWNER: AtomicUsize = AtomicUsize::new(0);

/// Another thread is running [`init`]: wait until recording is on (or off). Start-up
/// reads the environment and maps the shared ring (microseconds, but the thread running
/// it may be descheduled for much longer on a loaded machine); after
/// [`crate::wait::SET_UP_MAX_NS`] the call goes unrecorded (counted as dropped) rather
/// than hang the program.
#[cold]
fn wait_for_init() -> bool {
    if INIT_OWNER.load(Ordering::Acquire) == ts() as *const ThreadState as usize {
        return false;
    }
    crate::wait::wait_until(
        || STATE.load(Ordering::Acquire) != INITIALIZING,
        crate::wait::SET_UP_MAX_NS,
    );
    match STATE.load(Ordering::Acquire) {
        ACTIVE => true,
        OFF => false,
        _ => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// One-time start-up on the first hooked call. Returns true when recording is active.
#[cold]
fn init() -> bool {
    match STATE.compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(ACTIVE) => return true,
        Err(OFF) => return false,
        Err(_) => return wait_for_init(),
    }
    INIT_OWNER.store(ts() as *const ThreadState as usize, Ordering::Release);
    let ok = start_up();
    INIT_OWNER.store(0, Ordering::Release);
    ok
}

/// [`init`]'s work, run by the one thread that won the start-up.
#[cold]
fn start_up() -> bool {
    let c = config();
    if c.sink == crate::config::SinkKind::None || !RING.init(c.buffer_events) {
        STATE.store(OFF, Ordering::Release);
        return false;
    }
    FAMILIES.store(c.families, Ordering::Relaxed);
    TIME_ALLOCS.store(c.alloc_durations, Ordering::Relaxed);
    crate::backtrace::configure(c.backtrace_every_bytes);
    crate::clock::init();
    // SAFETY: plain libc calls with valid function pointers.
    unsafe {
        PID.store(libc::getpid() as u32, Ordering::Relaxed);
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        register_exit_handler();
    }
    STATE.store(ACTIVE, Ordering::Release);
    true
}

#[cold]
fn start_flusher() {
    if FLUSHER_RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    // The thread starts with every signal blocked (a new thread inherits the creating
    // thread's mask): a signal the program blocks in its own threads and takes with
    // sigwait/signalfd must never be delivered to ours, where its default action would
    // kill the process. The creating thread's mask is put back at once.
    // SAFETY: sigset_t initialised by sigfillset; pthread_sigmask with valid pointers.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    let masked = unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) == 0
    };
    let spawned = std::thread::Builder::new()
        .name("memwatch-flush".into())
        .spawn(crate::flusher::run)
        .is_ok();
    if masked {
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    }
    if !spawned {
        // No thread: recording cannot be delivered; stop recording.
        STATE.store(OFF, Ordering::Release);
    }
}

/// Whether recording is on.
pub fn is_active() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// Turns recording off for the rest of the process (sink unusable, or after exit).
pub fn turn_off() {
    STATE.store(OFF, Ordering::Release);
}

static FORK_LOCKED: AtomicBool = AtomicBool::new(false);

extern "C" fn fork_prepare() {
    // Hold the sink lock across fork so the child never sees a half-written frame.
    FORK_LOCKED.store(sink::lock_raw(2_000_000_000), Ordering::Relaxed);
}

extern "C" fn fork_parent() {
    if FORK_LOCKED.swap(false, Ordering::Relaxed) {
        sink::unlock_raw();
    }
}

extern "C" fn fork_child() {
    // Only this thread exists now: the child is a new process of the capture.
    FORK_LOCKED.store(false, Ordering::Relaxed);
    let t = ts();
    t.tid.set(0);
    tring::reset_in_child(t.ring.get());
    // SAFETY: plain syscall.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    RING.reset();
    DROPPED.store(0, Ordering::Relaxed);
    sink::reset_in_child();
    crate::pjrt::reset_in_child();
    crate::abnormal_end::reset_in_child();
    FLUSHER_RUNNING.store(false, Ordering::Release);
    EXITING.store(false, Ordering::Relaxed);
    FINAL_PASS_TAKEN.store(false, Ordering::Release);
}

extern "C" fn at_exit() {
    crate::abnormal_end::yield_to_pending_end();
    final_flush(memwatch_wire::ProcessEnd::UNKNOWN_EXIT);
}

/// glibc's `on_exit` handler: gets the status given to `exit()` (or returned by `main`).
extern "C" fn at_exit_with_status(status: libc::c_int, _arg: *mut libc::c_void) {
    crate::abnormal_end::yield_to_pending_end();
    final_flush(status & 0xff);
}

type OnExit = unsafe extern "C" fn(
    extern "C" fn(libc::c_int, *mut libc::c_void),
    *mut libc::c_void,
) -> libc::c_int;

/// Runs [`final_flush`] at exit with the exit status where the C library can say it
/// (glibc's `on_exit`), else with -1 ("not known to the shim") through `atexit`.
fn register_exit_handler() {
    // SAFETY: dlsym of a C library function; when found, `on_exit` has glibc's signature.
    unsafe {
        let f = crate::real::real_dlsym()(libc::RTLD_DEFAULT, c"on_exit".as_ptr());
        if !f.is_null() {
            let on_exit: OnExit = core::mem::transmute::<*mut libc::c_void, OnExit>(f);
            if on_exit(at_exit_with_status, core::ptr::null_mut()) == 0 {
                return;
            }
        }
        libc::atexit(at_exit);
    }
}

/// Drains everything, writes `process_end`, and turns recording off. Bounded wait for
/// the sink lock (2 s). Used at exit and before exec.
pub fn final_flush(exit_code: i32) {
    if STATE.load(Ordering::Acquire) != ACTIVE || !is_this_process() {
        return;
    }
    // One last pass per image: an exit() and a handed-off abort racing each other
    // both got past the check above.
    if FINAL_PASS_TAKEN.swap(true, Ordering::AcqRel) {
        return;
    }
    EXITING.store(true, Ordering::Release);
    let was_internal = ts().in_hook.replace(true);
    sink::flush_locked(true, exit_code, 2_000_000_000);
    ts().in_hook.set(was_internal);
    turn_off();
}

/// Set by the [`final_flush`] that writes this image's `process_end`.
static FINAL_PASS_TAKEN: AtomicBool = AtomicBool::new(false);

/// After a failed exec: resume recording, with the flusher thread that the exec's
/// last pass stopped started again at once (a child whose exec failed often only calls
/// `_exit(127)`, whose hand-off needs a running flusher: `abnormal_end`).
pub fn resume_after_failed_exec() {
    EXITING.store(false, Ordering::Release);
    sink::restart_process();
    FINAL_PASS_TAKEN.store(false, Ordering::Release);
    STATE.store(ACTIVE, Ordering::SeqCst);
    // Starts nothing while the old flusher runs: it goes on, even if it was leaving its
    // loop (see `flusher::run`, whose store and loads pair with this store and swap).
    core::sync::atomic::fence(Ordering::SeqCst);
    start_flusher();
}

/// Used by `attach` (late attach): fixes the configuration from the attach request
/// before anything read the environment. False when it was already fixed.
pub fn set_config(c: Config) -> bool {
    CONFIG.set(c).is_ok()
}

/// Used by `attach`: turns recording on now, the first time through the normal start-up,
/// later back from [`turn_off`] (the ring and fork/exit handlers already exist).
pub fn activate() -> bool {
    match STATE.load(Ordering::Acquire) {
        ACTIVE => true,
        OFF if RING.capacity() > 1 && config().sink != crate::config::SinkKind::None => {
            EXITING.store(false, Ordering::Release);
            FINAL_PASS_TAKEN.store(false, Ordering::Release);
            STATE.store(ACTIVE, Ordering::Release);
            true
        }
        OFF => false,
        _ => init(),
    }
}
