//! The recording lifecycle of a process image, above the hot path.
//!
//! Owns the one-time start-up on the first hooked call (reading the configuration,
//! mapping the shared queue, the fork and exit handlers), starting the flusher thread,
//! the fork handlers, the exit handlers (the last pass with the exit status), resuming
//! after a failed exec, and turning recording on for `memwatch attach`. The hot path
//! (`record`) reaches the start-up through [`Lifecycle`]'s [`StartUp`] implementation;
//! the last pass itself is `process_end`'s.

use crate::config::{self, Config, SinkKind};
use crate::record::state::{self, phase, EXITING, FLUSHER_RUNNING};
use crate::record::{fault, stack_sample, thread_ring, thread_state, StartUp};
use crate::sink;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The start-up the hot path asks for (see [`StartUp`]). Hooks record with
/// `record::begin::<Lifecycle>(..)`.
pub struct Lifecycle;

impl StartUp for Lifecycle {
    #[cold]
    fn start_recording() -> bool {
        init()
    }

    #[cold]
    fn start_flusher() {
        start_flusher();
    }
}

/// The state block of the thread running [`init`] (0 when none): a hooked call that
/// start-up itself makes is not recorded, and must not wait for itself.
static INIT_OWNER: AtomicUsize = AtomicUsize::new(0);

/// Another thread is running [`init`]: wait until recording is on (or off). Start-up
/// reads the environment and maps the shared queue (microseconds, but the thread running
/// it may be descheduled for much longer on a loaded machine); after
/// [`crate::wait::SET_UP_MAX_NS`] the call goes unrecorded (counted as dropped) rather
/// than hang the program.
#[cold]
fn wait_for_init() -> bool {
    if INIT_OWNER.load(Ordering::Acquire) == thread_state::thread_key() {
        return false;
    }
    crate::wait::wait_until(
        || state::phase() != phase::STARTING,
        crate::wait::SET_UP_MAX_NS,
    );
    match state::phase() {
        phase::ACTIVE => true,
        phase::OFF => false,
        _ => {
            state::count_dropped(1);
            false
        }
    }
}

/// One-time start-up on the first hooked call. Returns true when recording is active.
#[cold]
fn init() -> bool {
    match state::claim_start_up() {
        Ok(()) => {}
        Err(phase::ACTIVE) => return true,
        Err(phase::OFF) => return false,
        Err(_) => return wait_for_init(),
    }
    INIT_OWNER.store(thread_state::thread_key(), Ordering::Release);
    let ok = start_up();
    INIT_OWNER.store(0, Ordering::Release);
    ok
}

/// [`init`]'s work, run by the one thread that won the start-up.
#[cold]
fn start_up() -> bool {
    let c = config::get();
    if c.sink == SinkKind::None || !state::SHARED_QUEUE.init(c.buffer_events) {
        state::set_phase(phase::OFF);
        return false;
    }
    state::set_families(c.families);
    state::set_time_allocs(c.alloc_durations);
    stack_sample::configure(c.backtrace_every_bytes);
    fault::configure(c.fault);
    crate::clock::init();
    // SAFETY: plain system call.
    state::PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    // SAFETY: registering plain extern "C" functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    register_exit_handler();
    state::set_phase(phase::ACTIVE);
    true
}

/// Starts the flusher thread, unless one runs (or is being started).
#[cold]
pub fn start_flusher() {
    if FLUSHER_RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    // The thread starts with every signal blocked (a new thread inherits the creating
    // thread's mask): a signal the program blocks in its own threads and takes with
    // sigwait/signalfd must never be delivered to ours, where its default action would
    // kill the process. The creating thread's mask is put back at once.
    // SAFETY: sigset_t is plain data for which all-zero bytes are valid.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointers to initialised sigsets.
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
        state::turn_off();
    }
}

static FORK_LOCKED: AtomicBool = AtomicBool::new(false);

extern "C" fn fork_prepare() {
    // Hold the sink lock across fork so the child never sees a half-written frame.
    let locked = crate::panic_guard::catch(|| sink::lock_raw(2_000_000_000)).unwrap_or(false);
    FORK_LOCKED.store(locked, Ordering::Relaxed);
}

extern "C" fn fork_parent() {
    if FORK_LOCKED.swap(false, Ordering::Relaxed) {
        sink::unlock_raw();
    }
}

