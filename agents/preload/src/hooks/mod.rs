//! The wrappers: one exported C function per intercepted API.
//!
//! Owns the exported wrappers of every hooked function (`list` names them, `table`
//! holds their real-function slots), finding a wrapper's real function ([`resolve`]),
//! and which wrapper a program is given for a hooked name it looks up at run time
//! ([`wrap_result`]: for `dlsym`, in `dl`, and for the GetProcAddress family here,
//! through which cudart gets the driver's functions). When a different real function
//! is already remembered for that name, the real pointer is returned unwrapped (never a
//! behaviour change, only a missed record). Every wrapper calls the real function with
//! its arguments untouched and returns its result untouched; out-pointers are only read
//! after a successful call; errno is restored to what the real call left.
//!
//! What each wrapper records is the hot path's (`record`); the wrappers sit on top of
//! it and of `lifecycle`, whose start-up (`Lifecycle`) they hand to it.

use crate::config::Family;
use crate::known_libs::lookup_in_known_handles;
use crate::lifecycle::Lifecycle;
use crate::panic_guard;
use crate::real::real_dlsym;
use crate::record::{self, state, thread_state, Pending};
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};
use memwatch_wire::{Api, MemKind};

mod list;
pub mod table;

pub use table::{HookInfo, H, HOOKS};

/// Returned when the real function cannot be found (hipErrorNotInitialized,
/// CUDA_ERROR_NOT_INITIALIZED and cudaErrorInitializationError are all 3).
const NOT_INITIALIZED: c_int = 3;

#[derive(Clone, Copy)]
struct Wrapper(*const ());
// SAFETY: a function address, immutable.
unsafe impl Sync for Wrapper {}

impl HookInfo {
    /// The exported wrapper of this hook (what the program is given instead of the real
    /// function).
    pub fn wrapper(&self) -> *mut c_void {
        WRAPPERS
            .get(self.idx)
            .map_or(core::ptr::null_mut(), |w| w.0 as *mut c_void)
    }
}

/// The real function of hook `idx`, looked up with `dlsym(RTLD_NEXT)` the first time.
#[inline]
pub fn resolve(idx: usize) -> *mut c_void {
    let p = table::slot(idx);
    if !p.is_null() {
        return p;
    }
    resolve_slow(idx)
}

#[cold]
fn resolve_slow(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let mut p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p.is_null() || p == h.wrapper() {
        // Not in the global scope: a library opened with RTLD_LOCAL whose own internal
        // references bound to our export. Ask the handles the program looked names up in.
        // SAFETY: NUL-terminated name.
        p = unsafe { lookup_in_known_handles(h.sym.as_ptr().cast(), h.wrapper()) };
    }
    if p.is_null() {
        return core::ptr::null_mut();
    }
    h.offer_real(p);
    h.real()
}

/// `*p` as a number after a successful call (`r == 0`), else 0.
///
/// # Safety
/// `p` is NULL or valid for reads once the call succeeded (the runtime wrote it).
#[inline]
unsafe fn optr(p: *mut *mut c_void, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: non-null out-pointer the runtime filled (caller's contract).
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// [`optr`] for a `u64` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ou64(p: *mut u64, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p }
    } else {
        0
    }
}

/// [`optr`] for a `u32` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ou32(p: *mut u32, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// [`optr`] for a `usize` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ousize(p: *mut usize, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// Device ordinal from a `hipMemAllocationProp` / `CUmemAllocationProp`
/// (`location.type` at byte 8, `location.id` at byte 12; type 1 = device).
///
/// # Safety
/// `prop` is NULL or points to an allocation property struct (at least 16 bytes).
#[inline]
unsafe fn prop_device(prop: *const c_void, fallback: i32) -> i32 {
    if prop.is_null() {
        return fallback;
    }
    let w = prop as *const i32;
    // SAFETY: bytes 8..16 of the caller's property struct.
    unsafe {
        if *w.add(2) == 1 {
            *w.add(3)
        } else {
            fallback
        }
    }
}

