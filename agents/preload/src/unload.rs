//! The `dlclose` hook: a GPU runtime being unloaded.
//!
//! Owns what happens when the program `dlclose`s a library the shim took real functions
//! from (XLA and test programs load libcuda / libamdhip64 with `dlopen`). Before the
//! real `dlclose`, everything queued is flushed while the runtime is still mapped, so
//! the devices seen so far are described (`device_info`; the exit-time flush never asks
//! a runtime, which may be torn down by then). After it, the real-function slots that
//! pointed into the library are forgotten when the library is really gone (`dladdr` no
//! longer finds it), so no wrapper ever calls into unmapped code; a later call finds the
//! function again (or returns "not initialised"). The result and errno of `dlclose` are
//! the real call's; `dlerror` state is untouched after it (only `dladdr` runs there).

use crate::hooks::HOOKS;
use crate::real::real_dlclose;
use crate::record::{state, thread_state};
use core::ffi::{c_char, c_int, c_void, CStr};

/// Longest library path compared (longer names are not matched: the handle passes
/// through untouched).
const MAX_NAME: usize = 512;

/// glibc's `RTLD_DI_LINKMAP` request for `dlinfo`.
const RTLD_DI_LINKMAP: c_int = 2;

extern "C" {
    fn dlinfo(handle: *mut c_void, request: c_int, info: *mut c_void) -> c_int;
}

/// The public head of glibc's `struct link_map`.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
}

/// Which hooks hold a real function inside the object named `name`.
fn slots_in(name: &[u8]) -> [u64; 2] {
    let mut set = [0u64; 2];
    for (i, h) in HOOKS.iter().enumerate() {
        let p = h.real();
        if p.is_null() || i >= 128 {
            continue;
        }
        // SAFETY: dladdr only inspects the loader's tables.
        let same = unsafe {
            let mut info: libc::Dl_info = core::mem::zeroed();
            libc::dladdr(p, &mut info) != 0
                && !info.dli_fname.is_null()
                && CStr::from_ptr(info.dli_fname).to_bytes() == name
        };
        if same {
            if let Some(w) = set.get_mut(i / 64) {
                *w |= 1 << (i % 64);
            }
        }
    }
    set
}

/// The path of the object behind a `dlopen` handle, copied into `buf`.
///
/// # Safety
/// `handle` is what the program passes to `dlclose`.
unsafe fn handle_name(handle: *mut c_void, buf: &mut [u8; MAX_NAME]) -> Option<usize> {
    let mut lm: *const LinkMap = core::ptr::null();
    if dlinfo(
        handle,
        RTLD_DI_LINKMAP,
        (&mut lm as *mut *const LinkMap).cast(),
    ) != 0
        || lm.is_null()
        || (*lm).l_name.is_null()
    {
        return None;
    }
    let name = CStr::from_ptr((*lm).l_name).to_bytes();
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    buf.get_mut(..name.len())?.copy_from_slice(name);
    Some(name.len())
}

/// `dlclose` with the runtime bookkeeping above.
///
/// # Safety
/// Same contract as libc's `dlclose`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let real = real_dlclose();
    if handle.is_null()
        || !state::is_active()
        || thread_state::guard_is_set()
        || thread_state::set_in_dlclose(true)
    {
        return real(handle);
    }
    let saved_errno = *libc::__errno_location();
    let mut buf = [0u8; MAX_NAME];
    let matched = match handle_name(handle, &mut buf) {
        Some(n) => {
            let name = buf.get(..n).unwrap_or(&[]);
            (slots_in(name), n)
        }
        None => ([0, 0], 0),
    };
    if matched.0 == [0, 0] {
        thread_state::set_in_dlclose(false);
        *libc::__errno_location() = saved_errno;
        return real(handle);
    }
    // Flush (describing devices) with this thread's calls unrecorded, and hold the sink
    // lock across the real dlclose so the flusher cannot be asking the runtime (holding
    // a reference to it) at that moment.
    let was = thread_state::set_guard(true);
    let locked = crate::sink::flush_keep_lock(500_000_000);
    thread_state::set_guard(was);
    *libc::__errno_location() = saved_errno;
    let r = real(handle);
    let after_errno = *libc::__errno_location();
    let name = buf.get(..matched.1).unwrap_or(&[]);
    let still = slots_in(name);
    for (i, h) in HOOKS.iter().enumerate() {
        let bit = 1u64 << (i % 64);
        let was_in = matched.0.get(i / 64).is_some_and(|w| w & bit != 0);
        let now_in = still.get(i / 64).is_some_and(|w| w & bit != 0);
        if was_in && !now_in {
            h.forget_real();
        }
    }
    if locked {
        crate::sink::unlock_raw();
    }
    thread_state::set_in_dlclose(false);
    *libc::__errno_location() = after_errno;
    r
}
