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

use crate::real::{libc_fn, LibcFn};
use crate::record::state;
use core::ffi::{c_char, c_int, c_void};

type Argv = *const *const c_char;

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

fn after_failure(flushed: bool) {
    if flushed {
        // SAFETY: errno location of this thread.
        let e = unsafe { *libc::__errno_location() };
        crate::lifecycle::resume_after_failed_exec();
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = e };
    }
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
            let f = libc_fn($real);
            if f.is_null() {
                *libc::__errno_location() = libc::ENOSYS;
                return -1;
            }
            let flushed = before();
            let r = core::mem::transmute::<*mut c_void, F>(f)($($a),*);
            after_failure(flushed);
            r
        }
    };
}

exec_hook!(execve, LibcFn::Execve, (path: *const c_char, argv: Argv, envp: Argv));
exec_hook!(execv, LibcFn::Execv, (path: *const c_char, argv: Argv));
exec_hook!(execvp, LibcFn::Execvp, (file: *const c_char, argv: Argv));
exec_hook!(execvpe, LibcFn::Execvpe, (file: *const c_char, argv: Argv, envp: Argv));
