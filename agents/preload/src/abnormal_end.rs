//! abort / _exit / _Exit: deliver what was recorded when a process ends without exit().
//!
//! Owns the three wrappers and the hand-off they use. `exit()` runs the shim's exit
//! handler, which drains every ring and writes `process_end`; these three end the process
//! without running it. An OOM that ends in `LOG(FATAL)` → `abort()`, a `std::terminate`,
//! or Python's `os._exit()` used to lose the events queued since the flusher's last pass
//! (up to 20 ms): often the very allocation whose failure ended the program.
//!
//! The wrapper never drains the rings itself: it may run inside a signal handler that
//! interrupted the program's own allocator, where the drain's buffers could not grow. It
//! asks the flusher thread for the last pass instead (`process_end` with 134 = 128 +
//! SIGABRT for `abort`, the status for `_exit`), waits for it at most [`END_WAIT_NS`],
//! and then calls the real function (looked up when the shim was loaded, never here:
//! `dlsym` would take the dynamic loader's lock) with the caller's arguments and errno.
//! The flusher's buffers are sized when the sink opens, so its last pass allocates
//! nothing in the usual case.
//! A flusher that is stuck or absent (a forked child has none until it records) costs
//! at most that wait, never the end. The first ending thread names the code; a thread
//! ending the process later (another `abort` / `_exit`, or `exit()`, whose handler
//! calls [`yield_to_pending_end`]) waits for it, bounded, so that it cannot overtake
//! the first end during the hand-off and change the process's status.
//!
//! After a delivered last pass recording is off for good, as after `exit()`: a program
//! that catches SIGABRT and jumps out of the handler goes on unrecorded, its capture
//! ending with 134. A last pass not delivered in time is called off.
//! Not covered: the C library's internal aborts (a failed `assert`, heap corruption)
//! do not go through the wrapper, and under `memwatch attach` (the shim loaded late with
//! `dlopen`) the program's calls were bound before the shim came.

use crate::panic_guard;
use crate::real::{libc_fn, LibcFn};
use crate::record::state;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// Longest an ending thread waits for the flusher's last pass. A pass normally takes
/// well under a millisecond; the flusher may be asleep for up to 20 ms first.
pub const END_WAIT_NS: u64 = 250_000_000;

/// No end requested.
const NONE: i32 = i32::MIN;
/// The exit code the flusher's last pass writes in `process_end`, or [`NONE`].
static REQUESTED_CODE: AtomicI32 = AtomicI32::new(NONE);
/// Set by the flusher once that last pass is written (or could not be).
static DONE: AtomicBool = AtomicBool::new(false);
/// The flusher's thread id (0: none yet), so that the flusher itself never waits for
/// itself (a panic in the shim's own thread ends in `abort`).
static FLUSHER_TID: AtomicU32 = AtomicU32::new(0);
/// The thread whose request [`REQUESTED_CODE`] holds.
static REQUESTER_TID: AtomicU32 = AtomicU32::new(0);

fn gettid() -> u32 {
    // SAFETY: plain system call.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Called by the flusher thread when it starts.
pub(crate) fn flusher_started() {
    FLUSHER_TID.store(gettid(), Ordering::Release);
}

/// The exit code an ending thread asked for, if any (polled by the flusher every pass).
pub(crate) fn requested_code() -> Option<i32> {
    let code = REQUESTED_CODE.load(Ordering::Acquire);
    (code != NONE).then_some(code)
}

/// Called by the flusher after its last pass for a requested end.
pub(crate) fn last_pass_written() {
    DONE.store(true, Ordering::Release);
}

/// A forked child starts with no request of its parent's.
pub(crate) fn reset_in_child() {
    REQUESTED_CODE.store(NONE, Ordering::Release);
    DONE.store(false, Ordering::Release);
    FLUSHER_TID.store(0, Ordering::Release);
    REQUESTER_TID.store(0, Ordering::Release);
}

/// Called where this thread is about to end the process another way (`exit()`'s
/// handler, a later `abort` / `_exit`): while another thread's end is being handed off,
/// wait for it (bounded). Without the shim that thread would have ended the process
/// already, with its own status; the hand-off must not let a later end overtake it.
pub(crate) fn yield_to_pending_end() {
    if REQUESTED_CODE.load(Ordering::Acquire) == NONE
        || REQUESTER_TID.load(Ordering::Acquire) == gettid()
    {
        return;
    }
    crate::wait::wait_until(
        || REQUESTED_CODE.load(Ordering::Acquire) == NONE,
        2 * END_WAIT_NS,
    );
}

/// Asks the flusher for the last pass with `exit_code` and waits for it (bounded).
/// Keeps the caller's errno (the wait does).
fn hand_off_last_pass(exit_code: i32) {
    if !state::is_active()
        || !state::FLUSHER_RUNNING.load(Ordering::Acquire)
        || FLUSHER_TID.load(Ordering::Acquire) == gettid()
        || !state::is_this_process()
    {
        return;
    }
    // The first request wins. A thread ending later waits for the first one's end
    // (which, without the shim, had come first).
    if REQUESTED_CODE
        .compare_exchange(NONE, exit_code, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        yield_to_pending_end();
        return;
    }
    REQUESTER_TID.store(gettid(), Ordering::Release);
    crate::wait::wait_until(
        || DONE.load(Ordering::Acquire) || !state::FLUSHER_RUNNING.load(Ordering::Acquire),
        END_WAIT_NS,
    );
    if !DONE.load(Ordering::Acquire) {
        // Not written (a stuck sink, or the flusher stopped for an exec): call it off,
        // so that a program that survives its own end (SIGABRT caught, longjmp out) is
        // not ended in the capture later on, and no other end waits for it.
        let _ =
            REQUESTED_CODE.compare_exchange(exit_code, NONE, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Ends the process as `_exit` does, for a C library that could not be asked for its
/// own function (never seen; the wrappers must not return either way).
fn exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: plain system call; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// Wraps libc's `abort` (see the module docs).
///
/// # Safety
/// Same contract as libc's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn abort() -> ! {
    // SAFETY: this thread's errno location.
    let saved = unsafe { *libc::__errno_location() };
    panic_guard::catch(|| hand_off_last_pass(128 + libc::SIGABRT));
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
    let f = libc_fn(LibcFn::Abort);
    if !f.is_null() {
        // SAFETY: libc's `abort`.
        unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> !>(f)() };
    }
    // SAFETY: plain libc call.
    unsafe { libc::raise(libc::SIGABRT) };
    exit_group(128 + libc::SIGABRT)
}

macro_rules! exit_hook {
    ($name:ident, $real:expr) => {
        /// Wraps libc's function of the same name (see the module docs).
        ///
        /// # Safety
        /// Same contract as libc's function.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(status: c_int) -> ! {
            panic_guard::catch(|| hand_off_last_pass(status & 0xff));
            let f = libc_fn($real);
            if !f.is_null() {
                // SAFETY: libc's function of this name; the caller's status.
                unsafe {
                    core::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> !>(f)(status)
                };
            }
            exit_group(status)
        }
    };
}

exit_hook!(_exit, LibcFn::Exit);
exit_hook!(_Exit, LibcFn::ExitUpper);
