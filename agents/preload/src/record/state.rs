//! The process-wide recording state every hooked call reads.
//!
//! Owns the recording phase (not started, starting, active, off), the switches fixed
//! at start-up that the hot path tests (families, durations, the fault switch), the pid
//! the shim records as its own, the drop counter outside the per-thread rings, the
//! shared fallback queue, and the flusher / exit flags. `lifecycle` moves the phase;
//! everything else only reads it.

use super::shared_queue::SharedQueue;
use crate::config::{Family, Fault};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The recording phase.
pub mod phase {
    /// No hooked call has come yet.
    pub const UNINIT: u8 = 0;
    /// The first hooked call runs the start-up.
    pub const STARTING: u8 = 1;
    /// Recording.
    pub const ACTIVE: u8 = 2;
    /// Not recording (no sink, set-up failed, after exit); wrappers call straight through.
    pub const OFF: u8 = 3;
}

static PHASE: AtomicU8 = AtomicU8::new(phase::UNINIT);

/// The current phase (acquire: a reader of `ACTIVE` sees the start-up's writes).
#[inline(always)]
pub fn phase() -> u8 {
    PHASE.load(Ordering::Acquire)
}

/// Moves to `p` (`lifecycle` only).
pub(crate) fn set_phase(p: u8) {
    PHASE.store(p, Ordering::Release);
}

/// Claims the start-up (`UNINIT` -> `STARTING`); `Err(phase)` when another call has.
pub(crate) fn claim_start_up() -> Result<(), u8> {
    PHASE
        .compare_exchange(
            phase::UNINIT,
            phase::STARTING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map(drop)
}

/// Whether recording is on.
pub fn is_active() -> bool {
    phase() == phase::ACTIVE
}

/// Turns recording off for the rest of the process (sink unusable, or after exit).
pub fn turn_off() {
    set_phase(phase::OFF);
}

/// What [`super::begin`] tests with one load: the recorded families ([`Family::bit`])
/// and [`BEGIN_FAULT`].
static BEGIN_FLAGS: AtomicU8 = AtomicU8::new(0);
/// `BEGIN_FLAGS` bit: the fault switch asks for a panic before the real call.
pub(super) const BEGIN_FAULT: u8 = 0x80;

/// What [`super::Pending::commit`] tests with one load before the plain push.
static COMMIT_FLAGS: AtomicU8 = AtomicU8::new(0);
/// `COMMIT_FLAGS` bit: native stacks are sampled (`stack_sample`).
pub(super) const COMMIT_SAMPLE_STACKS: u8 = 1;
/// `COMMIT_FLAGS` bit: the fault switch asks for a panic after the real call.
pub(super) const COMMIT_FAULT: u8 = 2;

#[inline(always)]
pub(super) fn begin_flags() -> u8 {
    BEGIN_FLAGS.load(Ordering::Relaxed)
}

#[inline(always)]
pub(super) fn commit_flags() -> u8 {
    COMMIT_FLAGS.load(Ordering::Relaxed)
}

/// Sets the recorded families (bit set of [`Family::bit`]), keeping the fault bit.
pub(crate) fn set_families(bits: u8) {
    let fault = BEGIN_FLAGS.load(Ordering::Relaxed) & BEGIN_FAULT;
    BEGIN_FLAGS.store((bits & !BEGIN_FAULT) | fault, Ordering::Relaxed);
}

pub(super) fn set_sample_stacks(on: bool) {
    set_bit(&COMMIT_FLAGS, COMMIT_SAMPLE_STACKS, on);
}

static FAULT: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// The fault switch (`fault`).
pub fn fault() -> Fault {
    Fault::from_u8(FAULT.load(Ordering::Relaxed))
}

pub(super) fn set_fault(f: Fault) {
    FAULT.store(f as u8, Ordering::Relaxed);
    set_bit(&BEGIN_FLAGS, BEGIN_FAULT, f == Fault::PanicBeforeCall);
    set_bit(&COMMIT_FLAGS, COMMIT_FAULT, f == Fault::PanicAfterCall);
}

fn set_bit(flags: &AtomicU8, bit: u8, on: bool) {
    if on {
        flags.fetch_or(bit, Ordering::Relaxed);
    } else {
        flags.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// `MEMWATCH_ALLOC_DURATIONS=1` (set once at start-up).
static TIME_ALLOCS: AtomicBool = AtomicBool::new(false);

#[inline(always)]
pub(super) fn time_allocs() -> bool {
    TIME_ALLOCS.load(Ordering::Relaxed)
}

pub(crate) fn set_time_allocs(v: bool) {
    TIME_ALLOCS.store(v, Ordering::Relaxed);
}

/// Whether wrappers should be handed out for `f` (used by `dlsym` / GetProcAddress).
pub fn wrap_allowed(f: Family) -> bool {
    phase() != phase::OFF && crate::config::get().family_enabled(f)
}

/// The pid the shim records as its own.
pub static PID: AtomicU32 = AtomicU32::new(0);

/// The pid recorded in events.
#[inline(always)]
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Whether the caller runs in the process the shim recorded as its own (false in a
/// `vfork` child, which shares the parent's memory but not its pid).
pub fn is_this_process() -> bool {
    // SAFETY: plain system call.
    pid() == unsafe { libc::getpid() } as u32
}

/// The shared fallback queue (past 1024 recording threads; see `shared_queue`).
pub static SHARED_QUEUE: SharedQueue = SharedQueue::new();

/// Drops counted outside the per-thread rings (shared queue, unusable sink, ...); see
/// [`dropped_total`].
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Counts `n` events lost outside the per-thread rings.
pub fn count_dropped(n: u64) {
    DROPPED.fetch_add(n, Ordering::Relaxed);
}

/// Events dropped so far in this process (shared counter plus the per-thread rings').
pub fn dropped_total() -> u64 {
    DROPPED
        .load(Ordering::Relaxed)
        .wrapping_add(super::thread_ring::dropped_total())
}

/// The image's start stamp (CLOCK_MONOTONIC ns, wall-clock ns since the epoch), taken
/// before any of its events: when the shim is loaded (an ELF constructor, `lifecycle`),
/// again in a forked child and when `memwatch attach` turns recording on anew. 0: not
/// taken.
static START_MONO: AtomicU64 = AtomicU64::new(0);
static START_WALL: AtomicU64 = AtomicU64::new(0);

/// Takes the image's start stamp now.
pub fn stamp_image_start() {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    START_WALL.store(wall, Ordering::Relaxed);
    START_MONO.store(crate::clock::monotonic_ns(), Ordering::Release);
}

/// The image's start stamp as (monotonic, wall) ns; taken now when it never was.
pub fn image_start() -> (u64, u64) {
    if START_MONO.load(Ordering::Acquire) == 0 {
        stamp_image_start();
    }
    (
        START_MONO.load(Ordering::Acquire),
        START_WALL.load(Ordering::Relaxed),
    )
}

/// Set while a flusher thread runs (or is being started).
pub static FLUSHER_RUNNING: AtomicBool = AtomicBool::new(false);
/// Set by the last pass of an image (exit, exec, abnormal end): the flusher stops.
pub static EXITING: AtomicBool = AtomicBool::new(false);
