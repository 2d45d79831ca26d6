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

use crate::hooks::table::HOOKS;
use crate::panic_guard;
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
    // SAFETY: dlinfo with RTLD_DI_LINKMAP writes one pointer; the handle is the caller's.
    let found = unsafe {
        dlinfo(
            handle,
            RTLD_DI_LINKMAP,
            (&mut lm as *mut *const LinkMap).cast(),
        )
    } == 0;
    // SAFETY: a non-null link map from the loader, whose `l_name` is NULL or a
    // NUL-terminated string.
    let name = unsafe {
        if !found || lm.is_null() || (*lm).l_name.is_null() {
            return None;
        }
        CStr::from_ptr((*lm).l_name).to_bytes()
    };
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    buf.get_mut(..name.len())?.copy_from_slice(name);
    Some(name.len())
}

/// A library the shim took real functions from, being unloaded: its name, which hooks
/// pointed into it, and the sink lock held across the real `dlclose` (so the flusher
/// cannot be asking the runtime, holding a reference to it, at that moment). Dropping it
/// (also while a panic unwinds) releases the lock and the thread's in-dlclose mark.
struct Unloading {
    name: [u8; MAX_NAME],
    name_len: usize,
    slots: [u64; 2],
    _lock: Option<crate::sink::SinkLock>,
}

impl Drop for Unloading {
    fn drop(&mut self) {
        thread_state::set_in_dlclose(false);
    }
}

impl Unloading {
    /// What to do before the real `dlclose` of `handle`; `None` when it is none of the
    /// shim's business (the thread's in-dlclose mark is then left as it was).
    ///
    /// # Safety
    /// `handle` is what the program passes to `dlclose`.
    unsafe fn begin(handle: *mut c_void) -> Option<Unloading> {
        if handle.is_null()
            || !state::is_active()
            || thread_state::guard_is_set()
            || thread_state::set_in_dlclose(true)
        {
            return None;
        }
        let mut u = Unloading {
            name: [0; MAX_NAME],
            name_len: 0,
            slots: [0, 0],
            _lock: None,
        };
        // SAFETY: the caller's handle.
        u.name_len = unsafe { handle_name(handle, &mut u.name) }.unwrap_or(0);
        if u.name_len == 0 {
            return None; // dropping `u` clears the mark
        }
        u.slots = slots_in(u.name());
        if u.slots == [0, 0] {
            return None;
        }
        // Flush (describing devices) with this thread's calls unrecorded.
        let was = thread_state::set_guard(true);
        u._lock = crate::sink::flush_keep_lock(500_000_000);
        thread_state::set_guard(was);
        Some(u)
    }

    fn name(&self) -> &[u8] {
        self.name.get(..self.name_len).unwrap_or(&[])
    }

    /// After the real `dlclose`: forgets the real-function slots that pointed into the
    /// library when it is really gone.
    fn forget_unloaded(&self) {
        let still = slots_in(self.name());
        for (i, h) in HOOKS.iter().enumerate() {
            let bit = 1u64 << (i % 64);
            let was_in = self.slots.get(i / 64).is_some_and(|w| w & bit != 0);
            let now_in = still.get(i / 64).is_some_and(|w| w & bit != 0);
            if was_in && !now_in {
                h.forget_real();
            }
        }
    }
}

/// `dlclose` with the runtime bookkeeping above. The real call runs once, outside
/// memwatch's caught parts; its result and errno are returned unchanged.
///
/// # Safety
/// Same contract as libc's `dlclose`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let real = real_dlclose();
    // SAFETY: this thread's errno location.
    let errno = || unsafe { &mut *libc::__errno_location() };
    let saved_errno = *errno();
    // SAFETY: the caller's handle.
    let unloading = panic_guard::catch(|| unsafe { Unloading::begin(handle) }).flatten();
    *errno() = saved_errno;
    // SAFETY: the caller's handle, under the caller's contract.
    let r = unsafe { real(handle) };
    if let Some(u) = unloading {
        let after_errno = *errno();
        panic_guard::catch(move || u.forget_unloaded());
        *errno() = after_errno;
    }
    r
}
