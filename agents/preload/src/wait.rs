//! Waiting, inside a hooked call, for another thread to finish a one-time set-up.
//!
//! Owns one rule for every such wait in the shim: yield first (set-up usually takes
//! micro- to milliseconds), then sleep in short naps, and give up after a deadline so a
//! stuck set-up can never hang the program. A count of `sched_yield`s is no bound in
//! time either way: a yield returns at once when the waiter has a core to itself (20,000
//! of them passed in a few ms while the other thread was still mapping memory), and
//! hands the core away for a whole time slice when it does not.

/// Longest any hooked call waits for another thread's set-up (the shim's start-up, the
/// PJRT table build); past it the call goes on without (unrecorded, never hung).
pub const SET_UP_MAX_NS: u64 = 5_000_000_000;
/// How long the wait yields before it starts sleeping.
const YIELD_NS: u64 = 200_000;
/// One nap once yielding is over.
const NAP_NS: i64 = 50_000;

/// Waits until `done()` holds or `max_ns` have passed; returns `done()`'s last value.
/// Both phases are bounded by the clock, not by a count: on a loaded machine each
/// `sched_yield` may hand the core away for a whole time slice. Keeps the thread's errno,
/// and sleeps with a raw system call, which (unlike glibc's `nanosleep`) is not a
/// thread-cancellation point.
pub fn wait_until(done: impl Fn() -> bool, max_ns: u64) -> bool {
    if done() {
        return true;
    }
    // SAFETY: this thread's errno location.
    let errno = unsafe { *libc::__errno_location() };
    let start = crate::clock::monotonic_ns();
    let ok = loop {
        if done() {
            break true;
        }
        let waited = crate::clock::monotonic_ns().wrapping_sub(start);
        if waited >= max_ns {
            break done();
        }
        if waited < YIELD_NS {
            // SAFETY: plain system call.
            unsafe { libc::sched_yield() };
            continue;
        }
        let nap = libc::timespec {
            tv_sec: 0,
            tv_nsec: NAP_NS,
        };
        // SAFETY: raw nanosleep with a valid request and no remainder pointer.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &nap,
                core::ptr::null_mut::<libc::timespec>(),
            )
        };
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn waits_past_the_yields_for_a_slow_set_up() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(100));
                flag.store(true, Ordering::Release);
            })
        };
        // The set-up takes 100 ms, far past the yields (0.2 ms): the wait goes on napping
        // until it is done (the deadline, generous here, only catches a hang).
        assert!(wait_until(|| flag.load(Ordering::Acquire), 120_000_000_000));
        setter.join().unwrap();
    }

    #[test]
    fn gives_up_at_the_deadline_and_keeps_errno() {
        // The predicate notes the wait's own clock at each look: the wait gives up only
        // once that clock is past the deadline, whatever the machine's load (the deadline
        // holds even when every yield hands the core away for a whole time slice; a count
        // of yields was no bound). A generous deadline on the whole only catches a hang.
        let (done, gave_up) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: this thread's errno location.
            unsafe { *libc::__errno_location() = libc::EAGAIN };
            let looks = std::cell::RefCell::new(Vec::new());
            let start = crate::clock::monotonic_ns();
            let ok = wait_until(
                || {
                    looks.borrow_mut().push(crate::clock::monotonic_ns());
                    false
                },
                20_000_000,
            );
            // SAFETY: as above.
            let errno = unsafe { *libc::__errno_location() };
            let _ = done.send((ok, start, looks.into_inner(), errno));
        });
        let (ok, start, looks, errno) = gave_up
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("wait_until hung past its deadline");
        assert!(!ok);
        let last = *looks.last().expect("the predicate was asked");
        assert!(last - start >= 20_000_000, "gave up before the deadline");
        assert_eq!(errno, libc::EAGAIN);
    }
}
