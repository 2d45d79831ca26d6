//! The `dlsym` / `dlvsym` hooks.
//!
//! Owns handing out wrappers for hooked names that a program looks up with `dlsym` at
//! run time (XLA `dlopen`s libcuda / libamdhip64 and `dlsym`s every entry point), and
//! `GetPjrtApi` to the PJRT interposition (`pjrt`). The real pointer the library gave is
//! remembered as the hook's real function and the wrapper is returned instead
//! (`hooks::wrap_result`, the rule the GetProcAddress hooks use too); the library is
//! remembered for finding real functions later (`known_libs`).
//!
//! `dlsym` / `dlvsym` are entered through naked trampolines: `RTLD_NEXT` lookups jump
//! straight to libc's function, so libc still sees the program's own return address and
//! "next" keeps its meaning for the caller.

use crate::hooks::{lookup_exact, wrap_result, HOOKS};
use crate::known_libs::remember_library;
use crate::lifecycle::Lifecycle;
use crate::panic_guard;
use crate::real::{real_dlsym, real_dlvsym};
use core::ffi::{c_char, c_void, CStr};

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
            let r = wrap_result::<Lifecycle>(h, p);
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
