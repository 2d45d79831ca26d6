//! The last pass of a process image: everything queued is drained and `process_end`
//! written, once, whoever asks first (the exit handler, an exec, or the flusher for a
//! thread ending the process with `abort` / `_exit`). Recording is off afterwards.

use crate::record::state::{self, phase, EXITING};
use crate::record::thread_state;
use core::sync::atomic::{AtomicBool, Ordering};

/// Set by the [`final_flush`] that writes this image's `process_end`.
static FINAL_PASS_TAKEN: AtomicBool = AtomicBool::new(false);

/// Drains everything, writes `process_end(exit_code)`, and turns recording off.
/// Bounded wait for the sink lock (2 s). Used at exit, before exec and for an abnormal
/// end.
pub fn final_flush(exit_code: i32) {
    if state::phase() != phase::ACTIVE || !state::is_this_process() {
        return;
    }
    // One last pass per image: an exit() and a handed-off abort racing each other
    // both got past the check above.
    if FINAL_PASS_TAKEN.swap(true, Ordering::AcqRel) {
        return;
    }
    EXITING.store(true, Ordering::Release);
    let was_internal = thread_state::set_guard(true);
    crate::sink::flush_locked(true, exit_code, 2_000_000_000);
    thread_state::set_guard(was_internal);
    state::turn_off();
}

/// The image goes on (a failed exec, a new attach): a later last pass is written again.
pub fn reset_last_pass() {
    FINAL_PASS_TAKEN.store(false, Ordering::Release);
}

/// A forked child has its own last pass to write.
pub fn reset_in_child() {
    FINAL_PASS_TAKEN.store(false, Ordering::Release);
}
