//! The fault switch: makes memwatch's own bookkeeping panic, to prove that a bug in it
//! never reaches the program (every exported function catches it: `panic_guard`).
//!
//! `MEMWATCH_FAULT=panic-before-call`: every hooked call, `dlsym` of a hooked name and
//! wrapped PJRT entry panics in memwatch's part before the real function is called;
//! `panic-after-call`: after it returned, while its event is being queued. Read once
//! at start-up (`config`). Any other value, or none, changes nothing; with the switch
//! off the hot path pays nothing for it (its bits ride on loads the hot path makes
//! anyway). A testing aid only: the program must behave exactly as without the shim
//! either way (`tests/capture/lookups.rs`, `tests/pjrt.rs`), while nothing is recorded.

use super::state;
use crate::config::Fault;

/// Arms the switch (`lifecycle`, at start-up).
pub(crate) fn configure(f: Fault) {
    state::set_fault(f);
}

/// A panic standing in for a bug in memwatch's bookkeeping before the real call.
#[cold]
#[inline(never)]
pub fn panic_before_call() -> ! {
    panic!("memwatch fault switch: panic before the real call")
}

/// A panic standing in for a bug in memwatch's bookkeeping after the real call.
#[cold]
#[inline(never)]
pub fn panic_after_call() -> ! {
    panic!("memwatch fault switch: panic after the real call")
}

/// For the paths that are not the per-call hot path (`dlsym`, PJRT entries): panics
/// when the switch asks for a fault before the real call.
#[inline]
pub fn check_before_call() {
    if state::fault() == Fault::PanicBeforeCall {
        panic_before_call();
    }
}

/// Same, after the real call.
#[inline]
pub fn check_after_call() {
    if state::fault() == Fault::PanicAfterCall {
        panic_after_call();
    }
}
