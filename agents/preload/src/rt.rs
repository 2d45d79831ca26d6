//! Per-process recording state and the hot path.
//!
//! Owns the lifecycle (uninitialised -> active | off), the per-thread state (reentrancy
//! guard, cached tid, current device) in `const`-initialised thread-locals (no lazy
//! registration, no allocation), the drop counter, and the fork / exit handlers.
//! [`begin`] / [`Pending::commit`] are the only code a hooked call runs besides the real
//! function: two clock reads, one ring push, no lock, no allocation, errno restored.

use crate::config::{Config, Family};
use crate::ring::Ring;
use crate::sink;
use crate::tring::{self, ThreadRing};
use core::cell::Cell;
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use memwatch_wire::{Api, Event, EventKind, MemKind};
use std::sync::OnceLock;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static FAMILIES: AtomicU8 = AtomicU8::new(0);
pub static RING: Ring = Ring::new();
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
pub static PID: AtomicU32 = AtomicU32::new(0);
pub static FLUSHER_RUNNING: AtomicBool = AtomicBool::new(false);
pub static EXITING: AtomicBool = AtomicBool::new(false);
static CONFIG: OnceLock<Config> = OnceLock::new();

/// Everything the hot path needs from thread-local storage, in one block so a hooked
/// call pays for one TLS lookup on entry and one on exit.
struct ThreadState {
    in_hook: Cell<bool>,
    tid: Cell<u32>,
    device: Cell<i32>,
    /// This thread's ring; NULL before its first recorded call.
    ring: Cell<*const ThreadRing>,
    /// Set when no ring could be had: use the shared ring.
    shared: Cell<bool>,
}

