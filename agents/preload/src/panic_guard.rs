//! A bug in memwatch never takes the program down.
//!
//! Owns the rule every exported function follows (the HIP / CUDA wrappers, `dlsym`,
//! `dlvsym`, `dlclose`, the exec and process-end wrappers, the copied PJRT table's
//! entries and the callbacks the shim registers with the plugin, the attach entry
//! points, the fork and exit handlers): memwatch's own work runs inside [`catch`], and
//! when it panics the call goes on as it would without the shim — the real function is
//! called with the caller's arguments (when it was not yet), its result is returned
//! unchanged, errno is what it left, and only the record of that call is lost. A panic
//! must never unwind into C (that aborts the process) and nothing is printed: the
//! shim's panic hook, installed when the shim is loaded, is silent unless
//! `MEMWATCH_DEBUG` is set (then one line on stderr). The fault switch
//! (`record::fault`) exercises all of this in the tests.

use core::panic::AssertUnwindSafe;

/// Runs memwatch's part of a hooked call; `None` when it panicked (the panic is caught
/// here, its state dropped on the way: a [`crate::record::Pending`] clears the
/// reentrancy guard and restores errno).
#[inline(always)]
pub fn catch<R>(f: impl FnOnce() -> R) -> Option<R> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).ok()
}

/// The shim's panic hook: silent (the program's output must not change), one line on
/// stderr with `MEMWATCH_DEBUG`.
fn quiet_hook(info: &std::panic::PanicHookInfo<'_>) {
    if !crate::debug::enabled() {
        return;
    }
    let mut line = [0u8; 256];
    let mut w = std::io::Cursor::new(&mut line[..]);
    let (file, at) = info.location().map_or(("?", 0), |l| (l.file(), l.line()));
    let _ = std::io::Write::write_fmt(
        &mut w,
        format_args!("memwatch: internal panic caught at {file}:{at}; this call went unrecorded\n"),
    );
    let n = w.position() as usize;
    // SAFETY: writes bytes of a local buffer to stderr.
    unsafe { libc::write(2, line.as_ptr().cast(), n) };
}

/// Installs [`quiet_hook`] when the shim is loaded (the shim's panic hook is its own:
/// a cdylib carries its own copy of the standard library, so the program's hook, if it
/// is a Rust program, is untouched).
extern "C" fn install_quiet_hook() {
    // Nothing can panic in here; guard anyway, a constructor must not unwind.
    let _ = catch(|| std::panic::set_hook(Box::new(quiet_hook)));
}

// Not in unit-test builds: the test harness reports panics through the default hook.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INSTALL_QUIET_HOOK_AT_LOAD: extern "C" fn() = install_quiet_hook;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_none_and_a_value_passes_through() {
        assert_eq!(catch(|| 7), Some(7));
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(quiet_hook));
        let r: Option<()> = catch(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(r, None);
    }
}
