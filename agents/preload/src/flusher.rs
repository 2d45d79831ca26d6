//! The one background thread per process that drains the rings into the sink.
//!
//! Owns the polling loop: drain, then sleep 1 ms while events flow (100 us when a pass
//! drained more than a quarter of a thread's ring, so a thread making millions of calls
//! a second does not fill its ring between passes), backing off to 20 ms when idle. It
//! never records events itself (its reentrancy guard is always set) and stops when the
//! process exits (the exit handler does the last drain, or this thread does it for a
//! thread ending the process through abort / _exit: `abnormal_end`). It never keeps the
//! process alive: when every other thread has ended (the main thread called
//! pthread_exit last), it ends too, and with it the process.

use crate::record::{state, thread_state};
use crate::sink;
use core::sync::atomic::Ordering;

/// The flusher thread's body. A panic in a pass (a bug in memwatch) ends recording for
/// the rest of the process: the sink lock is released on the way out (`SinkLock`),
/// queued events are lost, and a thread waiting for a last pass stops waiting.
pub fn run() {
    thread_state::mark_internal_thread();
    if crate::panic_guard::catch(drain_until_done).is_none() {
        state::turn_off();
        state::FLUSHER_RUNNING.store(false, Ordering::Release);
    }
}

fn drain_until_done() {
    crate::abnormal_end::flusher_started();
    loop {
        if poll_until_stopped() == Stop::ForGood {
            state::FLUSHER_RUNNING.store(false, Ordering::Release);
            return;
        }
        state::FLUSHER_RUNNING.store(false, Ordering::SeqCst);
        // Recording may have resumed while this loop was ending (an exec that failed
        // right after its last pass): then this thread goes on, unless a new flusher was
        // started meanwhile. The fence pairs with the one in `lifecycle`'s
        // `resume_after_failed_exec`: one of the two sees the other's store, so a
        // flusher always runs then.
        core::sync::atomic::fence(Ordering::SeqCst);
        if state::EXITING.load(Ordering::Acquire)
            || !state::is_active()
            || state::FLUSHER_RUNNING.swap(true, Ordering::AcqRel)
        {
            return;
        }
    }
}

#[derive(PartialEq)]
enum Stop {
    /// Recording stopped (exit, exec, turned off).
    Recording,
    /// The process is ending (an abort / _exit hand-off, or its last thread is ours).
    ForGood,
}

/// Drains and sleeps until recording stops or the process ends.
fn poll_until_stopped() -> Stop {
    let mut idle_ns = 1_000_000u64;
    let mut idle_since_check_ns = 0u64;
    let busy = crate::config::get().buffer_events / 4;
    while !state::EXITING.load(Ordering::Acquire) && state::is_active() {
        if let Some(code) = crate::abnormal_end::requested_code() {
            // A thread is ending the process without exit() (abort, _exit): the last
            // pass, as the exit handler would have written it.
            crate::process_end::final_flush(code);
            crate::abnormal_end::last_pass_written();
            return Stop::ForGood;
        }
        let n = sink::flush_locked(false, 0, 50_000_000);
        crate::pjrt::sample::tick();
        idle_ns = if n > busy {
            100_000
        } else if n > 0 {
            1_000_000
        } else {
            (idle_ns * 2).min(20_000_000)
        };
        if n == 0 {
            idle_since_check_ns += idle_ns;
            if idle_since_check_ns >= LAST_THREAD_CHECK_NS {
                idle_since_check_ns = 0;
                if only_thread_left() {
                    // The program's last thread ended with pthread_exit: a process does
                    // not outlive its threads, so neither may ours. Returning ends this
                    // thread, the last, which ends the process as exit(0) would (the
                    // exit handlers write the last frames).
                    return Stop::ForGood;
                }
            }
        }
        crate::clock::sleep_ns(idle_ns);
    }
    Stop::Recording
}

/// How often (in idle time) the flusher looks whether it is the process's last thread.
const LAST_THREAD_CHECK_NS: u64 = 100_000_000;

/// Whether every thread but this one has ended. Cheap in the usual case: one small read
/// of the main thread's state, which is `Z` only once it called pthread_exit.
fn only_thread_left() -> bool {
    let pid = state::pid();
    if thread_state(pid, pid) != Some(b'Z') {
        return false;
    }
    // SAFETY: plain syscall.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let mut buf = [0u8; 64];
    let Some(dir) = task_dir(pid, &mut buf) else {
        return false;
    };
    // SAFETY: opendir/readdir/closedir on a NUL-terminated path; entries read in place.
    unsafe {
        let d = libc::opendir(dir);
        if d.is_null() {
            return false;
        }
        let mut others_alive = false;
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            let name = core::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            let Some(tid) = parse_u32(name) else { continue };
            if tid == me || tid == pid {
                continue;
            }
            if !matches!(thread_state(pid, tid), Some(b'Z') | Some(b'X') | None) {
                others_alive = true;
                break;
            }
        }
        libc::closedir(d);
        !others_alive
    }
}

fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u32, |a, &c| {
        c.is_ascii_digit()
            .then(|| a.checked_mul(10)?.checked_add(u32::from(c - b'0')))
            .flatten()
    })
}

/// Writes `/proc/PID/task` NUL-terminated into `buf`.
fn task_dir(pid: u32, buf: &mut [u8; 64]) -> Option<*const libc::c_char> {
    use std::io::Write;
    let mut w = std::io::Cursor::new(&mut buf[..]);
    write!(w, "/proc/{pid}/task\0").ok()?;
    Some(buf.as_ptr().cast())
}

/// The state letter of a thread (`R`, `S`, `Z`…), from /proc/PID/task/TID/stat.
fn thread_state(pid: u32, tid: u32) -> Option<u8> {
    use std::io::Write;
    let mut path = [0u8; 64];
    let mut w = std::io::Cursor::new(&mut path[..]);
    write!(w, "/proc/{pid}/task/{tid}/stat\0").ok()?;
    let mut buf = [0u8; 512];
    // SAFETY: open/read/close on a NUL-terminated path into a local buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    // "tid (comm) S ...": the state follows the last ')'.
    let close = text.iter().rposition(|&c| c == b')')?;
    text.get(close + 2).copied()
}
