//! The libraries the program looked hooked names up in, remembered as one address in
//! each (an address, not a handle: a handle dies with `dlclose`, an address is checked
//! with `dladdr` first), and finding a real function in them: the fallback for a library
//! opened `RTLD_LOCAL` whose own internal references bound to the shim's exports, where
//! `dlsym(RTLD_NEXT)` cannot find the real function. No reference to a library is kept
//! (each is opened with `RTLD_NOLOAD` and closed again). A leaf: it imports only `real`.

use crate::real::real_dlsym;
use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// Addresses the program's `dlsym` returned for hooked names, one per library.
static ANCHORS: [AtomicPtr<c_void>; 16] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 16];

/// The load base of the object containing `p` (NULL when none).
fn object_base(p: *mut c_void) -> *mut c_void {
    // SAFETY: dladdr only inspects the loader's tables.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p, &mut info) == 0 {
            return core::ptr::null_mut();
        }
        info.dli_fbase
    }
}

/// Remembers the library `handle` gave `p` for a hooked name (not the global scope).
pub fn remember_library(handle: *mut c_void, p: *mut c_void) {
    if handle.is_null() || handle == libc::RTLD_NEXT || handle == libc::RTLD_DEFAULT {
        return;
    }
    let base = object_base(p);
    if base.is_null() {
        return;
    }
    for slot in ANCHORS.iter() {
        let cur = slot.load(Ordering::Acquire);
        if cur.is_null() {
            if slot
                .compare_exchange(
                    core::ptr::null_mut(),
                    p,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return;
            }
            continue;
        }
        if object_base(cur) == base {
            return;
        }
    }
}

/// Looks `name` up in the libraries the program looked hooked names up in (those still
/// loaded, each opened with RTLD_NOLOAD and closed again); skips `not` (our wrapper).
///
/// # Safety
/// `name` must be NUL-terminated.
pub unsafe fn lookup_in_known_handles(name: *const c_char, not: *mut c_void) -> *mut c_void {
    // SAFETY: `dladdr` / `dlopen(RTLD_NOLOAD)` / `dlsym` on addresses we remembered and a NUL-terminated name (contract above); the handle is closed again.
    unsafe {
        for slot in ANCHORS.iter() {
            let a = slot.load(Ordering::Acquire);
            if a.is_null() {
                break;
            }
            let mut info: libc::Dl_info = core::mem::zeroed();
            if libc::dladdr(a, &mut info) == 0 || info.dli_fname.is_null() {
                continue;
            }
            let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                continue;
            }
            let p = real_dlsym()(h, name);
            crate::real::real_dlclose()(h);
            if !p.is_null() && p != not {
                return p;
            }
        }
        core::ptr::null_mut()
    }
}