thread_local! {
    static TS: ThreadState = const {
        ThreadState {
            in_hook: Cell::new(false),
            tid: Cell::new(0),
            device: Cell::new(-1),
            ring: Cell::new(core::ptr::null()),
            shared: Cell::new(false),
        }
    };
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

/// Marks the calling thread as never recording (the flusher).
pub fn mark_internal_thread() {
    TS.with(|t| t.in_hook.set(true));
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
    // SAFETY: plain syscall.
    let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.tid.set(v);
    v
}

#[inline]
fn errno() -> c_int {
    // SAFETY: thread's errno location.
    unsafe { *libc::__errno_location() }
}

#[inline]
fn set_errno(v: c_int) {
    // SAFETY: thread's errno location.
    unsafe { *libc::__errno_location() = v };
}

/// The thread's current device as recorded in events (0 when never set: the HIP and
/// CUDA runtime default).
#[inline]
pub fn current_device() -> i32 {
    TS.with(|t| t.device.get()).max(0)
}

/// Updates the thread's current device; returns the previous raw value (-1 = never set).
pub fn swap_device(dev: i32) -> i32 {
    TS.with(|t| t.device.replace(dev))
}

/// One call being recorded.
pub struct Pending {
    pub ev: Event,
    errno: c_int,
    /// This thread's state (thread-local storage lives as long as the thread), so the
    /// exit path needs no second TLS lookup.
    ts: *const ThreadState,
}

/// Starts recording a call of `api`, or `None` when this call must not be recorded
/// (shim off, family off, nested inside another hooked call, or the flusher thread).
#[inline]
pub fn begin(f: Family, api: Api) -> Option<Pending> {
    let st = STATE.load(Ordering::Acquire);
    if st != ACTIVE && !init() {
        return None;
    }
    if FAMILIES.load(Ordering::Relaxed) & f as u8 == 0 {
        return None;
    }
    let (nested, tid, device, ts) = TS.with(|t| {
        (
            t.in_hook.replace(true),
            tid_of(t),
            t.device.get(),
            t as *const ThreadState,
        )
    });
    if nested {
        return None;
    }
    if !FLUSHER_RUNNING.load(Ordering::Relaxed) {
        start_flusher();
    }
    let ev = Event {
        ts_ns: crate::clock::raw(),
        pid: PID.load(Ordering::Relaxed),
        tid,
        device: device.max(0),
        api: api as u16,
        ..Event::default()
    };
    Some(Pending { ev, errno: 0, ts })
}

impl Pending {
    /// Records the end of the real call: result, duration, errno to restore.
    #[inline]
    pub fn finished(&mut self, result: c_int) {
        self.errno = errno();
        self.ev.duration_ns = crate::clock::raw().wrapping_sub(self.ev.ts_ns);
        self.ev.result = result;
    }

    #[inline]
    pub fn alloc(&mut self, mk: MemKind, ptr: u64, size: u64) {
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
        self.ev.kind = if self.ev.result == 0 {
            EventKind::Free as u8
        } else {
            EventKind::FreeFailed as u8
        };
        self.ev.mem_kind = mk as u8;
        self.ev.ptr = ptr;
        self.ev.size = size;
    }

    /// A timed non-allocation call; `handle` is the created / destroyed object.
    #[inline]
    pub fn span(&mut self, handle: u64) {
        self.ev.kind = EventKind::ApiSpan as u8;
        self.ev.mem_kind = MemKind::None as u8;
        self.ev.ptr = handle;
        self.ev.aux = self.ev.duration_ns;
    }

    /// Abandons the record (nothing queued): clears the guard and restores errno.
    #[inline]
    pub fn discard(self) {
        // SAFETY: `ts` is this thread's live thread-local block (set in `begin`).
        unsafe { (*self.ts).in_hook.set(false) };
        set_errno(self.errno);
    }

    /// Queues the event (or counts a drop), clears the guard and restores errno.
    #[inline]
    pub fn commit(self) {
        // SAFETY: `ts` is this thread's live thread-local block (set in `begin`).
        let t = unsafe { &*self.ts };
        // SAFETY: rings are never unmapped.
        let ok = match unsafe { t.ring.get().as_ref() } {
            Some(r) => r.push(&self.ev),
            None => push_slow(t, &self.ev),
        };
        t.in_hook.set(false);
        if !ok {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        set_errno(self.errno);
    }
}

/// First recorded call of a thread: take a ring (or settle for the shared one).
#[cold]
fn push_slow(t: &ThreadState, ev: &Event) -> bool {
    if !t.shared.get() {
        match tring::acquire(config().buffer_events) {
            Some(r) => {
                t.ring.set(r);
                RING_OWNER.with(|o| o.0.set(r));
                return r.push(ev);
            }
            None => t.shared.set(true),
        }
    }
    RING.push(ev)
}

/// Records a set-device event for the calling thread outside `begin` (set-device hooks
/// update the thread's device even when nested, and record only real changes).
pub fn guard_is_set() -> bool {
    TS.with(|t| t.in_hook.get())
}

/// One-time start-up on the first hooked call. Returns true when recording is active.
#[cold]
fn init() -> bool {
    match STATE.compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(ACTIVE) => return true,
        Err(OFF) => return false,
        Err(_) => {
            // Another thread is initialising: wait briefly (ring set-up takes ~1 ms).
            for _ in 0..20_000 {
                // SAFETY: plain syscall.
                unsafe { libc::sched_yield() };
                match STATE.load(Ordering::Acquire) {
                    ACTIVE => return true,
                    OFF => return false,
                    _ => {}
                }
            }
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return false;
        }
    }
    let c = config();
    if c.sink == crate::config::SinkKind::None || !RING.init(c.buffer_events) {
        STATE.store(OFF, Ordering::Release);
        return false;
    }
    FAMILIES.store(c.families, Ordering::Relaxed);
    crate::clock::init();
    // SAFETY: plain libc calls with valid function pointers.
    unsafe {
        PID.store(libc::getpid() as u32, Ordering::Relaxed);
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    STATE.store(ACTIVE, Ordering::Release);
    true
}

#[cold]
fn start_flusher() {
    if FLUSHER_RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    if std::thread::Builder::new()
        .name("memwatch-flush".into())
        .spawn(crate::flusher::run)
        .is_err()
    {
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
    TS.with(|t| {
        t.tid.set(0);
        tring::reset_in_child(t.ring.get());
    });
    // SAFETY: plain syscall.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    RING.reset();
    DROPPED.store(0, Ordering::Relaxed);
    sink::reset_in_child();
    FLUSHER_RUNNING.store(false, Ordering::Release);
    EXITING.store(false, Ordering::Relaxed);
}

extern "C" fn at_exit() {
    final_flush(-1);
}

/// Drains everything, writes `process_end`, and turns recording off. Bounded wait for
/// the sink lock (2 s). Used at exit and before exec.
pub fn final_flush(exit_code: i32) {
    // SAFETY: plain syscall.
    if STATE.load(Ordering::Acquire) != ACTIVE
        || PID.load(Ordering::Relaxed) != unsafe { libc::getpid() } as u32
    {
        return;
    }
    EXITING.store(true, Ordering::Release);
    let was_internal = TS.with(|t| t.in_hook.replace(true));
    sink::flush_locked(true, exit_code, 2_000_000_000);
    TS.with(|t| t.in_hook.set(was_internal));
    turn_off();
}

/// After a failed exec: resume recording (the flusher thread still runs).
pub fn resume_after_failed_exec() {
    EXITING.store(false, Ordering::Release);
    sink::restart_process();
    STATE.store(ACTIVE, Ordering::Release);
}