macro_rules! hooks {
    (
        record { $( $fam:ident $api:ident $base:literal $ver:literal
            fn $name:ident($($a:ident: $t:ty),*) |$p:ident, $r:ident| $body:block )* }
        custom { $( $cfam:ident $capi:ident $cbase:literal $cver:literal fn $cname:ident; )* }
    ) => {
        /// The exported wrapper of each hook, in [`HOOKS`] order.
        static WRAPPERS: [Wrapper; H::COUNT as usize] = [
            $( Wrapper($name as *const ()), )*
            $( Wrapper($cname as *const ()), )*
        ];

        // x86-64 Linux: each export is an entry trampoline that saves the program's
        // frame pointer, return address and stack pointer in the thread block (unless a
        // hooked call is already in progress on this thread) and jumps to the wrapper;
        // `record::stack_sample` walks the program's stack from there. Five
        // instructions.
        $(
            /// Interposes the runtime function of the same name (see the module docs).
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            #[unsafe(naked)]
            #[cfg_attr(not(test), no_mangle)]
            #[allow(unused_variables)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                core::arch::naked_asm!(
                    "mov r11, qword ptr [rip + memwatch_thread_state@GOTTPOFF]",
                    "cmp byte ptr fs:[r11 + {guard}], 0",
                    "jne 2f",
                    "mov qword ptr fs:[r11 + {fp}], rbp",
                    "mov r10, qword ptr [rsp]",
                    "mov qword ptr fs:[r11 + {ret}], r10",
                    "lea r10, [rsp + 8]",
                    "mov qword ptr fs:[r11 + {sp}], r10",
                    "2:",
                    "jmp {inner}",
                    guard = const thread_state::OFF_IN_HOOK,
                    fp = const thread_state::OFF_CALLER_FP,
                    ret = const thread_state::OFF_CALLER_RET,
                    sp = const thread_state::OFF_CALLER_SP,
                    inner = sym wrappers::$name,
                )
            }

            /// Interposes the runtime function of the same name (see the module docs).
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                // SAFETY: the caller's arguments, under the runtime function's contract.
                unsafe { wrappers::$name($($a),*) }
            }
        )*

        /// The wrapper bodies (reached through the exports above). Memwatch's part and
        /// the real call run in one caught block; `returned` says whether the real call
        /// was made: when memwatch's part panicked before it, it is made after the
        /// catch, once, with the caller's arguments (`panic_guard`).
        mod wrappers {
            use super::*;
            $(
                /// # Safety
                /// Same contract as the runtime's function of the same name.
                #[allow(unused_variables, unused_unsafe)]
                pub(super) unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                    type F = unsafe extern "C" fn($($t),*) -> c_int;
                    let real = resolve_guarded(H::$name as usize);
                    if real.is_null() {
                        return NOT_INITIALIZED;
                    }
                    // SAFETY: the real function of this hook has this C signature.
                    let real = unsafe { core::mem::transmute::<*mut c_void, F>(real) };
                    let mut returned: Option<c_int> = None;
                    panic_guard::catch(|| {
                        let Some(mut $p) = record::begin::<Lifecycle>(Family::$fam, Api::$api) else {
                            // SAFETY: the caller's arguments, passed on unchanged.
                            returned = Some(unsafe { real($($a),*) });
                            return;
                        };
                        // SAFETY: as above.
                        let $r = unsafe { real($($a),*) };
                        returned = Some($r);
                        $p.finished($r);
                        // SAFETY: the body reads out-pointers only through `optr` and
                        // friends, after the real call succeeded and when non-null.
                        unsafe { $body }
                        $p.commit();
                    });
                    match returned {
                        Some(r) => r,
                        // SAFETY: memwatch's part panicked before the real call.
                        None => unsafe { real($($a),*) },
                    }
                }
            )*
        }
    };
}

/// [`resolve`], or when memwatch's lookup itself panicked, the next definition of the
/// hook's name as the dynamic loader gives it (NULL when none).
#[inline(always)]
fn resolve_guarded(idx: usize) -> *mut c_void {
    match panic_guard::catch(|| resolve(idx)) {
        Some(p) => p,
        None => resolve_plain(idx),
    }
}

#[cold]
fn resolve_plain(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p == h.wrapper() {
        core::ptr::null_mut()
    } else {
        p
    }
}

use MemKind::{
    Device, HostPinned, Managed, PoolObject, StreamPool, VmmMap, VmmPhysical, VmmReserve,
};
type Ptr = *mut c_void;
type PPtr = *mut *mut c_void;

list::hook_list!(hooks);

