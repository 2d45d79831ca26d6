//! exec: deliver what was recorded before the process image is replaced.
//!
//! Owns the `execve` / `execv` / `execvp` / `execvpe` wrappers. Before the real call the
//! ring is drained and `process_end` (exit code -1) written; the new image, still
//! preloaded, announces itself with a fresh `process_start` (same pid). If exec fails,
//! recording resumes and the old image is announced again. In a `vfork` child (the
//! parent's memory, another pid) the wrappers only call the real function. The
//! variadic `execl*` functions are not wrapped (Rust cannot define C variadics on
//! stable): events queued in the last flush interval (≤ 20 ms) before an `execl*` are
//! lost.

use crate::panic_guard;
use crate::real::{libc_fn, LibcFn};
use crate::record::state;
use core::ffi::{c_char, c_int, c_void};

type Argv = *const *const c_char;

/// Before the real exec: the last pass of this image. True when it was written.
fn before() -> bool {
    // A vfork child shares the parent's memory (and so its rings, sink and flusher
    // state) but not its pid: its exec is none of the shim's business. Python's
    // subprocess tries one exec per PATH entry there.
    if state::is_active() && state::is_this_process() {
        crate::process_end::final_flush(memwatch_wire::ProcessEnd::UNKNOWN_EXIT);
        true
    } else {
        false
    }
}

/// The exec failed (it returned): recording resumes under the old image's anchors.
fn after_failure() {
    crate::lifecycle::resume_after_failed_exec();
}

macro_rules! exec_hook {
    ($name:ident, $real:expr, ($($a:ident: $t:ty),*)) => {
        /// Wraps libc's function of the same name (see the module docs).
        ///
        /// # Safety
        /// Same contract as libc's function.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            type F = unsafe extern "C" fn($($t),*) -> c_int;
            // SAFETY: this thread's errno location.
            let errno = || unsafe { &mut *libc::__errno_location() };
            let f = libc_fn($real);
            if f.is_null() {
                *errno() = libc::ENOSYS;
                return -1;
            }
            let saved = *errno();
            let flushed = panic_guard::catch(before).unwrap_or(false);
            *errno() = saved;
            // SAFETY: libc's function of this name and signature; the caller's arguments.
            let r = unsafe { core::mem::transmute::<*mut c_void, F>(f)($($a),*) };
            if flushed {
                let e = *errno();
                panic_guard::catch(after_failure);
                *errno() = e;
            }
            r
        }
    };
}

exec_hook!(execve, LibcFn::Execve, (path: *const c_char, argv: Argv, envp: Argv));
exec_hook!(execv, LibcFn::Execv, (path: *const c_char, argv: Argv));
exec_hook!(execvp, LibcFn::Execvp, (file: *const c_char, argv: Argv));
exec_hook!(execvpe, LibcFn::Execvpe, (file: *const c_char, argv: Argv, envp: Argv));
