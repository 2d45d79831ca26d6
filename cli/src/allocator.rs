//! The `memwatch` binary's heap: mimalloc as the global allocator, and its settings for
//! the commands that serve for days (`serve`, `agent`), chosen before they allocate.
//!
//! mimalloc because reading a PyTorch snapshot makes and frees a few small objects per
//! pickle opcode, and glibc's malloc/free was a fifth of its instructions. (The shim, a
//! separate cdylib inside the watched program, keeps that program's allocator.)

use std::ffi::OsStr;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (v3's `mi_option_e`), in milliseconds.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The first argument names a command that holds memory for days: the daemon and the
/// node agent, whose resident memory has a stated bound (daemon/README.md).
fn long_running(command: Option<&OsStr>) -> bool {
    command.is_some_and(|c| c == "serve" || c == "agent")
}

/// Settings for `command` (the first argument), before anything else allocates much.
///
/// For the long-running commands, memory a request or a batch freed goes back to the
/// system at once (purge delay 0, not mimalloc's default of a second). Under the
/// daemon's loads (issue 33: 3M never-freed allocations, 8 × 59 MiB batches at once,
/// 70,000 open runs) the default kept 541, 459 and 115 MiB resident at the peak, over
/// the 512 MiB bound for the first; this keeps 423, 357 and 81 MiB
/// (bench/daemon-memory.sh). Short commands keep the default, which is faster for them.
pub fn tune_for(command: Option<&OsStr>) {
    if !long_running(command) {
        return;
    }
    // SAFETY: mi_option_set_default only stores an option value; called on the main
    // thread before any other thread exists (it is not thread-safe). A default, so that
    // MIMALLOC_PURGE_DELAY in the environment still wins.
    unsafe {
        libmimalloc_sys::mi_option_set_default(PURGE_DELAY, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_long_running_commands_are_tuned() {
        assert!(long_running(Some(OsStr::new("serve"))));
        assert!(long_running(Some(OsStr::new("agent"))));
        for c in ["report", "run", "import", "--help", "servex"] {
            assert!(!long_running(Some(OsStr::new(c))), "{c}");
        }
        assert!(!long_running(None));
    }

    #[test]
    fn the_option_numbers_are_mimallocs() {
        // SAFETY: reading options is thread-safe.
        let (delay, decommits) = unsafe {
            (
                libmimalloc_sys::mi_option_get(PURGE_DELAY),
                libmimalloc_sys::mi_option_get(5),
            )
        };
        // mimalloc v3's defaults: purge_delay 1000 ms, purge_decommits 1. A shifted
        // numbering would read another option's value.
        assert_eq!((delay, decommits), (1000, 1));
    }
}