/// Shared body of the set-device hooks: the thread's device is updated even when the
/// call is nested (e.g. cudaSetDevice -> cuCtxSetCurrent); an event is recorded only
/// for a change (kind `set_device`) or a failure (kind `api_span` with the result).
///
/// # Safety
/// `call` calls the real function with the caller's arguments; `new_device` may call
/// into the runtime after a successful call.
unsafe fn set_device_common(
    idx: H,
    fam: Family,
    api: Api,
    handle: u64,
    call: impl FnOnce(*mut c_void) -> c_int,
    new_device: impl FnOnce() -> i32,
) -> c_int {
    let real = resolve_guarded(idx as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    let rec: Option<Pending> =
        panic_guard::catch(|| record::begin::<Lifecycle>(fam, api)).flatten();
    let r = call(real);
    panic_guard::catch(move || {
        let Some(mut p) = rec else {
            if r == 0 {
                thread_state::swap_device(new_device());
            }
            return;
        };
        p.finished(r);
        if r == 0 {
            let d = new_device();
            let prev = thread_state::swap_device(d);
            if prev == d {
                p.discard();
                return;
            }
            p.set_device(d, handle);
        } else {
            p.span(handle);
        }
        p.commit();
    });
    r
}

/// Interposes `hipSetDevice` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn hipSetDevice(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::hipSetDevice,
            Family::Hip,
            Api::HipSetDevice,
            dev as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(dev),
            || dev,
        )
    }
}

/// Interposes `cudaSetDevice` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaSetDevice(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::cudaSetDevice,
            Family::CudaRuntime,
            Api::CudaSetDevice,
            dev as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(dev),
            || dev,
        )
    }
}

static CU_CTX_GET_DEVICE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
/// The real cuCtxSetCurrent that `CU_CTX_GET_DEVICE` was looked up next to.
static CU_CTX_KEY: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The device of the current context, asked of the same library as cuCtxSetCurrent
/// (looked up again when that function changed; no reference to the library is kept).
fn ctx_device() -> i32 {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    let real = resolve(H::cuCtxSetCurrent as usize);
    let mut f = CU_CTX_GET_DEVICE.load(Ordering::Acquire);
    if f.is_null() || CU_CTX_KEY.load(Ordering::Acquire) != real {
        f = core::ptr::null_mut();
        // SAFETY: dladdr fills `info` for an address; the RTLD_NOLOAD handle is closed
        // again and only used to look one name up.
        unsafe {
            let mut info: libc::Dl_info = core::mem::zeroed();
            if !real.is_null() && libc::dladdr(real, &mut info) != 0 && !info.dli_fname.is_null() {
                let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
                if !h.is_null() {
                    f = real_dlsym()(h, c"cuCtxGetDevice".as_ptr());
                    crate::real::real_dlclose()(h);
                    CU_CTX_GET_DEVICE.store(f, Ordering::Release);
                    CU_CTX_KEY.store(real, Ordering::Release);
                }
            }
        }
    }
    if f.is_null() {
        return -1;
    }
    let mut d: c_int = -1;
    // SAFETY: the driver's cuCtxGetDevice, with a valid out-pointer.
    if unsafe { core::mem::transmute::<*mut c_void, F>(f)(&mut d) } != 0 {
        return -1;
    }
    d
}

/// Interposes `cuCtxSetCurrent` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Ptr) -> c_int {
    type F = unsafe extern "C" fn(Ptr) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::cuCtxSetCurrent,
            Family::CudaDriver,
            Api::CuCtxSetCurrent,
            ctx as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(ctx),
            || if ctx.is_null() { -1 } else { ctx_device() },
        )
    }
}

/// Interposes `hipGetProcAddress`: a hooked name's pointer is replaced by its wrapper
/// after a successful lookup ([`wrap_proc`]).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn hipGetProcAddress(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded(H::hipGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc(Family::Hip, sym, pfn, ver, flags) });
    }
    r
}

/// Interposes `cuGetProcAddress` (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64) -> c_int;
    let real = resolve_guarded(H::cuGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc(Family::CudaDriver, sym, pfn, ver, flags) });
    }
    r
}

/// Interposes `cuGetProcAddress_v2` (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded(H::cuGetProcAddress_v2 as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc(Family::CudaDriver, sym, pfn, ver, flags) });
    }
    r
}

/// Index of the hook whose exported name is exactly `name`.
pub fn lookup_exact(name: &[u8]) -> Option<usize> {
    match name.first() {
        Some(b'h') | Some(b'c') => {}
        _ => return None,
    }
    HOOKS.iter().position(|h| h.name().as_bytes() == name)
}

/// What to give the program for hook `h` when its library handed out `p`.
pub fn wrap_result(h: &HookInfo, p: *mut c_void) -> *mut c_void {
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
    fam: Family,
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
