//! The last pass of a process image: everything queued is drained and `process_end`
//! written, once, whoever asks first (the exit handler, an exec, or the flusher for a
//! thread ending the process with `abort` / `_exit`). Recording is off afterwards.

use crate::record::state::{self, phase, EXITING};
use crate::record::thread_state;
use core::sync::atomic::{AtomicBool, Ordering};

/// Set by the [`final_flush`] that writes this image's `process_end`.
static FINAL_PASS_TAKEN: AtomicBool = AtomicBool::new(false);

/// How long the last pass may take in all: waiting for the sink lock, opening the
/// sink and writing. Nothing extends it (see `sink::last_pass`).
pub const LAST_PASS_NS: u64 = 2_000_000_000;

/// Drains everything, writes `process_end(exit_code)`, and turns recording off, within
/// [`LAST_PASS_NS`]. Used at exit, before exec and for an abnormal end.
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
    crate::sink::last_pass(exit_code, LAST_PASS_NS);
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
