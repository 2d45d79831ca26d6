//! The dynamic-lookup paths: `dlsym`, `dlvsym` and the GetProcAddress family.
//!
//! Owns handing out wrappers for hooked names that a program looks up at run time
//! (XLA `dlopen`s libcuda / libamdhip64 and `dlsym`s every entry point; cudart gets the
//! driver's functions through `cuGetProcAddress`). The real pointer the library gave is
//! remembered as the hook's real function and the wrapper is returned instead; when a
//! different real function is already remembered for that name, the real pointer is
//! returned unwrapped (never a behaviour change, only a missed record).
//!
//! `dlsym` / `dlvsym` are entered through naked trampolines: `RTLD_NEXT` lookups jump
//! straight to libc's function, so libc still sees the program's own return address and
//! "next" keeps its meaning for the caller.

use crate::hooks::{resolve, HookInfo, HOOKS};
use crate::panic_guard;
use crate::real::{real_dlsym, real_dlvsym};
use crate::record::state;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

/// Index of the hook whose exported name is exactly `name`.
fn lookup_exact(name: &[u8]) -> Option<usize> {
    match name.first() {
        Some(b'h') | Some(b'c') => {}
        _ => return None,
    }
    HOOKS.iter().position(|h| h.name().as_bytes() == name)
}

/// What to give the program for hook `h` when its library handed out `p`.
fn wrap_result(h: &HookInfo, p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        return p;
    }
    if p == h.wrapper() {
        // Our own export came back (RTLD_DEFAULT or the global scope): without the shim
        // the lookup finds the runtime's function, or nothing when there is none. Checked
        // whether or not recording is on: "is CUDA here?" probes must get the answer
        // they get without the shim.
        return if resolve_index(h).is_null() {
            core::ptr::null_mut()
        } else {
            p
        };
    }
    if !state::wrap_allowed(h.family) {
        return p;
    }
    if h.offer_real(p) {
        h.wrapper()
    } else {
        p
    }
}

fn resolve_index(h: &HookInfo) -> *mut c_void {
    HOOKS
        .iter()
        .position(|x| core::ptr::eq(x, h))
        .map_or(core::ptr::null_mut(), resolve)
}

/// Addresses the program's `dlsym` returned for hooked names, one per library (fallback
/// for finding real functions of libraries opened with RTLD_LOCAL). Addresses, not
/// handles: a handle dies with `dlclose`, an address is checked with `dladdr` first.
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

fn remember_library(handle: *mut c_void, p: *mut c_void) {
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

/// What the program gets for `name` when the library gave `p`: the wrapper for a
/// hooked name (remembering `p` as its real function), `p` otherwise.
///
/// # Safety
/// `name` is NULL or NUL-terminated.
unsafe fn after_lookup(handle: *mut c_void, name: *const c_char, p: *mut c_void) -> *mut c_void {
    if p.is_null() || name.is_null() {
        return p;
    }
    // SAFETY: NUL-terminated (caller's contract).
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    if bytes.first().is_some_and(|c| matches!(c, b'h' | b'c')) {
        crate::record::fault::check_before_call();
    }
    if bytes == b"GetPjrtApi" {
        let r = crate::pjrt::on_lookup(p);
        crate::debug::lookup("dlsym", bytes, if r == p { "real" } else { "wrapped" });
        return r;
    }
    match lookup_exact(bytes).and_then(|i| HOOKS.get(i)) {
        Some(h) => {
            remember_library(handle, p);
            let r = wrap_result(h, p);
            crate::debug::lookup(
                "dlsym",
                bytes,
                if r == h.wrapper() { "wrapped" } else { "real" },
            );
            r
        }
        None => p,
    }
}

/// `dlsym` for every handle but `RTLD_NEXT`: libc's answer, wrapped for a hooked name
/// (memwatch's part caught: on a panic the program gets libc's answer as it is).
///
/// # Safety
/// Same contract as libc's `dlsym`.
unsafe extern "C" fn dlsym_hook(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: the caller's arguments, under libc's contract.
    let p = unsafe { real_dlsym()(handle, name) };
    // SAFETY: `name` is the caller's NUL-terminated name (or NULL).
    panic_guard::catch(|| unsafe { after_lookup(handle, name, p) }).unwrap_or(p)
}

/// `dlvsym` for every handle but `RTLD_NEXT` (see [`dlsym_hook`]).
///
/// # Safety
/// Same contract as libc's `dlvsym`.
unsafe extern "C" fn dlvsym_hook(
    handle: *mut c_void,
    name: *const c_char,
    ver: *const c_char,
) -> *mut c_void {
    // SAFETY: the caller's arguments, under libc's contract.
    let p = unsafe { real_dlvsym()(handle, name, ver) };
    // SAFETY: as in `dlsym_hook`.
    panic_guard::catch(|| unsafe { after_lookup(handle, name, p) }).unwrap_or(p)
}

#[cfg(target_arch = "x86_64")]
mod tramp {
    use super::*;
    use crate::real::{resolve_real_dlsym, resolve_real_dlvsym, REAL_DLSYM, REAL_DLVSYM};

    /// Interposes libc's `dlsym` (see the module docs).
    ///
    /// # Safety
    /// Same contract as libc's `dlsym`.
    #[unsafe(naked)]
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
        core::arch::naked_asm!(
            "cmp rdi, -1",
            "je 2f",
            "jmp {hook}",
            "2:",
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jz 3f",
            "jmp rax",
            "3:",
            "push rdi",
            "push rsi",
            "sub rsp, 8",
            "call {resolve}",
            "add rsp, 8",
            "pop rsi",
            "pop rdi",
            "jmp rax",
            hook = sym dlsym_hook,
            real = sym REAL_DLSYM,
            resolve = sym resolve_real_dlsym,
        )
    }

    /// Interposes libc's `dlvsym` (see the module docs).
    ///
    /// # Safety
    /// Same contract as libc's `dlvsym`.
    #[unsafe(naked)]
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlvsym(
        _handle: *mut c_void,
        _name: *const c_char,
        _version: *const c_char,
    ) -> *mut c_void {
        core::arch::naked_asm!(
            "cmp rdi, -1",
            "je 2f",
            "jmp {hook}",
            "2:",
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jz 3f",
            "jmp rax",
            "3:",
            "push rdi",
            "push rsi",
            "push rdx",
            "call {resolve}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "jmp rax",
            hook = sym dlvsym_hook,
            real = sym REAL_DLVSYM,
            resolve = sym resolve_real_dlvsym,
        )
    }
}

/// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
const PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// After a successful `*GetProcAddress(sym, pfn, version, flags)`: replaces `*pfn` with
/// our wrapper when `sym` names a hooked function. The variant (`_v2`, `_ptsz`, v1) is
/// identified from the returned address (`dladdr`), else from the version and flags
/// as the CUDA headers define them.
///
/// # Safety
/// `sym` NUL-terminated or NULL, `pfn` valid or NULL.
pub unsafe fn wrap_proc(
    fam: crate::config::Family,
    sym: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
) {
    // SAFETY: `sym` NUL-terminated or NULL, `pfn` valid or NULL (contract above), read and written only after the checks below.
    unsafe {
        if sym.is_null() || pfn.is_null() || (*pfn).is_null() || !state::wrap_allowed(fam) {
            return;
        }
        let saved_errno = *libc::__errno_location();
        let name = CStr::from_ptr(sym).to_bytes();
        let p = *pfn;
        let is_candidate = |h: &&HookInfo| h.family == fam && h.base.as_bytes() == name;
        if !HOOKS.iter().any(|h| is_candidate(&h)) {
            if crate::debug::enabled() && name.windows(3).any(|w| w == b"Mem") {
                crate::debug::lookup("getprocaddress", name, "not-hooked");
            }
            return;
        }
        let mut chosen: Option<&HookInfo> = None;
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p, &mut info) != 0 && info.dli_saddr == p && !info.dli_sname.is_null() {
            let exact = CStr::from_ptr(info.dli_sname).to_bytes();
            chosen = HOOKS
                .iter()
                .filter(is_candidate)
                .find(|h| h.name().as_bytes() == exact);
        }
        if chosen.is_none() {
            let want_ptsz = flags & PER_THREAD_DEFAULT_STREAM != 0;
            let ver = ver.max(0) as u32;
            let pick = |ptsz: bool| {
                HOOKS
                    .iter()
                    .filter(is_candidate)
                    .filter(|h| h.is_ptsz() == ptsz && h.min_ver <= ver.max(h.min_ver.min(1)))
                    .filter(|h| h.min_ver <= ver || ver == 0)
                    .max_by_key(|h| h.min_ver)
            };
            chosen = if want_ptsz {
                pick(true).or_else(|| pick(false))
            } else {
                pick(false)
            };
        }
        if let Some(h) = chosen {
            *pfn = wrap_result(h, p);
            let what = if *pfn == h.wrapper() {
                h.name()
            } else {
                "real"
            };
            crate::debug::lookup("getprocaddress", name, what);
        }
        *libc::__errno_location() = saved_errno;
    }
}
