//! The one background thread per process that drains the ring into the sink.
//!
//! Owns the polling loop: drain, then sleep 1 ms while events flow (100 us when a pass
//! drained more than a quarter of a thread's ring, so a thread making millions of calls
//! a second does not fill its ring between passes), backing off to 20 ms when idle. It never records events itself (its reentrancy guard is always set) and
//! stops when the process exits (the exit handler does the last drain).

use crate::{rt, sink};
use core::sync::atomic::Ordering;

pub fn run() {
    rt::mark_internal_thread();
    let mut idle_ns = 1_000_000u64;
    let busy = rt::config().buffer_events / 4;
    while !rt::EXITING.load(Ordering::Acquire) && rt::is_active() {
        let n = sink::flush_locked(false, 0, 50_000_000);
        crate::pjrt::tick();
        idle_ns = if n > busy {
            100_000
        } else if n > 0 {
            1_000_000
        } else {
            (idle_ns * 2).min(20_000_000)
        };
        sink::sleep_ns(idle_ns);
    }
    rt::FLUSHER_RUNNING.store(false, Ordering::Release);
}