extern "C" fn fork_child() {
    // Only this thread exists now: the child is a new process of the capture.
    FORK_LOCKED.store(false, Ordering::Relaxed);
    crate::panic_guard::catch(|| {
        let t = thread_state::ts();
        t.forget_tid();
        thread_ring::reset_in_child(t.ring_ptr());
        // SAFETY: plain system call.
        state::PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
        state::SHARED_QUEUE.reset();
        state::DROPPED.store(0, Ordering::Relaxed);
        sink::reset_in_child();
        crate::pjrt::registry::mark_all_new();
        state::stamp_image_start();
        crate::abnormal_end::reset_in_child();
        FLUSHER_RUNNING.store(false, Ordering::Release);
        EXITING.store(false, Ordering::Relaxed);
        crate::process_end::reset_in_child();
    });
}

extern "C" fn at_exit() {
    crate::panic_guard::catch(|| {
        crate::abnormal_end::yield_to_pending_end();
        crate::process_end::final_flush(memwatch_wire::ProcessEnd::UNKNOWN_EXIT);
    });
}

/// glibc's `on_exit` handler: gets the status given to `exit()` (or returned by `main`).
extern "C" fn at_exit_with_status(status: libc::c_int, _arg: *mut libc::c_void) {
    crate::panic_guard::catch(|| {
        crate::abnormal_end::yield_to_pending_end();
        crate::process_end::final_flush(status & 0xff);
    });
}

type OnExit = unsafe extern "C" fn(
    extern "C" fn(libc::c_int, *mut libc::c_void),
    *mut libc::c_void,
) -> libc::c_int;

/// Runs the last pass at exit with the exit status where the C library can say it
/// (glibc's `on_exit`), else with -1 ("not known to the shim") through `atexit`.
fn register_exit_handler() {
    // SAFETY: dlsym of a C library function with a NUL-terminated name.
    let f = unsafe { crate::real::real_dlsym()(libc::RTLD_DEFAULT, c"on_exit".as_ptr()) };
    if !f.is_null() {
        // SAFETY: glibc's `on_exit` has this signature.
        let on_exit: OnExit = unsafe { core::mem::transmute::<*mut libc::c_void, OnExit>(f) };
        // SAFETY: registers a handler that lives as long as the process.
        if unsafe { on_exit(at_exit_with_status, core::ptr::null_mut()) } == 0 {
            return;
        }
    }
    // SAFETY: as above.
    unsafe { libc::atexit(at_exit) };
}

/// After a failed exec: resume recording, with the flusher thread that the exec's
/// last pass stopped started again at once (a child whose exec failed often only calls
/// `_exit(127)`, whose hand-off needs a running flusher: `abnormal_end`).
pub fn resume_after_failed_exec() {
    EXITING.store(false, Ordering::Release);
    sink::restart_process();
    crate::process_end::reset_last_pass();
    state::set_phase(phase::ACTIVE);
    // Starts nothing while the old flusher runs: it goes on, even if it was leaving its
    // loop (see `flusher::run`, whose store and loads pair with this fence and swap).
    core::sync::atomic::fence(Ordering::SeqCst);
    start_flusher();
}

/// Used by `attach` (late attach): fixes the configuration from the attach request
/// before anything read the environment. False when it was already fixed.
pub fn set_config(c: Config) -> bool {
    config::set(c)
}

/// Used by `attach`: turns recording on now, the first time through the normal start-up,
/// later back from [`state::turn_off`] (the queue and fork/exit handlers already exist).
pub fn activate() -> bool {
    match state::phase() {
        phase::ACTIVE => true,
        phase::OFF
            if state::SHARED_QUEUE.capacity() > 1 && config::get().sink != SinkKind::None =>
        {
            // A new attach: its stream starts now (the last one was closed at detach).
            state::stamp_image_start();
            EXITING.store(false, Ordering::Release);
            crate::process_end::reset_last_pass();
            state::set_phase(phase::ACTIVE);
            true
        }
        phase::OFF => false,
        _ => init(),
    }
}

/// Takes the image's start stamp when the shim is loaded (by LD_PRELOAD at start-up,
/// or by `memwatch attach`'s dlopen): before any event of the image, whatever records
/// first (a hooked call, a PJRT entry whose start time is read before the record is
/// begun). Two clock reads; nothing else starts here.
extern "C" fn stamp_at_load() {
    crate::panic_guard::catch(state::stamp_image_start);
}

#[used]
#[link_section = ".init_array"]
static STAMP_IMAGE_START_AT_LOAD: extern "C" fn() = stamp_at_load;
